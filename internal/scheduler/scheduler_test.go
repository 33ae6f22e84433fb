package scheduler

import (
	"context"
	"sync"
	"testing"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/grpc/codes"

	"github.com/gantry-build/gantry/internal/digest"
	"github.com/gantry-build/gantry/internal/platform"
)

type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func newTest(t *testing.T) (*Scheduler, *fakeClock) {
	t.Helper()
	clk := &fakeClock{now: time.Unix(1_700_000_000, 0)}
	return New(Config{HeartbeatTimeout: 10 * time.Second, CallerGrace: time.Minute, MaxAttempts: 3, Retention: time.Hour}, clk, nil), clk
}

func action(name string) digest.Digest { return digest.Compute(digest.SHA256, []byte(name)) }

func submit(t *testing.T, s *Scheduler, name string, mod ...func(*SubmitRequest)) string {
	t.Helper()
	req := SubmitRequest{Instance: "main", ActionDigest: action(name), Platform: platform.Properties{{Name: "OSFamily", Value: "linux"}}}
	for _, m := range mod {
		m(&req)
	}
	op, err := s.Submit(req)
	if err != nil {
		t.Fatal(err)
	}
	return op
}

func register(s *Scheduler, id string, props ...platform.Property) {
	s.RegisterWorker(WorkerInfo{ID: id, Platform: platform.Worker{Properties: props, AllowUnmatched: len(props) == 0, Cores: 4}, Slots: 4})
}

// pollNow polls without waiting.
func pollNow(t *testing.T, s *Scheduler, worker string, cores int) *Assignment {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	a, err := s.Poll(ctx, worker, Capacity{Cores: cores})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func state(t *testing.T, s *Scheduler, op string) OperationState {
	t.Helper()
	st, _, err := s.Watch(op)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func okResponse() *repb.ExecuteResponse { return &repb.ExecuteResponse{Result: &repb.ActionResult{}} }

func TestPriorityThenFIFO(t *testing.T) {
	s, _ := newTest(t)
	register(s, "w")
	submit(t, s, "a", func(r *SubmitRequest) { r.Priority = 5 })
	submit(t, s, "b", func(r *SubmitRequest) { r.Priority = 1 })
	submit(t, s, "c", func(r *SubmitRequest) { r.Priority = 5 })
	submit(t, s, "d", func(r *SubmitRequest) { r.Priority = -3 })
	var got []digest.Digest
	for range 4 {
		a := pollNow(t, s, "w", 1)
		if a == nil {
			t.Fatal("no assignment")
		}
		got = append(got, a.Task.ActionDigest)
	}
	want := []digest.Digest{action("d"), action("b"), action("a"), action("c")}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("order[%d] = %v, want %v", i, got[i], want[i])
		}
	}
	if a := pollNow(t, s, "w", 1); a != nil {
		t.Fatal("queue should be empty")
	}
}

func TestDeduplicationSharesOneExecution(t *testing.T) {
	s, _ := newTest(t)
	register(s, "w")
	op1 := submit(t, s, "same")
	op2 := submit(t, s, "same")
	op3 := submit(t, s, "same", func(r *SubmitRequest) { r.Instance = "other" })
	op4 := submit(t, s, "same", func(r *SubmitRequest) { r.DoNotCache = true })
	if op1 == op2 {
		t.Fatal("operations must have distinct names")
	}
	var leases []*Assignment
	for a := pollNow(t, s, "w", 1); a != nil; a = pollNow(t, s, "w", 1) {
		leases = append(leases, a)
	}
	if len(leases) != 3 {
		t.Fatalf("got %d executions, want 3 (shared one, other instance, do_not_cache)", len(leases))
	}
	for _, a := range leases {
		if !s.completeOne("w", a.LeaseID, okResponse()) {
			t.Fatal("completion refused")
		}
	}
	for _, op := range []string{op1, op2, op3, op4} {
		if st := state(t, s, op); !st.Done || st.Response == nil {
			t.Fatalf("%s not done: %+v", op, st)
		}
	}
	// After completion a new submit runs again.
	submit(t, s, "same")
	if pollNow(t, s, "w", 1) == nil {
		t.Fatal("completed action should not be merged with a new request")
	}
}

func TestDedupRaisesPriority(t *testing.T) {
	s, _ := newTest(t)
	register(s, "w")
	submit(t, s, "x", func(r *SubmitRequest) { r.Priority = 10 })
	submit(t, s, "y", func(r *SubmitRequest) { r.Priority = 5 })
	submit(t, s, "x", func(r *SubmitRequest) { r.Priority = 1 })
	if a := pollNow(t, s, "w", 1); a.Task.ActionDigest != action("x") {
		t.Fatalf("got %v, want x first after its priority was raised", a.Task.ActionDigest)
	}
}

func TestPlatformAndCoresMatching(t *testing.T) {
	s, _ := newTest(t)
	register(s, "arm", platform.Property{Name: "ISA", Value: "arm64"}, platform.Property{Name: "OSFamily", Value: "linux"})
	register(s, "any", platform.Property{Name: "ISA", Value: "*"}, platform.Property{Name: "OSFamily", Value: "linux"})
	submit(t, s, "x86", func(r *SubmitRequest) {
		r.Platform = platform.Properties{{Name: "ISA", Value: "x86-64"}, {Name: "OSFamily", Value: "linux"}}
	})
	if a := pollNow(t, s, "arm", 1); a != nil {
		t.Fatal("arm worker took an x86-64 action")
	}
	if a := pollNow(t, s, "any", 1); a == nil {
		t.Fatal("wildcard worker did not take the action")
	}
	submit(t, s, "big", func(r *SubmitRequest) {
		r.Platform = platform.Properties{{Name: "OSFamily", Value: "linux"}, {Name: "min-cores", Value: "3"}}
	})
	if a := pollNow(t, s, "any", 2); a != nil {
		t.Fatal("action needing 3 cores given to a worker with 2 free")
	}
	if a := pollNow(t, s, "any", 3); a == nil || a.Task.Req.Cores != 3 {
		t.Fatalf("assignment = %+v, want the 3-core action", a)
	}
}

func TestPollWaitsForWork(t *testing.T) {
	s, _ := newTest(t)
	register(s, "w")
	got := make(chan *Assignment)
	go func() {
		a, _ := s.Poll(context.Background(), "w", Capacity{Cores: 1})
		got <- a
	}()
	// Wait until the poller is registered as waiting, then submit.
	for {
		s.mu.Lock()
		n := len(s.waiters)
		s.mu.Unlock()
		if n == 1 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	op := submit(t, s, "late")
	a := receive(t, "assignment", got)
	if a == nil || a.Task.ActionDigest != action("late") {
		t.Fatalf("waiting poll got %+v", a)
	}
	if st := state(t, s, op); st.Stage != repb.ExecutionStage_QUEUED || st.Done {
		t.Fatalf("leased operation state %+v", st)
	}
}

func TestUnknownWorkerMustRegister(t *testing.T) {
	s, _ := newTest(t)
	if _, err := s.Poll(context.Background(), "ghost", Capacity{Cores: 1}); err != ErrUnknownWorker {
		t.Fatalf("Poll from unknown worker: %v", err)
	}
	if _, err := s.Heartbeat("ghost", nil); err != ErrUnknownWorker {
		t.Fatalf("Heartbeat from unknown worker: %v", err)
	}
}

func TestLostWorkerRequeuesAtFrontAndLateReportIgnored(t *testing.T) {
	s, clk := newTest(t)
	register(s, "w1")
	register(s, "w2")
	op := submit(t, s, "first")
	submit(t, s, "second")
	a1 := pollNow(t, s, "w1", 1)
	if a1.Task.ActionDigest != action("first") {
		t.Fatal("unexpected order")
	}
	// w1 heartbeats executing, then goes silent; w2 keeps heartbeating.
	if _, err := s.Heartbeat("w1", []LeaseReport{{LeaseID: a1.LeaseID, Stage: repb.ExecutionStage_EXECUTING}}); err != nil {
		t.Fatal(err)
	}
	if st := state(t, s, op); st.Stage != repb.ExecutionStage_EXECUTING {
		t.Fatalf("stage %v, want EXECUTING", st.Stage)
	}
	clk.Advance(11 * time.Second)
	s.Heartbeat("w2", nil)
	s.Tick()
	if st := state(t, s, op); st.Stage != repb.ExecutionStage_QUEUED || st.Done {
		t.Fatalf("after worker loss: %+v", st)
	}
	a2 := pollNow(t, s, "w2", 1)
	if a2 == nil || a2.Task.ActionDigest != action("first") || a2.Attempt != 2 {
		t.Fatalf("requeued action should come first with attempt 2: %+v", a2)
	}
	// The late report from w1 is ignored and w1 is told to stop.
	if s.completeOne("w1", a1.LeaseID, okResponse()) {
		t.Fatal("late completion from a lost lease was accepted")
	}
	if _, err := s.Heartbeat("w1", []LeaseReport{{LeaseID: a1.LeaseID}}); err != ErrUnknownWorker {
		t.Fatalf("silent worker should have been forgotten, heartbeat = %v", err)
	}
	register(s, "w1")
	cmds, _ := s.Heartbeat("w1", []LeaseReport{{LeaseID: a1.LeaseID}})
	if len(cmds) != 1 || cmds[0].Kind != CommandCancel {
		t.Fatalf("lost lease should be cancelled on the old worker: %+v", cmds)
	}
	if !s.completeOne("w2", a2.LeaseID, okResponse()) {
		t.Fatal("valid completion refused")
	}
	if st := state(t, s, op); !st.Done || st.Response.GetStatus().GetCode() != 0 {
		t.Fatalf("op not completed OK: %+v", st)
	}
}

func TestGivesUpAfterMaxAttempts(t *testing.T) {
	s, clk := newTest(t)
	register(s, "w")
	op := submit(t, s, "doomed")
	for i := 0; i < 3; i++ {
		if a := pollNow(t, s, "w", 1); a == nil {
			t.Fatalf("attempt %d not handed out", i+1)
		}
		clk.Advance(11 * time.Second)
		s.Tick()
		register(s, "w") // the worker comes back
	}
	st := state(t, s, op)
	if !st.Done || codes.Code(st.Response.Status.Code) != codes.Unavailable {
		t.Fatalf("want UNAVAILABLE after 3 attempts, got %+v", st)
	}
	if pollNow(t, s, "w", 1) != nil {
		t.Fatal("gave-up task is still queued")
	}
}

func TestCallerGraceCancelsRunningTask(t *testing.T) {
	s, clk := newTest(t)
	register(s, "w")
	op := submit(t, s, "orphan")
	if err := s.AddWatcher(op); err != nil {
		t.Fatal(err)
	}
	a := pollNow(t, s, "w", 1)
	s.RemoveWatcher(op)
	clk.Advance(30 * time.Second)
	s.Heartbeat("w", []LeaseReport{{LeaseID: a.LeaseID}})
	s.Tick()
	if state(t, s, op).Done {
		t.Fatal("cancelled before the grace period ended")
	}
	clk.Advance(31 * time.Second)
	s.Heartbeat("w", []LeaseReport{{LeaseID: a.LeaseID}})
	s.Tick()
	st := state(t, s, op)
	if !st.Done || codes.Code(st.Response.Status.Code) != codes.Canceled {
		t.Fatalf("want CANCELLED after the grace, got %+v", st)
	}
	cmds, _ := s.Heartbeat("w", []LeaseReport{{LeaseID: a.LeaseID}})
	if len(cmds) == 0 || cmds[0].Kind != CommandCancel || cmds[0].LeaseID != a.LeaseID {
		t.Fatalf("worker not told to kill the process: %+v", cmds)
	}
}

func TestCancelOneOfTwoSharedOperations(t *testing.T) {
	s, _ := newTest(t)
	register(s, "w")
	op1 := submit(t, s, "shared")
	op2 := submit(t, s, "shared")
	a := pollNow(t, s, "w", 1)
	if err := s.Cancel(op1); err != nil {
		t.Fatal(err)
	}
	if st := state(t, s, op2); st.Done {
		t.Fatal("cancelling one caller cancelled the other")
	}
	if cmds, _ := s.Heartbeat("w", []LeaseReport{{LeaseID: a.LeaseID}}); len(cmds) != 0 {
		t.Fatalf("task still needed but worker told %+v", cmds)
	}
	s.Cancel(op2)
	if cmds, _ := s.Heartbeat("w", []LeaseReport{{LeaseID: a.LeaseID}}); len(cmds) != 1 {
		t.Fatalf("task cancelled by all callers: worker should stop it, got %+v", cmds)
	}
	if err := s.Cancel("nope"); err != ErrNotFound {
		t.Fatalf("Cancel unknown = %v", err)
	}
}

func TestCancelQueuedTaskRemovesIt(t *testing.T) {
	s, _ := newTest(t)
	register(s, "w")
	op := submit(t, s, "q")
	s.Cancel(op)
	if pollNow(t, s, "w", 1) != nil {
		t.Fatal("cancelled task was handed out")
	}
}

func TestRetentionForgetsOldOperations(t *testing.T) {
	s, clk := newTest(t)
	register(s, "w")
	op := submit(t, s, "done")
	a := pollNow(t, s, "w", 1)
	s.completeOne("w", a.LeaseID, okResponse())
	clk.Advance(59 * time.Minute)
	s.Tick()
	if _, _, err := s.Watch(op); err != nil {
		t.Fatal("forgotten too early")
	}
	clk.Advance(2 * time.Minute)
	s.Heartbeat("w", nil)
	s.Tick()
	if _, _, err := s.Watch(op); err != ErrNotFound {
		t.Fatalf("Watch after retention = %v, want ErrNotFound", err)
	}
	if st := s.Stats(); st.Operations != 0 || len(s.finished) != 0 || len(s.inflight) != 0 || s.unwatched.n != 0 {
		t.Fatalf("state left behind: %+v, %d finished, %d in flight, %d unwatched", st, len(s.finished), len(s.inflight), s.unwatched.n)
	}
	if len(s.fair.root.children) != 0 {
		t.Fatalf("invocations left behind: %v", s.fair.root.children)
	}
}

func TestWatchChannelSignalsChanges(t *testing.T) {
	s, _ := newTest(t)
	register(s, "w")
	op := submit(t, s, "watched")
	_, changed, _ := s.Watch(op)
	a := pollNow(t, s, "w", 1)
	s.completeOne("w", a.LeaseID, okResponse())
	select {
	case <-changed:
	default:
		t.Fatal("completion did not signal watchers")
	}
}

func TestPollAbandonedAfterHandoffRequeues(t *testing.T) {
	s, _ := newTest(t)
	register(s, "w")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan *Assignment)
	go func() { a, _ := s.Poll(ctx, "w", Capacity{Cores: 1}); done <- a }()
	for {
		s.mu.Lock()
		n := len(s.waiters)
		s.mu.Unlock()
		if n == 1 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	// Hand a task to the waiter and cancel the poll before it returns:
	// whichever wins, the task must not be lost.
	cancel()
	opName := submit(t, s, "handoff")
	a := receive(t, "end of the poll", done)
	if a == nil {
		if b := pollNow(t, s, "w", 1); b == nil {
			t.Fatal("task lost after an abandoned poll")
		}
	}
	if st := state(t, s, opName); st.Done {
		t.Fatal("task completed unexpectedly")
	}
}

// TestLastWatcherLetsTheChangeChannelGo: when the last stream of a queued
// operation ends, the operation keeps no change channel (a client that
// left costs no channel per queued action), and a waiter holding the old
// one wakes and can watch again.
func TestLastWatcherLetsTheChangeChannelGo(t *testing.T) {
	s, _ := newTest(t)
	op := submit(t, s, "a")
	if err := s.AddWatcher(op); err != nil {
		t.Fatal(err)
	}
	_, changed, err := s.Watch(op)
	if err != nil {
		t.Fatal(err)
	}
	s.RemoveWatcher(op)
	select {
	case <-changed:
	default:
		t.Fatal("a waiter on the operation was not woken when its last stream ended")
	}
	s.mu.Lock()
	kept := s.ops[op].changed
	s.mu.Unlock()
	if kept != nil {
		t.Fatal("the operation keeps its change channel after its last stream ended")
	}
	if st, again, err := s.Watch(op); err != nil || st.Done || again == nil {
		t.Fatalf("watching again: %+v %v %v", st, again, err)
	}
}
