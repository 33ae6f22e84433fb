package scheduler

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/timestamppb"

	workerpb "github.com/gantry-build/gantry/api/worker/v1"
	"github.com/gantry-build/gantry/internal/platform"
	"github.com/gantry-build/gantry/internal/statestore"
)

func commandBytes(args ...string) []byte {
	b, _ := proto.Marshal(&repb.Command{Arguments: args})
	return b
}

func toolMetadata(tool, mnemonic string) []byte {
	b, _ := proto.Marshal(&repb.RequestMetadata{ToolDetails: &repb.ToolDetails{ToolName: tool}, ActionMnemonic: mnemonic})
	return b
}

var linux = platform.Properties{{Name: "OSFamily", Value: "linux"}}

func TestDeriveShapeNormalisesInputPaths(t *testing.T) {
	base := deriveShape("main", linux, commandBytes("gcc", "-c", "bazel-out/k8-fastbuild/bin/a/foo.c", "-o", "bazel-out/k8-fastbuild/bin/a/foo.o"), "CppCompile")
	for _, tc := range []struct {
		name     string
		instance string
		props    platform.Properties
		cmd      []byte
		mnemonic string
		same     bool
	}{
		{"other file and configuration", "main", linux, commandBytes("gcc", "-c", "bazel-out/k8-opt/bin/b/bar.c", "-o", "bazel-out/k8-opt/bin/b/bar.o"), "CppCompile", true},
		{"hash and temporary directory", "main", linux, commandBytes("gcc", "-c", "x/0123456789abcdef0123/y.c", "-o", "/tmp/tmp.Xy12/y.o"), "CppCompile", true},
		{"other flags", "main", linux, commandBytes("gcc", "-O2", "-c", "a/foo.c", "-o", "a/foo.o"), "CppCompile", false},
		{"other mnemonic", "main", linux, commandBytes("gcc", "-c", "a/foo.c", "-o", "a/foo.o"), "CppLink", false},
		{"other instance", "ci", linux, commandBytes("gcc", "-c", "a/foo.c", "-o", "a/foo.o"), "CppCompile", false},
		{"other platform", "main", platform.Properties{{Name: "OSFamily", Value: "macos"}}, commandBytes("gcc", "-c", "a/foo.c", "-o", "a/foo.o"), "CppCompile", false},
	} {
		got := deriveShape(tc.instance, tc.props, tc.cmd, tc.mnemonic)
		if (got.ID == base.ID) != tc.same {
			t.Errorf("%s: same shape = %v, want %v (%q vs %q)", tc.name, got.ID == base.ID, tc.same, got.Label, base.Label)
		}
	}
	over := append(linux[:1:1], platform.Property{Name: ShapeProperty, Value: "unit-test"})
	a := deriveShape("main", over, commandBytes("run", "a"), "TestRunner")
	b := deriveShape("main", over, commandBytes("other", "b", "c"), "")
	if a.ID != b.ID || a.Label != "unit-test" {
		t.Errorf("the %s property does not override the command: %+v vs %+v", ShapeProperty, a, b)
	}
}

func TestShapeHistoryDecaysExponentially(t *testing.T) {
	h, err := NewShapeHistory(context.Background(), statestore.NewMemory(), ShapeOptions{MaxShapes: 10, HalfLife: time.Hour}, nil)
	if err != nil {
		t.Fatal(err)
	}
	k := shapeKey{ID: "k", Label: "k"}
	t0 := time.Unix(1_700_000_000, 0)
	h.Record(k, "-", Sample{Wall: 10 * time.Second}, t0)
	h.Record(k, "-", Sample{Wall: 20 * time.Second}, t0.Add(time.Hour))
	// The first sample counts half: (10x0.5 + 20) / 1.5.
	got, weight := h.Expected("k", t0.Add(time.Hour))
	if want := 50 * time.Second / 3; (got-want).Abs() > time.Millisecond || math.Abs(weight-1.5) > 1e-9 {
		t.Errorf("expected %v (weight %v), want %v (weight 1.5)", got, weight, want)
	}
	if _, w := h.Expected("k", t0.Add(3*time.Hour)); math.Abs(w-0.375) > 1e-9 {
		t.Errorf("weight two half-lives on: %v, want 0.375", w)
	}
}

// TestShapeHistoryIsBoundedAndSurvivesARestart learns through the
// scheduler (Submit, Poll, Complete in virtual time) and reopens the
// store as a restarted process would.
func TestShapeHistoryIsBoundedAndSurvivesARestart(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind.name, func(t *testing.T) {
			ctx := context.Background()
			store, reopen := kind.open(t)
			h, err := NewShapeHistory(ctx, store, ShapeOptions{MaxShapes: 3}, nil)
			if err != nil {
				t.Fatal(err)
			}
			clk := &fakeClock{now: time.Unix(1_700_000_000, 0)}
			s := New(Config{Shapes: h}, clk, nil)
			register(s, "w")
			ids := make([]string, 5)
			for i := range 5 {
				cmd := commandBytes("tool", fmt.Sprintf("--mode=%d", i))
				ids[i] = deriveShape("main", linux, cmd, "").ID
				submit(t, s, fmt.Sprintf("a%d", i), func(r *SubmitRequest) { r.CommandBytes = cmd })
				a := pollNow(t, s, "w", 1)
				clk.Advance(time.Duration(i+1) * time.Second)
				if !s.completeOne("w", a.LeaseID, okResponse()) {
					t.Fatal("the completion was refused")
				}
			}
			if n := h.Len(); n != 3 {
				t.Fatalf("the history keeps %d shapes, want its bound 3", n)
			}
			if err := h.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			h2, err := NewShapeHistory(ctx, reopen(store), ShapeOptions{MaxShapes: 3}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if n := h2.Len(); n != 3 {
				t.Fatalf("after a restart the history has %d shapes, want 3", n)
			}
			for i, id := range ids {
				got, _ := h2.Expected(id, clk.Now())
				want := time.Duration(i+1) * time.Second
				if i < 2 {
					want = 0 // evicted: the least recently run
				}
				if got != want {
					t.Errorf("shape %d after a restart: expected %v, want %v", i, got, want)
				}
			}
		})
	}
}

func TestShapeHistoryLearnsWorkerReportsAndSkipsErrors(t *testing.T) {
	h, err := NewShapeHistory(context.Background(), statestore.NewMemory(), ShapeOptions{MaxShapes: 10}, nil)
	if err != nil {
		t.Fatal(err)
	}
	clk := &fakeClock{now: time.Unix(1_700_000_000, 0)}
	s := New(Config{Shapes: h}, clk, nil)
	register(s, "w")
	cmd := commandBytes("cc", "-c", "x.c")
	id := deriveShape("main", linux, cmd, "").ID

	submit(t, s, "failed", func(r *SubmitRequest) { r.CommandBytes = cmd })
	a := pollNow(t, s, "w", 1)
	clk.Advance(time.Hour)
	s.completeOne("w", a.LeaseID, &repb.ExecuteResponse{Status: &spb.Status{Code: int32(codes.DeadlineExceeded)}, Result: &repb.ActionResult{}})
	if _, w := h.Expected(id, clk.Now()); w != 0 {
		t.Fatalf("a timed-out run was learned (weight %v)", w)
	}

	submit(t, s, "ok", func(r *SubmitRequest) { r.CommandBytes = cmd })
	a = pollNow(t, s, "w", 1)
	start := clk.Now()
	usage, _ := anypb.New(&workerpb.ResourceUsage{UserCpuMicros: 2e6, SystemCpuMicros: 1e6, MaxRssBytes: 1 << 20})
	clk.Advance(time.Minute) // the lease; the worker's timestamps win
	s.completeOne("w", a.LeaseID, &repb.ExecuteResponse{Result: &repb.ActionResult{ExitCode: 3, ExecutionMetadata: &repb.ExecutedActionMetadata{
		ExecutionStartTimestamp: timestamppb.New(start), ExecutionCompletedTimestamp: timestamppb.New(start.Add(4 * time.Second)),
		AuxiliaryMetadata: []*anypb.Any{usage}}}})
	shapes := h.Shapes(0)
	if len(shapes) != 1 {
		t.Fatalf("%d shapes, want 1", len(shapes))
	}
	c := shapes[0].Classes["-"]
	if c == nil || c.Wall != 4 || c.CPU != 3 || c.Memory != 1<<20 || c.ExitCode != 3 {
		t.Errorf("learned %+v, want 4s wall, 3s CPU, 1 MiB, exit code 3", c)
	}
}

// longestFirstTest is a scheduler whose history knows the durations of
// the shapes "sleep N" (N seconds).
func longestFirstTest(t *testing.T, mode LongestFirstMode) (*Scheduler, *fakeClock) {
	t.Helper()
	h, err := NewShapeHistory(context.Background(), statestore.NewMemory(), ShapeOptions{MaxShapes: 100}, nil)
	if err != nil {
		t.Fatal(err)
	}
	clk := &fakeClock{now: time.Unix(1_700_000_000, 0)}
	for _, n := range []int{1, 5, 10, 20, 30} {
		h.Record(deriveShape("main", linux, sleepCmd(n), ""), "-", Sample{Wall: time.Duration(n) * time.Second}, clk.Now())
	}
	return New(Config{Shapes: h, LongestFirst: mode, HeartbeatTimeout: time.Hour}, clk, nil), clk
}

func sleepCmd(n int) []byte { return commandBytes("sleep", fmt.Sprint(n)) }

// submitSleep submits "sleep n" (n < 0: a shape never seen) in
// invocation inv from tool, as action name.
func submitSleep(t *testing.T, s *Scheduler, name, inv, tool string, n int) {
	cmd := sleepCmd(n)
	if n < 0 {
		cmd = commandBytes("unseen", name)
	}
	submit(t, s, name, func(r *SubmitRequest) {
		r.CommandBytes, r.Invocation, r.Metadata = cmd, []string{inv}, toolMetadata(tool, "")
	})
}

func leaseOrder(t *testing.T, s *Scheduler, worker string, n int) []string {
	t.Helper()
	var out []string
	for range n {
		a := pollNow(t, s, worker, 1)
		if a == nil {
			t.Fatalf("nothing to lease after %v", out)
		}
		for _, name := range []string{"s1", "s5", "s10", "s30", "new"} {
			if a.Task.ActionDigest == action(name) {
				out = append(out, name)
			}
		}
	}
	return out
}

func TestLongestFirstWithinAnInvocation(t *testing.T) {
	for _, tc := range []struct {
		mode LongestFirstMode
		tool string
		want string
	}{
		{LongestFirstGantry, "gantry", "[new s30 s10 s5 s1]"},
		{LongestFirstGantry, "bazel", "[s1 s10 new s5 s30]"},
		{LongestFirstAll, "bazel", "[new s30 s10 s5 s1]"},
		{LongestFirstOff, "gantry", "[s1 s10 new s5 s30]"},
	} {
		s, _ := longestFirstTest(t, tc.mode)
		register(s, "w")
		for _, a := range []struct {
			name string
			n    int
		}{{"s1", 1}, {"s10", 10}, {"new", -1}, {"s5", 5}, {"s30", 30}} {
			submitSleep(t, s, a.name, "build", tc.tool, a.n)
		}
		if got := fmt.Sprint(leaseOrder(t, s, "w", 5)); got != tc.want {
			t.Errorf("%s, tool %s: order %s, want %s", tc.mode, tc.tool, got, tc.want)
		}
	}
}

// TestLongestFirstLeavesFairnessBetweenInvocations: which invocation
// each lease goes to is the same with longest first on and off.
func TestLongestFirstLeavesFairnessBetweenInvocations(t *testing.T) {
	invocations := func(mode LongestFirstMode) string {
		s, clk := longestFirstTest(t, mode)
		register(s, "w")
		for i, n := range []int{1, 5, 10, 20, 30, 1, 5} {
			submitSleep(t, s, fmt.Sprintf("a%d", i), "A", "gantry", n)
		}
		for i, n := range []int{30, 1, 20} {
			submitSleep(t, s, fmt.Sprintf("b%d", i), "B", "gantry", n)
		}
		var out []string
		for range 10 {
			a := pollNow(t, s, "w", 1)
			out = append(out, a.Task.invPath[0])
			clk.Advance(time.Second)
			s.completeOne("w", a.LeaseID, okResponse())
		}
		return fmt.Sprint(out)
	}
	on, off := invocations(LongestFirstGantry), invocations(LongestFirstOff)
	if on != off {
		t.Errorf("the invocations served differ: longest first %s, first come %s", on, off)
	}
}

func FuzzDeriveShape(f *testing.F) {
	f.Add("main", commandBytes("gcc", "-c", "bazel-out/k8-opt/bin/a.c"), "CppCompile", "")
	f.Add("", []byte{0xff, 0x01}, "", "x")
	f.Fuzz(func(t *testing.T, instance string, cmd []byte, mnemonic, override string) {
		props := linux
		if override != "" {
			props = platform.Properties{{Name: ShapeProperty, Value: override}}
		}
		a := deriveShape(instance, props, cmd, mnemonic)
		if a != deriveShape(instance, props, cmd, mnemonic) || len(a.ID) != 32 || len(a.Label) > maxShapeLabel+len("…") {
			t.Fatalf("unstable or unbounded shape %+v", a)
		}
	})
}

func FuzzDecodeShape(f *testing.F) {
	f.Add([]byte(`{"label":"x","classes":{"-":{"n":1,"wall":2,"at":"2026-01-01T00:00:00Z"}},"last":"2026-01-01T00:00:00Z"}`))
	f.Add([]byte(`{"classes":{"-":null}}`))
	f.Fuzz(func(t *testing.T, value []byte) {
		store := statestore.NewMemory()
		if err := store.Apply(context.Background(), []statestore.Mutation{{Kind: shapeKind, Key: "k", Value: value}}); err != nil {
			t.Fatal(err)
		}
		h, err := NewShapeHistory(context.Background(), store, ShapeOptions{MaxShapes: 2}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if exp, w := h.Expected("k", time.Unix(1_800_000_000, 0)); exp < 0 || w < 0 || math.IsNaN(w) {
			t.Fatalf("a stored record gives expected %v, weight %v", exp, w)
		}
		h.Record(shapeKey{ID: "k"}, "c", Sample{Wall: time.Second}, time.Unix(1_800_000_000, 0))
	})
}

func TestNormalizeArg(t *testing.T) {
	for in, want := range map[string]string{
		"-Ibazel-out/k8-fastbuild/bin/x":   "-Ibazel-out/_/bin/x",
		"--out=bazel-out/k8-opt/bin/a/b.o": "--out=_.o",
		"/tmp/abc/def":                     "/tmp/_/def",
		"--hash=0123456789abcdef0123abc":   "--hash=#",
		"a.c:b.h":                          "_.c:_.h",
		"-O2":                              "-O2",
		"python3.11":                       "python3.11",
	} {
		if got := normalizeArg(in); got != want {
			t.Errorf("normalizeArg(%q) = %q, want %q", in, got, want)
		}
	}
}

// A task that finishes any way (completed, killed) lets go of its shape.
func TestShapesAreLetGoWhenTasksEnd(t *testing.T) {
	s, _ := longestFirstTest(t, LongestFirstOff)
	register(s, "w")
	submitSleep(t, s, "done", "build", "bazel", 5)
	killed := ""
	submit(t, s, "killed", func(r *SubmitRequest) { r.CommandBytes = sleepCmd(10) })
	for name, op := range s.ops {
		if op.task.ActionDigest == action("killed") {
			killed = name
		}
	}
	a := pollNow(t, s, "w", 1)
	s.completeOne("w", a.LeaseID, okResponse())
	if _, err := s.Kill(killed, "test", 0); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := len(s.shapeOf); n != 0 {
		t.Errorf("%d shapes kept for finished tasks", n)
	}
}
