package scheduler

import (
	"context"
	"fmt"
	"testing"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/protobuf/types/known/durationpb"

	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"

	"github.com/gantry-build/gantry/internal/platform"
	"github.com/gantry-build/gantry/internal/statestore"
)

// TestShapesSurviveARestart: tasks queued before a restart keep their
// shapes on the same store: the restarted scheduler hands them out
// longest expected first (with the critical path the client told, and
// a shape named by the gantry-action-shape property), with their learned
// timeouts, not in the order they came.
func TestShapesSurviveARestart(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind.name, func(t *testing.T) {
			ctx := context.Background()
			store, reopen := kind.open(t)
			clk := &fakeClock{now: time.Unix(1_700_000_000, 0)}
			over := append(linux[:1:1], platform.Property{Name: ShapeProperty, Value: "slow-test"})
			start := func(store statestore.Store) (*Scheduler, *ShapeHistory, func()) {
				return shapedScheduler(t, store, clk)
			}
			s, h, stop := start(store)
			for range 3 {
				for _, n := range []int{1, 5, 30} {
					h.Record(deriveShape("main", linux, sleepCmd(n), ""), "-", Sample{Wall: time.Duration(n) * time.Second}, clk.Now())
				}
				h.Record(deriveShape("main", over, commandBytes("run-tests"), ""), "-", Sample{Wall: 20 * time.Second}, clk.Now())
			}
			names := map[string]string{}
			for _, a := range []struct {
				name  string
				cmd   []byte
				props platform.Properties
				tail  time.Duration
			}{
				{"s5", sleepCmd(5), linux, 0},
				{"slow-test", commandBytes("run-tests"), over, 0},
				{"s30", sleepCmd(30), linux, 0},
				{"s1", sleepCmd(1), linux, time.Minute},
			} {
				op := submit(t, s, a.name, func(r *SubmitRequest) {
					r.CommandBytes, r.Platform, r.Invocation, r.Metadata, r.CriticalPath = a.cmd, a.props, []string{"build"}, toolMetadata("gantry", ""), a.tail
					r.Action = &repb.Action{Timeout: durationpb.New(time.Hour)}
				})
				names[op] = a.name
			}
			if err := h.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			stop()

			s2, _, stop2 := start(reopen(store))
			defer stop2()
			register(s2, "w")
			var order []string
			timeouts := map[string]time.Duration{}
			for range names {
				a := pollNow(t, s2, "w", 1)
				if a == nil {
					t.Fatalf("nothing to lease after %v", order)
				}
				name := names[a.Task.ops[0].Name]
				order = append(order, name)
				timeouts[name] = a.Timeout
			}
			if got, want := fmt.Sprint(order), "[s1 s30 slow-test s5]"; got != want {
				t.Errorf("order after the restart %s, want %s", got, want)
			}
			want := map[string]time.Duration{"s1": 3 * time.Second, "s5": 15 * time.Second, "s30": 90 * time.Second, "slow-test": time.Minute}
			for name, w := range want {
				if timeouts[name] != w {
					t.Errorf("%s after the restart: timeout %v, want the learned %v", name, timeouts[name], w)
				}
			}
		})
	}
}

// shapedScheduler is a scheduler attached to store with a duration
// history in it, longest first for gantry's invocations and learned
// timeouts of 3 x expected (floor 1s) after 3 runs; stop ends it.
func shapedScheduler(t *testing.T, store statestore.Store, clk *fakeClock) (s *Scheduler, h *ShapeHistory, stop func()) {
	t.Helper()
	h, err := NewShapeHistory(context.Background(), store, ShapeOptions{MaxShapes: 100}, nil)
	if err != nil {
		t.Fatal(err)
	}
	s = New(Config{Shapes: h, LongestFirst: LongestFirstGantry, HeartbeatTimeout: time.Hour, CallerGrace: time.Hour,
		LearnedTimeouts: LearnedTimeouts{Multiple: 3, Floor: time.Second, MinSamples: 3}}, clk, nil)
	ctx, cancel := context.WithCancel(context.Background())
	if err := s.Attach(ctx, store); err != nil {
		t.Fatal(err)
	}
	return s, h, func() { cancel(); <-s.Stopped() }
}

// Learned timeouts across a restart: the retry of an action whose
// learned timeout fired, leased with the client's timeout, finishes when
// that fires; an action leased with a learned timeout keeps it, and
// when it fires the action is retried with the client's.
func TestLearnedTimeoutStateSurvivesARestart(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind.name, func(t *testing.T) {
			store, reopen := kind.open(t)
			clk := &fakeClock{now: time.Unix(1_700_000_000, 0)}
			s, h, stop := shapedScheduler(t, store, clk)
			for range 3 {
				h.Record(deriveShape("main", linux, sleepCmd(10), ""), "-", Sample{Wall: 10 * time.Second}, clk.Now())
			}
			register(s, "w")
			hour := func(r *SubmitRequest) {
				r.CommandBytes, r.Action = sleepCmd(10), &repb.Action{Timeout: durationpb.New(time.Hour)}
			}
			deadline := func() *repb.ExecuteResponse {
				return &repb.ExecuteResponse{Status: &rpcstatus.Status{Code: int32(codes.DeadlineExceeded)}, Result: &repb.ActionResult{}}
			}
			fired := submit(t, s, "fired", hour)
			a := pollNow(t, s, "w", 1)
			if a.Timeout != 30*time.Second {
				t.Fatalf("learned timeout %v, want 30s", a.Timeout)
			}
			clk.Advance(30 * time.Second)
			s.completeOne("w", a.LeaseID, deadline())
			retry := pollNow(t, s, "w", 1)
			if retry == nil || retry.Task.ops[0].Name != fired || retry.Timeout != 0 {
				t.Fatalf("the retry %+v, want %s with the client's timeout", retry, fired)
			}
			leased := submit(t, s, "leased", hour)
			l := pollNow(t, s, "w", 1)
			if l == nil || l.Task.ops[0].Name != leased || l.Timeout != 30*time.Second {
				t.Fatalf("lease %+v, want %s with the learned 30s", l, leased)
			}
			if err := h.Flush(context.Background()); err != nil {
				t.Fatal(err)
			}
			stop()

			s2, _, stop2 := shapedScheduler(t, reopen(store), clk)
			defer stop2()
			register(s2, "w")
			if _, err := s2.Heartbeat("w", []LeaseReport{{LeaseID: retry.LeaseID}, {LeaseID: l.LeaseID}}); err != nil {
				t.Fatal(err)
			}
			s2.completeOne("w", retry.LeaseID, deadline())
			if st := state(t, s2, fired); !st.Done || st.Response.GetStatus().GetCode() != int32(codes.DeadlineExceeded) {
				t.Errorf("the retry with the client's timeout did not finish the action when it fired: %+v", st)
			}
			s2.completeOne("w", l.LeaseID, deadline())
			if st := state(t, s2, leased); st.Done {
				t.Fatalf("the learned timeout of the restored lease fired and failed the action: %v", st.Response)
			}
			again := pollNow(t, s2, "w", 1)
			if again == nil || again.Task.ops[0].Name != leased || again.Timeout != 0 {
				t.Errorf("after the restart the retry is %+v, want %s with the client's timeout", again, leased)
			}
		})
	}
}

// A task record keeps its shape (version 2), and one without a shape
// stays a version 1 record, as before.
func TestTaskRecordKeepsItsShape(t *testing.T) {
	task, _, _ := sampleRecords()
	if b := task.marshal(); b[0] != recordV1 {
		t.Errorf("a task without a shape is stored as version %d, want 1", b[0])
	}
	task.Shape = &taskShapeRecord{ID: "0123456789abcdef0123456789abcdef", Label: "CppCompile gcc -c _.c", Longest: true, Client: time.Hour, Tail: 90 * time.Second}
	b := task.marshal()
	var got taskRecord
	if err := got.unmarshal(b); err != nil {
		t.Fatal(err)
	}
	if b[0] != recordTaskV2 || got.Shape == nil || *got.Shape != *task.Shape || got.Queue != task.Queue {
		t.Errorf("version %d, shape %+v; want version 2 and %+v", b[0], got.Shape, task.Shape)
	}
	if spare := cap(b) - len(b); spare > 128 {
		t.Errorf("%d bytes in a buffer of %d", len(b), cap(b))
	}
}
