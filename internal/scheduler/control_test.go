package scheduler

import (
	"fmt"
	"testing"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
)

func TestFailuresRingKeepsTheNewest(t *testing.T) {
	s := New(Config{}, nil, nil)
	fail := func(i int) {
		op := &Operation{Name: fmt.Sprint("op", i), task: &Task{Instance: "i"}}
		resp := &repb.ExecuteResponse{Result: &repb.ActionResult{ExitCode: int32(i%7 + 1)}}
		if i%2 == 0 {
			resp = &repb.ExecuteResponse{Status: &rpcstatus.Status{Code: int32(codes.Internal), Message: "boom"}}
		}
		s.mu.Lock()
		s.noteFinishedLocked(op, resp)
		// Successes are not kept.
		s.noteFinishedLocked(&Operation{Name: "ok", task: &Task{}}, &repb.ExecuteResponse{Result: &repb.ActionResult{}})
		s.mu.Unlock()
	}
	for i := 0; i < 3; i++ {
		fail(i)
	}
	fs, total := s.Failures(0, 10)
	if total != 3 || len(fs) != 3 || fs[0].Name != "op2" || fs[2].Name != "op0" || fs[0].Code != codes.Internal || fs[1].ExitCode != 2 {
		t.Fatalf("after 3: %d %+v", total, fs)
	}
	for i := 3; i < maxFailures+20; i++ {
		fail(i)
	}
	fs, total = s.Failures(0, 2)
	if total != maxFailures || fs[0].Name != fmt.Sprint("op", maxFailures+19) || fs[1].Name != fmt.Sprint("op", maxFailures+18) {
		t.Fatalf("newest after wrapping: %d %+v", total, fs)
	}
	fs, _ = s.Failures(maxFailures-1, 10)
	if len(fs) != 1 || fs[0].Name != "op20" {
		t.Fatalf("oldest kept: %+v", fs)
	}
	if fs, _ := s.Failures(maxFailures, 10); len(fs) != 0 {
		t.Fatalf("past the end: %+v", fs)
	}
}

func TestHeldWorkerGetsNoWorkUntilReleased(t *testing.T) {
	s, _ := newTest(t)
	register(s, "w")
	if _, err := s.ControlWorker("nope", func(c *WorkerControl) { c.Drain = true }); err == nil {
		t.Fatal("control of an unknown worker")
	}
	if _, err := s.ControlWorker("w", func(c *WorkerControl) { c.Pause = true }); err != nil {
		t.Fatal(err)
	}
	submit(t, s, "a")
	// A poll while held parks; releasing the worker hands it the work.
	got := make(chan *Assignment, 1)
	go func() {
		a, _ := s.Poll(t.Context(), "w", Capacity{Cores: 1})
		got <- a
	}()
	deadline := time.Now().Add(30 * time.Second)
	for !s.Workers()[0].Polling {
		if time.Now().After(deadline) {
			t.Fatal("the poll never parked")
		}
		time.Sleep(time.Millisecond)
	}
	select {
	case a := <-got:
		t.Fatalf("a paused worker got %v", a)
	default:
	}
	if c, _ := s.ControlWorker("w", func(c *WorkerControl) { c.Pause = false }); c != (WorkerControl{}) {
		t.Fatalf("controls after resume: %+v", c)
	}
	if a := receive(t, "assignment", got); a == nil {
		t.Fatal("the resumed worker's poll got nothing")
	}
	if len(s.WorkerControls()) != 0 {
		t.Error("an empty control is kept")
	}
}

// TestFinishedOperationKeepsItsInvocation: an operation's invocation path
// stays in its OperationInfo after it finishes (the trie lets the node
// go), also for callers that joined a task from another invocation (the
// common ancestor) and for a killed operation.
func TestFinishedOperationKeepsItsInvocation(t *testing.T) {
	s, _ := newQueueTest(t, nil)
	register(s, "w")
	same := func(r *SubmitRequest) { r.ActionDigest = action("shared") }
	a := submit(t, s, "a", same, func(r *SubmitRequest) { r.Invocation = []string{"u1", "b1", "t1"} })
	b := submit(t, s, "b", same, func(r *SubmitRequest) { r.Invocation = []string{"u1", "b2", "t1"} })
	k := submit(t, s, "k", func(r *SubmitRequest) { r.Invocation = []string{"u2", "b9"} })
	inv := func(name string) string {
		t.Helper()
		info, err := s.Operation(name)
		if err != nil {
			t.Fatal(err)
		}
		return fmt.Sprintf("%q", info.Invocation)
	}
	check := func(when string) {
		t.Helper()
		for name, want := range map[string]string{a: `["u1"]`, b: `["u1"]`, k: `["u2" "b9"]`} {
			if got := inv(name); got != want {
				t.Errorf("%s: operation %s invocation %s, want %s", when, name, got, want)
			}
		}
	}
	check("queued")
	as := pollNow(t, s, "w", 1)
	if as == nil {
		t.Fatal("nothing leased")
	}
	if !s.completeOne("w", as.LeaseID, okResponse()) {
		t.Fatal("complete failed")
	}
	if _, err := s.Kill(k, "test", 0); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{a, b, k} {
		if info, _ := s.Operation(name); !info.Done {
			t.Fatalf("operation %s is not done", name)
		}
	}
	check("finished")
	// The trie forgot the killed one's invocation (the worker keeps u1,
	// its last).
	for _, st := range s.Invocations() {
		if len(st.Path) > 0 && st.Path[0] == "u2" {
			t.Errorf("invocation %v still in the trie after its operation finished", st.Path)
		}
	}
}
