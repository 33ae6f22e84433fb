package scheduler

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/gantry-build/gantry/internal/platform"
)

// p builds sorted platform properties from name=value strings.
func p(kv ...string) platform.Properties {
	out := make(platform.Properties, 0, len(kv))
	for _, s := range kv {
		k, v, _ := strings.Cut(s, "=")
		out = append(out, platform.Property{Name: k, Value: v})
	}
	out.Sort()
	return out
}

// issueQueues are the provision queues of issue 4's example.
func issueQueues() []platform.Queue {
	return []platform.Queue{
		{Name: "cpu", AllowUnmatched: true, Properties: p("min-cores=*", "max-cores=*")},
		{Name: "gpu", AllowUnmatched: true, Properties: p("gpu=1")},
	}
}

// newQueueTest is newTest with provision queues and the unsatisfiable
// verdict's timers.
func newQueueTest(t *testing.T, mod func(*Config)) (*Scheduler, *fakeClock) {
	t.Helper()
	clk := &fakeClock{now: time.Unix(1_700_000_000, 0)}
	cfg := Config{HeartbeatTimeout: 10 * time.Second, CallerGrace: time.Hour, MaxAttempts: 3, Retention: time.Hour,
		UnsatisfiableWait: 10 * time.Minute, StartupGrace: time.Minute}
	if mod != nil {
		mod(&cfg)
	}
	return New(cfg, clk, nil), clk
}

func registerPlatform(s *Scheduler, id string, w platform.Worker) {
	if w.Cores == 0 {
		w.Cores = 4
	}
	s.RegisterWorker(WorkerInfo{ID: id, Platform: w, Slots: w.Cores})
}

func withPlatform(kv ...string) func(*SubmitRequest) {
	return func(r *SubmitRequest) { r.Platform = p(kv...) }
}

// keepAlive heartbeats workers so Tick does not forget them.
func keepAlive(t *testing.T, s *Scheduler, ids ...string) {
	t.Helper()
	for _, id := range ids {
		if _, err := s.Heartbeat(id, nil); err != nil {
			t.Fatalf("heartbeat %s: %v", id, err)
		}
	}
}

// waitForWaiters blocks until n polls are parked in the scheduler. It
// waits for a state, not for time, and fails the test after waitLimit.
func waitForWaiters(t testing.TB, s *Scheduler, n int) {
	t.Helper()
	for deadline := time.Now().Add(waitLimit); ; time.Sleep(time.Millisecond) {
		s.mu.Lock()
		k := len(s.waiters)
		s.mu.Unlock()
		if k >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d polls parked after %s, want %d", k, waitLimit, n)
		}
	}
}

// waitLimit bounds every wait of a test for another goroutine: far more
// than any wait needs, so that a hang fails the test with a message
// rather than the whole run at its timeout.
const waitLimit = 10 * time.Second

// waitGroup waits for wg, failing the test if it is not done within
// waitLimit.
func waitGroup(t testing.TB, what string, wg *sync.WaitGroup) {
	t.Helper()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	receive(t, what, done)
}

// receive is the next value on ch, failing the test if none comes within
// waitLimit.
func receive[T any](t testing.TB, what string, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(waitLimit):
		t.Fatalf("no %s within %s", what, waitLimit)
		var zero T
		return zero
	}
}

func TestGPUActionOnlyReachesGPUWorker(t *testing.T) {
	for _, tc := range []struct {
		name string
		cpu  platform.Worker // how the CPU workers are kept out
	}{
		{"cpu workers serve only the cpu queue", platform.Worker{AllowUnmatched: true, Queues: []string{"cpu"}}},
		{"cpu workers serve every queue but lack the gpu label", platform.Worker{Properties: p("OSFamily=linux")}},
		{"cpu workers declare another gpu value", platform.Worker{AllowUnmatched: true, Properties: p("gpu=0")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := newQueueTest(t, func(c *Config) { c.Queues = issueQueues() })
			cpus := []string{"cpu-1", "cpu-2", "cpu-3"}
			for _, id := range cpus {
				registerPlatform(s, id, tc.cpu)
			}
			registerPlatform(s, "gpu-1", platform.Worker{AllowUnmatched: true, Queues: []string{"gpu"}, Properties: p("gpu=1")})

			// CPU workers parked in Poll before the GPU action arrives
			// must not be handed it.
			ctx, cancel := context.WithCancel(context.Background())
			got := make(chan *Assignment, len(cpus))
			var wg sync.WaitGroup
			for _, id := range cpus {
				wg.Add(1)
				go func() {
					defer wg.Done()
					a, err := s.Poll(ctx, id, Capacity{Cores: 4})
					if err != nil {
						t.Error(err)
					}
					got <- a
				}()
			}
			waitForWaiters(t, s, len(cpus))
			var ops []string
			for i := range 5 {
				ops = append(ops, submit(t, s, fmt.Sprintf("gpu-%d", i), withPlatform("gpu=1", "OSFamily=linux")))
			}
			// CPU workers also poll directly, repeatedly.
			for range 3 {
				for _, id := range cpus {
					if a := pollNow(t, s, id, 4); a != nil {
						t.Fatalf("CPU worker %s got GPU action %v", id, a.Task.Platform)
					}
				}
			}
			cancel()
			waitGroup(t, "end of the CPU workers' polls", &wg)
			close(got)
			for a := range got {
				if a != nil {
					t.Fatalf("parked CPU worker got GPU action %v", a.Task.Platform)
				}
			}
			for i := range ops {
				a := pollNow(t, s, "gpu-1", 4)
				if a == nil {
					t.Fatalf("GPU worker got nothing on poll %d", i)
				}
				if a.Task.Queue != "gpu" {
					t.Fatalf("task in queue %q, want gpu", a.Task.Queue)
				}
				if !s.completeOne("gpu-1", a.LeaseID, okResponse()) {
					t.Fatal("completion refused")
				}
			}
			for _, op := range ops {
				if st := state(t, s, op); !st.Done || st.Response.GetStatus().GetCode() != 0 {
					t.Fatalf("%s: %+v", op, st)
				}
			}
		})
	}
}

func TestWorkerServingOnlyGPUQueueNeverGetsCPUWork(t *testing.T) {
	s, _ := newQueueTest(t, func(c *Config) { c.Queues = issueQueues() })
	// Label-wise the GPU worker could run anything; only the queue keeps
	// CPU work away from it.
	registerPlatform(s, "gpu-1", platform.Worker{AllowUnmatched: true, Queues: []string{"gpu"}, Properties: p("gpu=*"), Cores: 8})
	registerPlatform(s, "any", platform.Worker{AllowUnmatched: true, Cores: 8})
	for i := range 4 {
		submit(t, s, fmt.Sprintf("cpu-%d", i), withPlatform("min-cores=1", "max-cores=2"))
	}
	if a := pollNow(t, s, "gpu-1", 8); a != nil {
		t.Fatalf("gpu-only worker got %q work", a.Task.Queue)
	}
	// A parked poll is not handed CPU work either.
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan *Assignment, 1)
	go func() { a, _ := s.Poll(ctx, "gpu-1", Capacity{Cores: 8}); got <- a }()
	waitForWaiters(t, s, 1)
	submit(t, s, "cpu-late", withPlatform("min-cores=1", "max-cores=1"))
	gpuOp := submit(t, s, "gpu", withPlatform("gpu=1"))
	a := receive(t, "assignment", got)
	cancel()
	if a == nil || a.Task.Queue != "gpu" {
		t.Fatalf("parked gpu worker got %+v, want the gpu action", a)
	}
	s.completeOne("gpu-1", a.LeaseID, okResponse())
	if !state(t, s, gpuOp).Done {
		t.Fatal("gpu op not done")
	}
	// Everything CPU is still there for a worker that serves all queues.
	n := 0
	for a := pollNow(t, s, "any", 8); a != nil; a = pollNow(t, s, "any", 8) {
		if a.Task.Queue != "cpu" {
			t.Fatalf("queue %q", a.Task.Queue)
		}
		n++
	}
	if n != 5 {
		t.Fatalf("%d CPU actions handed out, want 5", n)
	}
}

// TestResourcesNeverOversubscribed runs many pollers, completers and
// cancellers at once against one worker with gpu capacity 2, with actions
// holding one or two gpus, and checks that the gpus of actions the worker
// runs (handed out and not yet reported back) never exceed 2.
func TestResourcesNeverOversubscribed(t *testing.T) {
	s, _ := newQueueTest(t, nil)
	const capacity = 2
	registerPlatform(s, "g", platform.Worker{AllowUnmatched: true, Cores: 64, Resources: map[string]int64{"gpu": capacity}})

	const actions = 300
	amount := func(i int) int64 { return int64(1 + i%3/2) } // 1, 1, 2, ...

	var (
		inUse   atomic.Int64 // gpus of actions "running" on the worker
		peak    atomic.Int64
		heldBad atomic.Int64
		ran     atomic.Int64
	)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// work plays the worker running an action: it holds the action's
	// gpus from the moment Poll hands it out until it reports the end
	// (Complete, accepted or not: the op may have been cancelled meanwhile).
	work := func(a *Assignment) {
		n := a.Task.Req.Resources["gpu"]
		now := inUse.Add(n)
		for {
			old := peak.Load()
			if now <= old || peak.CompareAndSwap(old, now) {
				break
			}
		}
		s.mu.Lock()
		if h := s.workers["g"].held["gpu"]; h > capacity || h < 0 {
			heldBad.Store(h)
		}
		s.mu.Unlock()
		ran.Add(1)
		for range 3 {
			runtime.Gosched() // let others poll and cancel while this runs
		}
		inUse.Add(-n) // before Complete: the scheduler still counts it
		s.completeOne("g", a.LeaseID, okResponse())
	}
	var pollers sync.WaitGroup
	// Half the pollers park in Poll (the hand-over path), half poll
	// without waiting (the queue path).
	for i := range 16 {
		pollers.Add(1)
		go func() {
			defer pollers.Done()
			for ctx.Err() == nil {
				pctx := ctx
				if i%2 == 1 {
					c, cancelNow := context.WithCancel(ctx)
					cancelNow()
					pctx = c
				}
				a, err := s.Poll(pctx, "g", Capacity{Cores: 64})
				if err != nil {
					t.Error(err)
					return
				}
				if a != nil {
					work(a)
				}
			}
		}()
	}
	// Submit concurrently with the polling, cancelling every fifth
	// operation right away (queued or already running).
	var submitters sync.WaitGroup
	for w := range 4 {
		submitters.Add(1)
		go func() {
			defer submitters.Done()
			for i := w; i < actions; i += 4 {
				op, err := s.Submit(SubmitRequest{Instance: "main", ActionDigest: action(fmt.Sprint("gpu-", i)),
					Platform: p(fmt.Sprintf("resource:gpu=%d", amount(i)))})
				if err != nil {
					t.Error(err)
					continue
				}
				if i%5 == 0 {
					s.Cancel(op)
				}
			}
		}()
	}
	waitGroup(t, "end of the submitters", &submitters)
	// Wait (for a state, not a time) until nothing is queued or leased.
	eventually(t, "nothing is queued or leased", func() bool {
		st := s.Stats()
		return st.Queued == 0 && st.Leased == 0
	})
	cancel()
	waitGroup(t, "end of the pollers", &pollers)
	if pk := peak.Load(); pk > capacity {
		t.Fatalf("%d gpus in use at once, capacity %d", pk, capacity)
	}
	if h := heldBad.Load(); h != 0 {
		t.Fatalf("scheduler held %d gpus, capacity %d", h, capacity)
	}
	if n := ran.Load(); n < actions*4/5 {
		t.Fatalf("only %d actions ran", n)
	}
	s.Heartbeat("g", nil) // the worker runs nothing now
	s.mu.Lock()
	h := s.workers["g"].held["gpu"]
	s.mu.Unlock()
	if h != 0 {
		t.Fatalf("%d gpus still held with nothing running", h)
	}
	for _, st := range s.List() {
		if !st.Done {
			t.Fatalf("operation left undone: %+v", st)
		}
	}
}

// TestResourcesHeldUntilTheLeaseEnds checks each way a lease ends gives
// its resources back, and nothing else does.
func TestResourcesHeldUntilTheLeaseEnds(t *testing.T) {
	s, clk := newQueueTest(t, nil)
	registerPlatform(s, "g", platform.Worker{AllowUnmatched: true, Cores: 8, Resources: map[string]int64{"gpu": 2}})
	held := func() int64 { s.mu.Lock(); defer s.mu.Unlock(); return s.workers["g"].held["gpu"] }
	for i := range 6 {
		submit(t, s, fmt.Sprint("a", i), withPlatform("resource:gpu=1"))
	}
	a1, a2 := pollNow(t, s, "g", 8), pollNow(t, s, "g", 8)
	if a1 == nil || a2 == nil {
		t.Fatal("two gpu actions should fit")
	}
	if a := pollNow(t, s, "g", 8); a != nil {
		t.Fatal("third gpu action handed out with both gpus held")
	}
	if _, err := s.Heartbeat("g", []LeaseReport{{LeaseID: a1.LeaseID}, {LeaseID: a2.LeaseID}}); err != nil {
		t.Fatal(err)
	}
	if h := held(); h != 2 {
		t.Fatalf("held %d after a heartbeat, want 2", h)
	}
	// Completion frees one gpu.
	s.completeOne("g", a1.LeaseID, okResponse())
	a3 := pollNow(t, s, "g", 8)
	if a3 == nil {
		t.Fatal("gpu freed by completion not reused")
	}
	if a := pollNow(t, s, "g", 8); a != nil {
		t.Fatal("oversubscribed after completion")
	}
	// Lost leases free theirs.
	clk.Advance(11 * time.Second)
	s.Tick()
	registerPlatform(s, "g", platform.Worker{AllowUnmatched: true, Cores: 8, Resources: map[string]int64{"gpu": 2}})
	if h := held(); h != 0 {
		t.Fatalf("held %d after the leases were lost, want 0", h)
	}
	b1, b2 := pollNow(t, s, "g", 8), pollNow(t, s, "g", 8)
	if b1 == nil || b2 == nil || pollNow(t, s, "g", 8) != nil {
		t.Fatal("after lost leases the worker should take exactly two again")
	}
	s.completeOne("g", b1.LeaseID, okResponse())
	s.completeOne("g", b2.LeaseID, okResponse())
	if h := held(); h != 0 {
		t.Fatalf("held %d when idle", h)
	}
}

func TestWorkerPinGetsItsAction(t *testing.T) {
	s, _ := newQueueTest(t, nil)
	for _, id := range []string{"w1", "w2", "w3"} {
		registerPlatform(s, id, platform.Worker{AllowUnmatched: true})
	}
	// w1 is parked when the pinned action arrives; it must not take it.
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan *Assignment, 1)
	go func() { a, _ := s.Poll(ctx, "w1", Capacity{Cores: 4}); got <- a }()
	waitForWaiters(t, s, 1)
	op := submit(t, s, "pinned", withPlatform("Worker=w2", "OSFamily=linux"))
	if a := pollNow(t, s, "w3", 4); a != nil {
		t.Fatal("w3 took an action pinned to w2")
	}
	cancel()
	if a := receive(t, "end of the poll", got); a != nil {
		t.Fatal("w1 took an action pinned to w2")
	}
	a := pollNow(t, s, "w2", 4)
	if a == nil || a.Task.Req.Pin != "w2" {
		t.Fatalf("w2 got %+v, want its pinned action", a)
	}
	s.completeOne("w2", a.LeaseID, okResponse())
	if !state(t, s, op).Done {
		t.Fatal("not done")
	}
	// Unpinned work still goes to anyone.
	submit(t, s, "free")
	if pollNow(t, s, "w3", 4) == nil {
		t.Fatal("unpinned action not handed to w3")
	}
}

func TestNoQueueErrorGivesReasonsPerQueue(t *testing.T) {
	s, _ := newQueueTest(t, func(c *Config) { c.Queues = issueQueues() })
	_, err := s.Submit(SubmitRequest{Name: "op1", Instance: "main", ActionDigest: action("x"), Platform: p("gpu=2", "OSFamily=linux")})
	var nq *NoQueueError
	if !errors.As(err, &nq) {
		t.Fatalf("Submit = %v, want *NoQueueError", err)
	}
	if nq.Analysis.Chosen != -1 || len(nq.Analysis.Verdicts) != 2 {
		t.Fatalf("analysis %+v", nq.Analysis)
	}
	want := map[string][]string{
		"cpu": {"missing property max-cores", "missing property min-cores"},
		"gpu": {"value mismatch gpu (action: 2, offered: 1)"},
	}
	for _, v := range nq.Analysis.Verdicts {
		var got []string
		for _, r := range v.Reasons {
			got = append(got, r.String())
		}
		w := want[v.Queue]
		if len(got) != len(w) {
			t.Fatalf("queue %s reasons %q, want %q", v.Queue, got, w)
		}
		for i := range w {
			if !strings.HasPrefix(got[i], w[i]) {
				t.Errorf("queue %s reason %q, want prefix %q", v.Queue, got[i], w[i])
			}
		}
	}
	msg := err.Error()
	for _, w := range []string{"gpu=2", `queue "cpu": missing property`, `queue "gpu": value mismatch gpu`} {
		if !strings.Contains(msg, w) {
			t.Errorf("error %q lacks %q", msg, w)
		}
	}
	// Nothing was created: not queued, and the name is still free.
	if st := s.Stats(); st.Queued != 0 || st.Operations != 0 {
		t.Fatalf("refused action left state behind: %+v", st)
	}
	if _, err := s.Submit(SubmitRequest{Name: "op1", Instance: "main", ActionDigest: action("x"), Platform: p("gpu=1")}); err != nil {
		t.Fatalf("name of a refused submit is not reusable: %v", err)
	}
}

func TestSubmitRejectsInvalidSpecialProperties(t *testing.T) {
	s, _ := newQueueTest(t, nil)
	for _, props := range []platform.Properties{
		p("min-cores=0"), p("min-cores=2", "max-cores=1"), p("min-mem=lots"), p("resource:gpu=0"), p("Worker=a", "Worker=b"),
	} {
		_, err := s.Submit(SubmitRequest{Instance: "main", ActionDigest: action(props.String()), Platform: props})
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("Submit(%v) = %v, want ErrInvalid", props, err)
		}
	}
	if st := s.Stats(); st.Queued != 0 || st.Operations != 0 {
		t.Fatalf("invalid actions left state behind: %+v", st)
	}
}

func TestSetQueuesKeepsQueuedWork(t *testing.T) {
	s, _ := newQueueTest(t, func(c *Config) { c.Queues = issueQueues()[:1] })
	registerPlatform(s, "cpu-w", platform.Worker{AllowUnmatched: true, Queues: []string{"cpu"}})
	registerPlatform(s, "gpu-w", platform.Worker{AllowUnmatched: true, Queues: []string{"gpu"}, Properties: p("gpu=1")})
	cpuOp := submit(t, s, "cpu-1", withPlatform("min-cores=1", "max-cores=1"))
	if _, err := s.Submit(SubmitRequest{Instance: "main", ActionDigest: action("gpu-early"), Platform: p("gpu=1")}); err == nil {
		t.Fatal("gpu action accepted before the gpu queue exists")
	}

	s.SetQueues(issueQueues()[1:]) // only gpu now
	if a := s.ExplainQueues(p("gpu=1")); a.Chosen != 0 || a.Verdicts[0].Queue != "gpu" {
		t.Fatalf("ExplainQueues after reload: %+v", a)
	}
	if st := s.Stats(); st.Queued != 1 {
		t.Fatalf("queued work after reload: %+v", st)
	}
	// New CPU actions have no queue now; the queued one is still served.
	var nq *NoQueueError
	if _, err := s.Submit(SubmitRequest{Instance: "main", ActionDigest: action("cpu-2"), Platform: p("min-cores=1", "max-cores=1")}); !errors.As(err, &nq) {
		t.Fatalf("cpu action after reload: %v, want *NoQueueError", err)
	}
	gpuOp := submit(t, s, "gpu-1", withPlatform("gpu=1"))
	a := pollNow(t, s, "cpu-w", 4)
	if a == nil || a.Task.Queue != "cpu" {
		t.Fatalf("cpu worker got %+v, want the action queued before the reload", a)
	}
	s.completeOne("cpu-w", a.LeaseID, okResponse())
	b := pollNow(t, s, "gpu-w", 4)
	if b == nil || b.Task.Queue != "gpu" {
		t.Fatalf("gpu worker got %+v", b)
	}
	s.completeOne("gpu-w", b.LeaseID, okResponse())
	for _, op := range []string{cpuOp, gpuOp} {
		if !state(t, s, op).Done {
			t.Fatalf("%s not done", op)
		}
	}
	// No queues at all: the default queue takes everything.
	s.SetQueues(nil)
	if a := s.ExplainQueues(p("anything=1")); a.Chosen != 0 || a.Verdicts[0].Queue != platform.DefaultQueue.Name {
		t.Fatalf("ExplainQueues with no queues: %+v", a)
	}
}

func TestUnsatisfiableActionFailsWithExplanation(t *testing.T) {
	s, clk := newQueueTest(t, nil) // wait 10m, startup grace 1m
	// Closest: only the gpu label keeps it out. Further: wrong queue too.
	registerPlatform(s, "cpu-close", platform.Worker{Properties: p("OSFamily=linux")})
	registerPlatform(s, "cpu-far", platform.Worker{Properties: p("OSFamily=linux"), Queues: []string{"other"}})
	live := []string{"cpu-close", "cpu-far"}
	op := submit(t, s, "gpu", withPlatform("gpu=1", "OSFamily=linux"))
	okOp := submit(t, s, "cpu", withPlatform("OSFamily=linux"))

	step := func(d time.Duration) {
		clk.Advance(d)
		keepAlive(t, s, live...)
		s.Tick()
	}
	for range 10 {
		step(time.Minute)
		if state(t, s, op).Done {
			t.Fatalf("failed after %s, before the wait plus the startup grace", clk.Now().Sub(time.Unix(1_700_000_000, 0)))
		}
	}
	step(time.Minute - time.Second) // 10m59s: the wait is over, the grace is not
	if state(t, s, op).Done {
		t.Fatal("failed within the startup grace")
	}
	step(2 * time.Second)
	st := state(t, s, op)
	if !st.Done {
		t.Fatal("unsatisfiable action still queued after the wait and the grace")
	}
	if c := codes.Code(st.Response.GetStatus().GetCode()); c != codes.FailedPrecondition {
		t.Fatalf("code %v, want FAILED_PRECONDITION", c)
	}
	msg := st.Response.GetStatus().GetMessage()
	for _, w := range []string{"no worker can run this action", "gpu=1", "closest worker, cpu-close", "unmatched property gpu", "10m0s"} {
		if !strings.Contains(msg, w) {
			t.Errorf("message %q lacks %q", msg, w)
		}
	}
	if strings.Contains(msg, "cpu-far") {
		t.Errorf("message names a farther worker: %q", msg)
	}
	// The satisfiable action waiting alongside is untouched.
	if state(t, s, okOp).Done {
		t.Fatal("satisfiable action was failed")
	}
	if a := pollNow(t, s, "cpu-close", 4); a == nil || a.Task.ActionDigest != action("cpu") {
		t.Fatalf("satisfiable action lost: %+v", a)
	}
	if pollNow(t, s, "cpu-close", 4) != nil {
		t.Fatal("failed action is still queued")
	}
}

func TestUnsatisfiableReasons(t *testing.T) {
	worker := platform.Worker{Properties: p("OSFamily=linux"), AllowUnmatched: true, Cores: 4, MemoryBytes: 1 << 30,
		Resources: map[string]int64{"gpu": 1}, Wrappers: []string{"nice"}}
	for _, tc := range []struct {
		name  string
		props []string
		want  string // in the failure message; "" means it must not fail
	}{
		{"too many cores", []string{"min-cores=5"}, "insufficient capacity min-cores (action: 5, offered: 4)"},
		{"too much memory", []string{"min-mem=2147483648"}, "insufficient capacity min-mem"},
		{"more gpus than the worker has", []string{"resource:gpu=2"}, "insufficient capacity resource:gpu (action: 2, offered: 1)"},
		{"pinned to an unknown worker", []string{"Worker=ghost"}, "pinned elsewhere Worker (action: ghost, offered: w)"},
		{"unknown wrapper", []string{"process-wrapper=strace"}, "unknown process wrapper"},
		{"wrong label value", []string{"OSFamily=windows"}, "value mismatch OSFamily"},
		{"fits the totals", []string{"min-cores=4", "resource:gpu=1", "Worker=w", "process-wrapper=nice"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, clk := newQueueTest(t, func(c *Config) { c.StartupGrace = 0 })
			registerPlatform(s, "w", worker)
			op := submit(t, s, "x", withPlatform(tc.props...))
			for range 11 {
				clk.Advance(time.Minute)
				keepAlive(t, s, "w")
				s.Tick()
			}
			st := state(t, s, op)
			if tc.want == "" {
				if st.Done {
					t.Fatalf("satisfiable action failed: %v", st.Response.GetStatus())
				}
				return
			}
			if !st.Done || codes.Code(st.Response.GetStatus().GetCode()) != codes.FailedPrecondition {
				t.Fatalf("want FAILED_PRECONDITION, got %+v", st)
			}
			if msg := st.Response.GetStatus().GetMessage(); !strings.Contains(msg, tc.want) || !strings.Contains(msg, "closest worker, w,") {
				t.Fatalf("message %q lacks %q", msg, tc.want)
			}
		})
	}
}

func TestUnsatisfiableWaitsOutTheStartupGrace(t *testing.T) {
	s, clk := newQueueTest(t, func(c *Config) { c.StartupGrace = 30 * time.Minute })
	op := submit(t, s, "nobody") // no worker at all
	for range 39 {
		clk.Advance(time.Minute)
		s.Tick()
		if state(t, s, op).Done {
			t.Fatalf("failed %s after start, within the startup grace plus the wait", clk.Now().Sub(time.Unix(1_700_000_000, 0)))
		}
	}
	clk.Advance(time.Minute - time.Second) // 39m59s
	s.Tick()
	if state(t, s, op).Done {
		t.Fatal("failed within the startup grace plus the wait")
	}
	clk.Advance(2 * time.Second)
	s.Tick()
	st := state(t, s, op)
	if !st.Done || !strings.Contains(st.Response.GetStatus().GetMessage(), "no workers are registered") {
		t.Fatalf("after the grace: %+v", st)
	}
	// After the grace the wait alone counts.
	op2 := submit(t, s, "nobody-2")
	clk.Advance(10*time.Minute - time.Second)
	s.Tick()
	if state(t, s, op2).Done {
		t.Fatal("failed before its own wait")
	}
	clk.Advance(2 * time.Second)
	s.Tick()
	if !state(t, s, op2).Done {
		t.Fatal("not failed after its wait")
	}
}

// TestRecentlySeenWorkerKeepsActionAlive: a worker that could run the
// action went silent a little while ago; the action waits for it rather
// than failing, until the worker has been gone for the whole wait.
func TestRecentlySeenWorkerKeepsActionAlive(t *testing.T) {
	s, clk := newQueueTest(t, func(c *Config) { c.StartupGrace = 0 })
	registerPlatform(s, "cpu", platform.Worker{Properties: p("OSFamily=linux")})
	registerPlatform(s, "gpu", platform.Worker{Properties: p("OSFamily=linux", "gpu=1")})
	step := func(d time.Duration, alive ...string) {
		t.Helper()
		clk.Advance(d)
		keepAlive(t, s, alive...)
		s.Tick()
	}
	// The gpu worker has been up for a long while (longer than the wait)
	// before the action arrives, and is busy elsewhere, not polling.
	for range 15 {
		step(time.Minute, "cpu", "gpu")
	}
	op := submit(t, s, "gpu-job", withPlatform("gpu=1", "OSFamily=linux"))
	for range 5 {
		step(time.Minute, "cpu", "gpu")
	}
	// Now (20m) the gpu worker goes silent; Tick forgets it as a live
	// worker after the heartbeat timeout.
	for range 6 {
		step(time.Minute, "cpu")
	}
	if _, err := s.Heartbeat("gpu", nil); err != ErrUnknownWorker {
		t.Fatalf("silent gpu worker still registered: %v", err)
	}
	// 26m: the action has waited 11m, but its worker was seen 6m ago.
	if st := state(t, s, op); st.Done {
		t.Fatalf("action failed while a worker that could run it was seen recently: %s", st.Response.GetStatus().GetMessage())
	}
	if vs := s.ExplainWorkers(platform.DefaultQueue.Name, mustRequest(t, "gpu=1", "OSFamily=linux")); len(vs) != 2 || vs[0].Worker != "gpu" || len(vs[0].Reasons) != 0 {
		t.Fatalf("ExplainWorkers should still list the recently seen gpu worker first: %+v", vs)
	}
	// The worker comes back and gets the action.
	registerPlatform(s, "gpu", platform.Worker{Properties: p("OSFamily=linux", "gpu=1")})
	a := pollNow(t, s, "gpu", 4)
	if a == nil {
		t.Fatal("returning gpu worker did not get the action")
	}
	s.completeOne("gpu", a.LeaseID, okResponse())
	if st := state(t, s, op); !st.Done || st.Response.GetStatus().GetCode() != 0 {
		t.Fatalf("%+v", st)
	}

	// Once the gpu worker has been gone for longer than the wait, a new
	// gpu action fails, naming the closest worker left.
	op2 := submit(t, s, "gpu-job-2", withPlatform("gpu=1", "OSFamily=linux"))
	for range 10 {
		step(time.Minute, "cpu")
		if st := state(t, s, op2); st.Done {
			t.Fatalf("failed %s after the gpu worker left: %s", clk.Now().Sub(time.Unix(1_700_000_000, 0)), st.Response.GetStatus().GetMessage())
		}
	}
	for range 2 {
		step(time.Minute, "cpu")
	}
	st := state(t, s, op2)
	if !st.Done || !strings.Contains(st.Response.GetStatus().GetMessage(), "closest worker, cpu,") {
		t.Fatalf("after the gpu worker was gone for the wait: %+v", st)
	}
}

func mustRequest(t *testing.T, kv ...string) platform.Request {
	t.Helper()
	r, err := platform.ParseRequest(p(kv...))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestExplainWorkersClosestFirst(t *testing.T) {
	s, _ := newQueueTest(t, func(c *Config) { c.Queues = issueQueues() })
	registerPlatform(s, "gpu-ok", platform.Worker{Properties: p("gpu=1"), AllowUnmatched: true, Queues: []string{"gpu"}, Resources: map[string]int64{"gpu": 1}})
	registerPlatform(s, "gpu-small", platform.Worker{Properties: p("gpu=1"), AllowUnmatched: true, Queues: []string{"gpu"}, Cores: 1, Resources: map[string]int64{"gpu": 1}})
	registerPlatform(s, "cpu", platform.Worker{Properties: p("OSFamily=linux"), Queues: []string{"cpu"}})
	r := mustRequest(t, "gpu=1", "min-cores=2", "resource:gpu=1")
	vs := s.ExplainWorkers("gpu", r)
	if len(vs) != 3 {
		t.Fatalf("verdicts %+v", vs)
	}
	if vs[0].Worker != "gpu-ok" || len(vs[0].Reasons) != 0 {
		t.Fatalf("first verdict %+v, want gpu-ok with no reasons", vs[0])
	}
	if vs[1].Worker != "gpu-small" || len(vs[1].Reasons) != 1 || vs[1].Reasons[0].Property != platform.MinCores {
		t.Fatalf("second verdict %+v, want gpu-small kept out by min-cores", vs[1])
	}
	var kinds []platform.ReasonKind
	for _, r := range vs[2].Reasons {
		kinds = append(kinds, r.Kind)
	}
	if vs[2].Worker != "cpu" || !containsKind(kinds, platform.ReasonQueue) || !containsKind(kinds, platform.ReasonUnmatched) || !containsKind(kinds, platform.ReasonResource) {
		t.Fatalf("third verdict %+v", vs[2])
	}
}

func containsKind(ks []platform.ReasonKind, k platform.ReasonKind) bool {
	for _, x := range ks {
		if x == k {
			return true
		}
	}
	return false
}

// TestReregisterRefreshesMatches: what a worker matched is remembered per
// platform, but a new registration with another platform starts afresh.
func TestReregisterRefreshesMatches(t *testing.T) {
	s, _ := newQueueTest(t, nil)
	registerPlatform(s, "w", platform.Worker{Properties: p("OSFamily=linux")})
	submit(t, s, "gpu", withPlatform("gpu=1", "OSFamily=linux"))
	if pollNow(t, s, "w", 4) != nil {
		t.Fatal("worker without gpu got the gpu action")
	}
	registerPlatform(s, "w", platform.Worker{Properties: p("OSFamily=linux", "gpu=1")})
	if pollNow(t, s, "w", 4) == nil {
		t.Fatal("worker re-registered with gpu did not get the gpu action")
	}
	submit(t, s, "gpu-2", withPlatform("gpu=1", "OSFamily=linux"))
	registerPlatform(s, "w", platform.Worker{Properties: p("OSFamily=linux")})
	if pollNow(t, s, "w", 4) != nil {
		t.Fatal("worker re-registered without gpu still got the gpu action")
	}
}

func TestMinCoresAgainstFreeCores(t *testing.T) {
	s, _ := newQueueTest(t, nil)
	registerPlatform(s, "w", platform.Worker{AllowUnmatched: true, Cores: 8})
	submit(t, s, "big", withPlatform("min-cores=6", "max-cores=8"))
	for _, free := range []int{1, 5} {
		if a := pollNow(t, s, "w", free); a != nil {
			t.Fatalf("6-core action handed out with %d cores free", free)
		}
	}
	a := pollNow(t, s, "w", 6)
	if a == nil || a.Task.Req.Cores != 6 || a.Task.Req.MaxCores != 8 {
		t.Fatalf("got %+v", a)
	}
}

// TestFreedResourcesGoToAParkedPoll: a worker's poll parked while its
// gpu is busy gets the next gpu action as soon as the gpu is freed,
// rather than when the poll times out.
func TestFreedResourcesGoToAParkedPoll(t *testing.T) {
	s, _ := newQueueTest(t, nil)
	registerPlatform(s, "g", platform.Worker{AllowUnmatched: true, Cores: 8, Resources: map[string]int64{"gpu": 1}})
	submit(t, s, "first", withPlatform("resource:gpu=1"))
	second := submit(t, s, "second", withPlatform("resource:gpu=1"))
	a1 := pollNow(t, s, "g", 8)
	if a1 == nil {
		t.Fatal("no assignment")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := make(chan *Assignment, 1)
	go func() { a, _ := s.Poll(ctx, "g", Capacity{Cores: 7}); got <- a }()
	waitForWaiters(t, s, 1)
	s.completeOne("g", a1.LeaseID, okResponse())
	if st := s.Stats(); st.Queued != 0 || st.Leased != 1 {
		t.Fatalf("after the gpu was freed: %+v; the parked poll should have been given the queued gpu action", st)
	}
	a2 := receive(t, "assignment", got)
	if a2 == nil || a2.Task.ActionDigest != action("second") {
		t.Fatalf("parked poll got %+v", a2)
	}
	s.completeOne("g", a2.LeaseID, okResponse())
	if !state(t, s, second).Done {
		t.Fatal("second not done")
	}
}

// TestCancelledLeaseHoldsResourcesUntilTheWorkerStops: cancelling an
// action tells the worker to stop it, but its process may run until the
// worker hears so; its resources stay held until the worker stops
// reporting the lease or reports its end.
func TestCancelledLeaseHoldsResourcesUntilTheWorkerStops(t *testing.T) {
	for _, tc := range []struct {
		name string
		stop func(s *Scheduler, lease string)
	}{
		{"heartbeat no longer lists it", func(s *Scheduler, lease string) { s.Heartbeat("g", nil) }},
		{"late completion", func(s *Scheduler, lease string) { s.completeOne("g", lease, okResponse()) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := newQueueTest(t, nil)
			registerPlatform(s, "g", platform.Worker{AllowUnmatched: true, Cores: 8, Resources: map[string]int64{"gpu": 1}})
			first := submit(t, s, "first", withPlatform("resource:gpu=1"))
			submit(t, s, "second", withPlatform("resource:gpu=1"))
			a := pollNow(t, s, "g", 8)
			if a == nil {
				t.Fatal("no assignment")
			}
			if err := s.Cancel(first); err != nil {
				t.Fatal(err)
			}
			if b := pollNow(t, s, "g", 8); b != nil {
				t.Fatal("gpu handed out again while the cancelled action may still run")
			}
			cmds, err := s.Heartbeat("g", []LeaseReport{{LeaseID: a.LeaseID}})
			if err != nil || len(cmds) != 1 || cmds[0].Kind != CommandCancel {
				t.Fatalf("heartbeat = %+v, %v; want the cancel", cmds, err)
			}
			if b := pollNow(t, s, "g", 8); b != nil {
				t.Fatal("gpu handed out again while the worker still reports the cancelled lease")
			}
			tc.stop(s, a.LeaseID)
			b := pollNow(t, s, "g", 8)
			if b == nil || b.Task.ActionDigest != action("second") {
				t.Fatalf("after the cancelled action stopped: %+v, want the second action", b)
			}
			s.completeOne("g", b.LeaseID, okResponse())
			s.mu.Lock()
			h, n := s.workers["g"].held["gpu"], len(s.workers["g"].cancelled)
			s.mu.Unlock()
			if h != 0 || n != 0 {
				t.Fatalf("held %d, %d cancelled leases remembered; want none", h, n)
			}
		})
	}
}
