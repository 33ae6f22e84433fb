package scheduler

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"

	"github.com/gantry-build/gantry/internal/platform"
	"github.com/gantry-build/gantry/internal/statestore"
)

// testClasses are a small class of 4 cores and 8 GiB and a large one of
// 16 cores and 64 GiB.
var testClasses = []SizeClass{{Name: "small", Cores: 4, Memory: 8 << 30}, {Name: "large", Cores: 16, Memory: 64 << 30}}

// sizeClassTest is a scheduler with testClasses over history h (a new
// one when nil), exploration off unless explore, and the RNG seeded with
// seed; a worker of each class, "small" and "large", is registered.
func sizeClassTest(t testing.TB, h *ShapeHistory, explore float64, seed uint64) (*Scheduler, *fakeClock, *ShapeHistory) {
	t.Helper()
	if h == nil {
		var err error
		if h, err = NewShapeHistory(context.Background(), statestore.NewMemory(), ShapeOptions{MaxShapes: 100}, nil); err != nil {
			t.Fatal(err)
		}
	}
	sc, err := NewSizeClasses(testClasses, SizeClassOptions{MaxSlowdown: 1.5, Exploration: explore, LearnedResources: true}, rand.New(rand.NewPCG(seed, seed)))
	if err != nil {
		t.Fatal(err)
	}
	clk := &fakeClock{now: time.Unix(1_700_000_000, 0)}
	s := New(Config{Shapes: h, SizeClasses: sc, HeartbeatTimeout: time.Hour}, clk, nil)
	registerPlatform(s, "small", platform.Worker{Cores: 4, MemoryBytes: 8 << 30, AllowUnmatched: true})
	registerPlatform(s, "large", platform.Worker{Cores: 16, MemoryBytes: 64 << 30, AllowUnmatched: true})
	return s, clk, h
}

// learn records a run of "sleep n" taking wall on class (its worker
// exiting with exit).
func learn(h *ShapeHistory, n int, class string, wall time.Duration, exit int32, now time.Time) {
	h.Record(deriveShape("main", linux, sleepCmd(n), ""), sizeHistoryPrefix+class, Sample{Wall: wall, ExitCode: exit}, now)
}

func submitShape(t *testing.T, s *Scheduler, name string, n int) string {
	t.Helper()
	return submit(t, s, name, func(r *SubmitRequest) { r.CommandBytes = sleepCmd(n) })
}

// classOfNext says which worker takes the next queued action: the
// small one is asked first; "" when neither takes one.
func classOfNext(t *testing.T, s *Scheduler) (string, *Assignment) {
	t.Helper()
	for _, w := range []string{"small", "large"} {
		if a := pollNow(t, s, w, 16); a != nil {
			if got := a.Task.Req.Properties.Values(SizeClassProperty); len(got) != 1 || got[0] != w {
				t.Fatalf("worker %s took an action of class %v", w, got)
			}
			return w, a
		}
	}
	return "", nil
}

func TestSizeClassChoice(t *testing.T) {
	for _, tc := range []struct {
		name  string
		learn func(h *ShapeHistory, now time.Time)
		want  string
	}{
		{"unseen starts on the largest", func(*ShapeHistory, time.Time) {}, "large"},
		{"only the largest seen", func(h *ShapeHistory, now time.Time) { learn(h, 1, "large", 10*time.Second, 0, now) }, "large"},
		{"small within max_slowdown", func(h *ShapeHistory, now time.Time) {
			learn(h, 1, "large", 10*time.Second, 0, now)
			learn(h, 1, "small", 14*time.Second, 0, now)
		}, "small"},
		{"small too slow", func(h *ShapeHistory, now time.Time) {
			learn(h, 1, "large", 10*time.Second, 0, now)
			learn(h, 1, "small", 16*time.Second, 0, now)
		}, "large"},
		{"small failed last", func(h *ShapeHistory, now time.Time) {
			learn(h, 1, "large", 10*time.Second, 0, now)
			learn(h, 1, "small", 10*time.Second, 0, now)
			h.RecordFailure(deriveShape("main", linux, sleepCmd(1), ""), sizeHistoryPrefix+"small", now.Add(time.Second))
		}, "large"},
		{"peak memory above the small class's", func(h *ShapeHistory, now time.Time) {
			h.Record(deriveShape("main", linux, sleepCmd(1), ""), sizeHistoryPrefix+"large", Sample{Wall: 10 * time.Second, PeakMemory: 12 << 30}, now)
			learn(h, 1, "small", 10*time.Second, 0, now)
		}, "large"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, clk, h := sizeClassTest(t, nil, 0, 1)
			tc.learn(h, clk.Now())
			submitShape(t, s, "a", 1)
			if got, _ := classOfNext(t, s); got != tc.want {
				t.Errorf("ran on %q, want %q", got, tc.want)
			}
		})
	}
}

// A large-class action at the head of the queue does not keep the small
// worker from the small-class action queued behind it.
func TestQueuedLargeClassActionDoesNotBlockSmallWorker(t *testing.T) {
	s, clk, h := sizeClassTest(t, nil, 0, 1)
	learn(h, 1, "large", 10*time.Second, 0, clk.Now())
	learn(h, 1, "small", 11*time.Second, 0, clk.Now())
	submit(t, s, "unseen", func(r *SubmitRequest) { r.CommandBytes = commandBytes("never", "seen") })
	submitShape(t, s, "known", 1)
	a := pollNow(t, s, "small", 4)
	if a == nil || a.Task.ActionDigest != action("known") {
		t.Fatalf("the small worker got %+v, want the small-class action queued second", a)
	}
	if a := pollNow(t, s, "small", 4); a != nil {
		t.Fatalf("the small worker took the large-class action %v", a.Task.ActionDigest)
	}
	if a := pollNow(t, s, "large", 16); a == nil || a.Task.ActionDigest != action("unseen") {
		t.Fatalf("the large worker got %+v, want the unseen action", a)
	}
}

func TestSizeClassFallback(t *testing.T) {
	exited := func(code int32) *repb.ExecuteResponse {
		return &repb.ExecuteResponse{Result: &repb.ActionResult{ExitCode: code}}
	}
	for _, tc := range []struct {
		name     string
		resp     *repb.ExecuteResponse
		largeOK  bool
		fallback bool
	}{
		{"non-zero exit where the large class succeeded", exited(137), true, true},
		{"timeout", &repb.ExecuteResponse{Status: &spb.Status{Code: int32(codes.DeadlineExceeded), Message: "timed out"}, Result: &repb.ActionResult{}}, true, true},
		{"resource exhausted", &repb.ExecuteResponse{Status: &spb.Status{Code: int32(codes.ResourceExhausted), Message: "disk full"}}, true, true},
		{"non-zero exit that the large class had too", exited(1), false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, clk, h := sizeClassTest(t, nil, 0, 1)
			largeExit := int32(1)
			if tc.largeOK {
				largeExit = 0
			}
			learn(h, 1, "large", 10*time.Second, largeExit, clk.Now())
			learn(h, 1, "small", 11*time.Second, largeExit, clk.Now())
			op := submitShape(t, s, "a", 1)
			class, a := classOfNext(t, s)
			if class != "small" {
				t.Fatalf("first run on %q, want small", class)
			}
			clk.Advance(11 * time.Second)
			s.completeOne("small", a.LeaseID, tc.resp)
			st := state(t, s, op)
			if !tc.fallback {
				if !st.Done || st.Response.GetResult().GetExitCode() != 1 {
					t.Fatalf("a failure the large class shares was not the result: %+v", st)
				}
				return
			}
			if st.Done {
				t.Fatalf("the operation finished with the small class's failure: %v", st.Response)
			}
			if len(st.Retries) != 1 || st.Retries[0].Kind != RetrySizeClass || !strings.Contains(st.Retries[0].Reason, "running again on large") {
				t.Errorf("retries %+v, want one %q to large", st.Retries, RetrySizeClass)
			}
			class, a = classOfNext(t, s)
			if class != "large" || a.Task.ActionDigest != action("a") {
				t.Fatalf("the retry ran on %q, want large", class)
			}
			clk.Advance(10 * time.Second)
			s.completeOne("large", a.LeaseID, okResponse())
			if st := state(t, s, op); !st.Done || st.Response.GetResult().GetExitCode() != 0 {
				t.Fatalf("the retry's result: %+v", st)
			}
			// The next run of the shape starts on the large class.
			submitShape(t, s, "b", 1)
			if class, _ := classOfNext(t, s); class != "large" {
				t.Errorf("after the failure the next run went to %q, want large", class)
			}
		})
	}
}

// Of runs whose choice is the large class, about the exploration share
// go to the small one, the same ones for the same seed; with the small
// class chosen there is nothing smaller to explore.
func TestSizeClassExplorationShare(t *testing.T) {
	const runs = 2000
	explored := func(seed uint64, smallWall time.Duration) (int, string) {
		s, clk, h := sizeClassTest(t, nil, 0.05, seed)
		learn(h, 1, "large", 10*time.Second, 0, clk.Now())
		learn(h, 1, "small", smallWall, 0, clk.Now())
		var small int
		var pattern strings.Builder
		for i := range runs {
			submitShape(t, s, fmt.Sprint("a", i), 1)
			class, a := classOfNext(t, s)
			if class == "small" {
				small++
				pattern.WriteString(fmt.Sprint(i, ","))
			}
			s.completeOne(class, a.LeaseID, okResponse())
		}
		return small, pattern.String()
	}
	n, p1 := explored(7, 30*time.Second)
	if share := float64(n) / runs; share < 0.035 || share > 0.065 {
		t.Errorf("%d of %d runs (%.3f) explored the small class, want about 0.05", n, runs, share)
	}
	if _, p2 := explored(7, 30*time.Second); p1 != p2 {
		t.Error("the same seed explored different runs")
	}
	if n, _ := explored(7, 11*time.Second); n != runs {
		t.Errorf("%d of %d runs on the chosen small class, want all", n, runs)
	}
}

// The history per class is stored: a restarted scheduler places a shape
// on the small class from what the runs before the restart taught, and a
// record of the history from before size classes (per cohort) still
// loads.
func TestSizeClassHistorySurvivesRestart(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind.name, func(t *testing.T) {
			ctx := context.Background()
			store, reopen := kind.open(t)
			old := []byte(`{"label":"old","classes":{"-":{"n":2,"wall":3,"at":"2026-01-01T00:00:00Z"}},"last":"2026-01-01T00:00:00Z"}`)
			if err := store.Apply(ctx, []statestore.Mutation{{Kind: shapeKind, Key: "old", Value: old}}); err != nil {
				t.Fatal(err)
			}
			h, err := NewShapeHistory(ctx, store, ShapeOptions{MaxShapes: 10}, nil)
			if err != nil {
				t.Fatal(err)
			}
			s, clk, _ := sizeClassTest(t, h, 0, 1)
			// The unseen shape runs on large; it is taught small's time by
			// hand (as exploration would), then learns through the runs.
			submitShape(t, s, "first", 1)
			class, a := classOfNext(t, s)
			clk.Advance(10 * time.Second)
			s.completeOne(class, a.LeaseID, okResponse())
			learn(h, 1, "small", 12*time.Second, 0, clk.Now())
			submitShape(t, s, "second", 1)
			if class, a = classOfNext(t, s); class != "small" {
				t.Fatalf("before the restart the shape ran on %q, want small", class)
			}
			clk.Advance(12 * time.Second)
			s.completeOne(class, a.LeaseID, okResponse())
			if err := h.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			h2, err := NewShapeHistory(ctx, reopen(store), ShapeOptions{MaxShapes: 10}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if h2.Len() != 2 {
				t.Fatalf("after the restart %d shapes, want 2 (the old record and the new)", h2.Len())
			}
			s2, _, _ := sizeClassTest(t, h2, 0, 1)
			submitShape(t, s2, "third", 1)
			if class, _ := classOfNext(t, s2); class != "small" {
				t.Errorf("after the restart the shape ran on %q, want small", class)
			}
		})
	}
}

// Cores and memory learned from the history fill min-cores and min-mem
// of an action that states none, within its class; an action that
// states them keeps its own.
func TestSizeClassLearnedResources(t *testing.T) {
	s, clk, h := sizeClassTest(t, nil, 0, 1)
	h.Record(deriveShape("main", linux, sleepCmd(1), ""), sizeHistoryPrefix+"large", Sample{Wall: 10 * time.Second, CPU: 60 * time.Second, PeakMemory: 3 << 30}, clk.Now())
	submitShape(t, s, "a", 1)
	_, a := classOfNext(t, s)
	if a == nil || a.Task.Req.Cores != 6 || a.Task.Req.MinMem != 4<<30 {
		t.Fatalf("the request is %+v, want 6 cores and 4 GiB learned", a.Task.Req)
	}
	submit(t, s, "b", func(r *SubmitRequest) {
		r.CommandBytes = sleepCmd(1)
		r.Platform = append(linux[:1:1], platform.Property{Name: platform.MinCores, Value: "2"})
	})
	_, a = classOfNext(t, s)
	if a == nil || a.Task.Req.Cores != 2 {
		t.Fatalf("the request is %+v, want the action's own 2 cores", a.Task.Req)
	}
}

// When the last worker of a class goes, its queued actions move to a
// class that has workers.
func TestSizeClassRehomesWhenAClassIsGone(t *testing.T) {
	s, clk, h := sizeClassTest(t, nil, 0, 1)
	learn(h, 1, "large", 10*time.Second, 0, clk.Now())
	learn(h, 1, "small", 10*time.Second, 0, clk.Now())
	if err := s.AddWatcher(submitShape(t, s, "a", 1)); err != nil {
		t.Fatal(err)
	}
	clk.Advance(2 * time.Hour) // both workers fall silent
	registerPlatform(s, "large", platform.Worker{Cores: 16, MemoryBytes: 64 << 30, AllowUnmatched: true})
	s.Tick()
	if a := pollNow(t, s, "large", 16); a == nil {
		t.Fatal("the small-class action stayed with no small worker left")
	}
}

// With no size classes, workers and requests are as before.
func TestSizeClassesOff(t *testing.T) {
	s, _ := newTest(t)
	register(s, "w")
	submit(t, s, "a")
	a := pollNow(t, s, "w", 1)
	if len(a.Task.Req.Properties.Values(SizeClassProperty)) != 0 || len(s.workers["w"].info.Platform.Properties) != 0 {
		t.Errorf("size classes off, yet a class was set: %+v", a.Task.Req)
	}
}

func TestNewSizeClassesChecks(t *testing.T) {
	ok := SizeClassOptions{MaxSlowdown: 1.5, Exploration: 0.05}
	for _, tc := range []struct {
		classes []SizeClass
		opts    SizeClassOptions
		want    string
	}{
		{nil, ok, "at least one class"},
		{[]SizeClass{{Name: "a b"}}, ok, "non-empty word"},
		{[]SizeClass{{Name: "a"}, {Name: "a"}}, ok, "defined twice"},
		{[]SizeClass{{Name: "big", Cores: 16}, {Name: "small", Cores: 4}}, ok, "smallest first"},
		{testClasses, SizeClassOptions{MaxSlowdown: 0.5}, "max_slowdown"},
		{testClasses, SizeClassOptions{MaxSlowdown: 1.5, Exploration: 1}, "exploration"},
	} {
		if _, err := NewSizeClasses(tc.classes, tc.opts, nil); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v %+v: error %v, want one saying %q", tc.classes, tc.opts, err, tc.want)
		}
	}
}

// A run pinned to a class is of the same shape as the unpinned runs:
// pinning teaches the history that class's time.
func TestSizeClassPropertyIsNotPartOfTheShape(t *testing.T) {
	pinned := append(linux[:1:1], platform.Property{Name: SizeClassProperty, Value: "small"})
	if a, b := deriveShape("main", linux, sleepCmd(1), ""), deriveShape("main", pinned, sleepCmd(1), ""); a.ID != b.ID {
		t.Errorf("pinning the class changed the shape: %+v vs %+v", a, b)
	}
}

// Why a worker of another class does not take an action says it waits
// for its class.
func TestSizeClassRefusalSaysWhy(t *testing.T) {
	s, _, _ := sizeClassTest(t, nil, 0, 1)
	op := submitShape(t, s, "a", 1) // unseen: the large class
	why, err := s.WhyQueued(op)
	if err != nil {
		t.Fatal(err)
	}
	text := fmt.Sprintf("%+v", why)
	if !strings.Contains(text, "waits for a worker of size class large") {
		t.Errorf("the small worker's refusal does not say the action waits for its class: %s", text)
	}
}
