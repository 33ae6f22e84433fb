package scheduler

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gantry-build/gantry/internal/statestore"
)

// durableTest returns a scheduler attached to store; stop ends its flusher.
func durableTest(t *testing.T, store statestore.Store, clk *fakeClock) (s *Scheduler, stop func()) {
	t.Helper()
	s = New(Config{HeartbeatTimeout: 10 * time.Second, CallerGrace: time.Hour, MaxAttempts: 3, Retention: time.Hour}, clk, nil)
	ctx, cancel := context.WithCancel(context.Background())
	if err := s.Attach(ctx, store); err != nil {
		t.Fatal(err)
	}
	return s, func() { cancel(); <-s.Stopped() }
}

// storeKinds are the stores the restart tests run on: the in-memory test
// store (the journal applies its batches) and the embedded store (the
// journal pipelines them; a restart reopens it from disk).
var storeKinds = []struct {
	name string
	// open returns a store and reopen, which closes it and opens it
	// again as a restarted process would.
	open func(t *testing.T) (statestore.Store, func(statestore.Store) statestore.Store)
}{
	{"memory", func(t *testing.T) (statestore.Store, func(statestore.Store) statestore.Store) {
		return statestore.NewMemory(), func(s statestore.Store) statestore.Store { return s }
	}},
	{"embedded", func(t *testing.T) (statestore.Store, func(statestore.Store) statestore.Store) {
		dir := t.TempDir()
		open := func() statestore.Store {
			e, err := statestore.OpenEmbedded(dir)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { e.Close() })
			return e
		}
		return open(), func(s statestore.Store) statestore.Store {
			if err := s.Close(); err != nil {
				t.Fatalf("closing the store: %v", err)
			}
			return open()
		}
	}},
}

func TestRestartKeepsQueueLeasesAndOperations(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind.name, func(t *testing.T) {
			store, reopen := kind.open(t)
			clk := &fakeClock{now: time.Unix(1_700_000_000, 0)}
			s, stop := durableTest(t, store, clk)
			register(s, "w1")
			// Queued: c (priority 0, user x), d (priority -1), e (0), in that
			// submission order; a is leased to w1, b finished.
			opA := submit(t, s, "a", func(r *SubmitRequest) { r.Invocation = []string{"x"} })
			la := pollNow(t, s, "w1", 1)
			opB := submit(t, s, "b")
			lb := pollNow(t, s, "w1", 1)
			s.completeOne("w1", lb.LeaseID, &repb.ExecuteResponse{Result: &repb.ActionResult{ExitCode: 7}})
			opC := submit(t, s, "c", func(r *SubmitRequest) { r.Invocation = []string{"x"} })
			opD := submit(t, s, "d", func(r *SubmitRequest) { r.Priority = -1 })
			opE := submit(t, s, "e")
			stop()

			// A new scheduler process on the same store.
			store = reopen(store)
			s2, stop2 := durableTest(t, store, clk)
			defer stop2()
			if st := s2.Stats(); st.Queued != 3 || st.Leased != 1 || st.Operations != 5 {
				t.Fatalf("restored %+v, want 3 queued, 1 leased, 5 operations", st)
			}
			// The finished operation still has its result.
			if st := state(t, s2, opB); !st.Done || st.Response.Result.GetExitCode() != 7 {
				t.Errorf("finished operation after restart: %+v", st)
			}
			// The worker comes back: until it registers again it gets no work,
			// but the lease it reports stays its own.
			if _, err := s2.Heartbeat("w1", []LeaseReport{{LeaseID: la.LeaseID}}); err != ErrUnknownWorker {
				t.Fatalf("heartbeat before registering: %v, want ErrUnknownWorker", err)
			}
			register(s2, "w1")
			register(s2, "w2")
			cmds, err := s2.Heartbeat("w1", []LeaseReport{{LeaseID: la.LeaseID}})
			if err != nil || len(cmds) != 0 {
				t.Fatalf("heartbeat with the restored lease: %v %v", cmds, err)
			}
			// The queue comes back in its order: d (better priority), then c, e.
			var order []string
			for i := 0; i < 3; i++ {
				a := pollNow(t, s2, "w2", 1)
				if a == nil {
					t.Fatal("queued work lost")
				}
				for name, op := range map[string]string{"c": opC, "d": opD, "e": opE} {
					if a.Task.ops[0].Name == op {
						order = append(order, name)
					}
				}
			}
			if fmt.Sprint(order) != "[d c e]" {
				t.Errorf("order after restart %v, want [d c e]", order)
			}
			// The restored lease completes normally, once.
			if !s2.completeOne("w1", la.LeaseID, okResponse()) {
				t.Fatal("completion of the restored lease refused")
			}
			if st := state(t, s2, opA); !st.Done {
				t.Errorf("operation a: %+v", st)
			}
			if s2.completeOne("w1", la.LeaseID, okResponse()) {
				t.Error("second completion accepted")
			}
		})
	}
}

func TestRestartRequeuesLeaseWhoseWorkerDoesNotReturn(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind.name, func(t *testing.T) {
			store, reopen := kind.open(t)
			clk := &fakeClock{now: time.Unix(1_700_000_000, 0)}
			s, stop := durableTest(t, store, clk)
			register(s, "gone")
			op := submit(t, s, "a")
			if pollNow(t, s, "gone", 1) == nil {
				t.Fatal("no lease")
			}
			stop()
			store = reopen(store)
			s2, stop2 := durableTest(t, store, clk)
			defer stop2()
			register(s2, "other")
			clk.Advance(11 * time.Second)
			s2.Heartbeat("other", nil)
			s2.Tick()
			a := pollNow(t, s2, "other", 1)
			if a == nil || a.Task.ops[0].Name != op {
				t.Fatalf("the lost lease's action was not requeued: %+v", a)
			}
			if a.Attempt != 2 {
				t.Errorf("attempt %d, want 2", a.Attempt)
			}
		})
	}
}

func TestRestartAfterCancelAndRetention(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind.name, func(t *testing.T) {
			store, reopen := kind.open(t)
			clk := &fakeClock{now: time.Unix(1_700_000_000, 0)}
			s, stop := durableTest(t, store, clk)
			op := submit(t, s, "a")
			if err := s.Cancel(op); err != nil {
				t.Fatal(err)
			}
			stop()
			store = reopen(store)
			s2, stop2 := durableTest(t, store, clk)
			st := state(t, s2, op)
			if !st.Done || status.FromProto(st.Response.Status).Code() != codes.Canceled || s2.Stats().Queued != 0 {
				t.Fatalf("cancelled operation after restart: %+v", st)
			}
			// After retention the record goes.
			clk.Advance(2 * time.Hour)
			s2.Tick()
			stop2()
			s3, stop3 := durableTest(t, store, clk)
			defer stop3()
			if _, _, err := s3.Watch(op); err != ErrNotFound {
				t.Errorf("operation still there after retention: %v", err)
			}
		})
	}
}

func TestGroupCommit(t *testing.T) {
	store := &slowStore{Memory: statestore.NewMemory(), delay: 5 * time.Millisecond}
	clk := &fakeClock{now: time.Unix(1_700_000_000, 0)}
	s, stop := durableTest(t, store, clk)
	defer stop()
	var wg sync.WaitGroup
	const n = 200
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := s.Submit(SubmitRequest{Instance: "main", ActionDigest: action(fmt.Sprint("g", i))}); err != nil {
				t.Error(err)
			}
		}()
	}
	waitGroup(t, "end of the submissions", &wg)
	n2 := 0
	store.Load(context.Background(), kindOp, func(string, []byte) error { n2++; return nil })
	if n2 != n {
		t.Fatalf("%d operations stored, want %d", n2, n)
	}
	t.Logf("%d submits took %d commits", n, store.Commits)
	if store.Commits >= n/2 {
		t.Errorf("%d commits for %d concurrent submits: not grouped", store.Commits, n)
	}
}

type slowStore struct {
	*statestore.Memory
	delay time.Duration
}

func (s *slowStore) Apply(ctx context.Context, b []statestore.Mutation) error {
	time.Sleep(s.delay)
	return s.Memory.Apply(ctx, b)
}

func TestStoreFailureIsReported(t *testing.T) {
	clk := &fakeClock{now: time.Unix(1_700_000_000, 0)}
	store := &failingStore{Memory: statestore.NewMemory()}
	s, stop := durableTest(t, store, clk)
	defer stop()
	store.failing.Store(true)
	_, err := s.Submit(SubmitRequest{Instance: "main", ActionDigest: action("x")})
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("submit with a failing store: %v, want ErrUnavailable", err)
	}
}

// A store that cannot write fails Attach, saying so: the scheduler could
// not tell a later restore that it ran (reconcile.go).
func TestAttachFailsOnAStoreThatCannotWrite(t *testing.T) {
	store := &failingStore{Memory: statestore.NewMemory()}
	store.failing.Store(true)
	s := New(Config{}, &fakeClock{now: time.Unix(1_700_000_000, 0)}, nil)
	err := s.Attach(context.Background(), store)
	if err == nil || !strings.Contains(err.Error(), "disk full") || !strings.Contains(err.Error(), "writable") {
		t.Fatalf("Attach on a store that cannot write: %v, want the store's error and what to check", err)
	}
}

// failingStore fails every Apply once failing is set.
type failingStore struct {
	*statestore.Memory
	failing atomic.Bool
}

func (f *failingStore) Apply(ctx context.Context, b []statestore.Mutation) error {
	if f.failing.Load() {
		return fmt.Errorf("disk full")
	}
	return f.Memory.Apply(ctx, b)
}

// gatedStore holds every Apply until the gate is open.
type gatedStore struct {
	*statestore.Memory
	mu   sync.Mutex
	gate chan struct{}
}

func (g *gatedStore) setGate(c chan struct{}) { g.mu.Lock(); g.gate = c; g.mu.Unlock() }

// newGatedStore is a gatedStore whose gate is open.
func newGatedStore() *gatedStore {
	open := make(chan struct{})
	close(open)
	return &gatedStore{Memory: statestore.NewMemory(), gate: open}
}

// shut closes the gate once every change s made so far is stored
// (leases are not stored when they are handed out): nothing more
// reaches the store until open is called (at the latest when the test
// ends, so that a failed test stops).
func (g *gatedStore) shut(t *testing.T, s *Scheduler) (open func()) {
	gate := make(chan struct{})
	var once sync.Once
	open = func() { once.Do(func() { close(gate) }) }
	t.Cleanup(open)
	if err := s.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	g.setGate(gate)
	return open
}

func (g *gatedStore) Apply(ctx context.Context, b []statestore.Mutation) error {
	g.mu.Lock()
	gate := g.gate
	g.mu.Unlock()
	<-gate
	return g.Memory.Apply(ctx, b)
}

func TestCompleteManyStoresBeforeStored(t *testing.T) {
	store := newGatedStore()
	clk := &fakeClock{now: time.Unix(1_700_000_000, 0)}
	s, stop := durableTest(t, store, clk)
	register(s, "w")
	ops := []string{submit(t, s, "a"), submit(t, s, "b"), submit(t, s, "c")}
	var cs []Completion
	for range ops {
		a := pollNow(t, s, "w", 1)
		if a == nil {
			t.Fatal("no lease")
		}
		cs = append(cs, Completion{LeaseID: a.LeaseID, Response: okResponse()})
	}
	cs = append(cs, Completion{LeaseID: "not-a-lease", Response: okResponse()})
	openGate := store.shut(t, s) // nothing more reaches the store
	accepted, stored := s.Complete(context.Background(), "w", cs)
	if want := []bool{true, true, true, false}; !reflect.DeepEqual(accepted, want) {
		t.Fatalf("accepted %v, want %v", accepted, want)
	}
	done := make(chan struct{})
	go func() { stored(); close(done) }()
	select {
	case <-done:
		t.Fatal("stored returned while the store had not written the completions")
	case <-time.After(50 * time.Millisecond):
	}
	openGate()
	receive(t, "end of the completions", done)
	stop()
	// A restart finds all three finished.
	s2, stop2 := durableTest(t, store.Memory, clk)
	defer stop2()
	for _, op := range ops {
		if st := state(t, s2, op); !st.Done {
			t.Errorf("operation %s after restart: %+v", op, st)
		}
	}
}

// A client never sees a result before it is stored.
func TestResultVisibleOnlyOnceStored(t *testing.T) {
	store := newGatedStore()
	clk := &fakeClock{now: time.Unix(1_700_000_000, 0)}
	s, stop := durableTest(t, store, clk)
	t.Cleanup(stop) // after the gate opens (cleanups run last first)
	register(s, "w")
	op := submit(t, s, "a")
	a := pollNow(t, s, "w", 1)
	st, changed, err := s.Watch(op)
	if err != nil || st.Done {
		t.Fatalf("before completion: %+v %v", st, err)
	}
	openGate := store.shut(t, s)
	accepted, stored := s.Complete(context.Background(), "w", []Completion{{LeaseID: a.LeaseID, Response: okResponse()}})
	if !accepted[0] {
		t.Fatal("completion refused")
	}
	// Not stored yet: not done, for Watch and List, and no wake-up.
	if st, _, _ := s.Watch(op); st.Done || st.Stage != repb.ExecutionStage_EXECUTING {
		t.Fatalf("result visible before it is stored: %+v", st)
	}
	for _, st := range s.List() {
		if st.Name == op && st.Done {
			t.Fatal("List shows a result before it is stored")
		}
	}
	select {
	case <-changed:
		if st, _, _ := s.Watch(op); st.Done {
			t.Fatal("result visible before it is stored")
		}
	default:
	}
	openGate()
	stored()
	select {
	case <-changed:
	case <-time.After(10 * time.Second):
		t.Fatal("watchers not woken once the result was stored")
	}
	if st, _, _ := s.Watch(op); !st.Done || st.Response.GetResult() == nil {
		t.Fatalf("stored result not visible: %+v", st)
	}
}

// switchStore fails every Apply once failing is set.
type switchStore struct {
	*statestore.Memory
	mu      sync.Mutex
	failing bool
}

func (s *switchStore) Apply(ctx context.Context, b []statestore.Mutation) error {
	s.mu.Lock()
	failing := s.failing
	s.mu.Unlock()
	if failing {
		return fmt.Errorf("disk full")
	}
	return s.Memory.Apply(ctx, b)
}

// After a failed commit, results stored before it stay visible; later
// ones are never shown.
func TestStoredResultsStayVisibleAfterAFailure(t *testing.T) {
	store := &switchStore{Memory: statestore.NewMemory()}
	clk := &fakeClock{now: time.Unix(1_700_000_000, 0)}
	s, stop := durableTest(t, store, clk)
	defer stop()
	register(s, "w")
	opA, opB := submit(t, s, "a"), submit(t, s, "b")
	la, lb := pollNow(t, s, "w", 1), pollNow(t, s, "w", 1)
	if !s.completeOne("w", la.LeaseID, okResponse()) {
		t.Fatal("completion of a refused")
	}
	store.mu.Lock()
	store.failing = true
	store.mu.Unlock()
	s.completeOne("w", lb.LeaseID, okResponse())
	if err := s.Flush(context.Background()); err == nil {
		t.Fatal("flush after a failed commit succeeded")
	}
	if st := state(t, s, opA); !st.Done {
		t.Errorf("result stored before the failure is hidden: %+v", st)
	}
	if st := state(t, s, opB); st.Done {
		t.Errorf("result whose commit failed is shown: %+v", st)
	}
}

// TestRestartKeepsAcceptedAndInvocation: an operation restored after a
// restart keeps when it was accepted and its own invocation path (not
// the task's, which a join from another invocation shortened), whether
// it was queued, leased or finished; the held/executing split of a
// restored lease starts as held until its worker reports it again.
func TestRestartKeepsAcceptedAndInvocation(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind.name, func(t *testing.T) {
			store, reopen := kind.open(t)
			start := time.Unix(1_700_000_000, 0)
			clk := &fakeClock{now: start}
			s, stop := durableTest(t, store, clk)
			register(s, "w1")
			accepted := start.Add(-5 * time.Second) // before the submit: Execute's cache check, reading the action
			opA := submit(t, s, "a", func(r *SubmitRequest) {
				r.Invocation, r.Accepted = []string{"alice", "build-1"}, accepted
			})
			// bob's identical action joins a's task: the task's invocation
			// becomes the common ancestor (the root), bob's stays his.
			clk.Advance(time.Second)
			opJ := submit(t, s, "a", func(r *SubmitRequest) { r.Invocation = []string{"bob", "build-2"} })
			la := pollNow(t, s, "w1", 1)
			clk.Advance(time.Second)
			opD := submit(t, s, "done", func(r *SubmitRequest) { r.Invocation = []string{"dave", "build-4"} })
			ld := pollNow(t, s, "w1", 1)
			clk.Advance(time.Second)
			if !s.completeOne("w1", ld.LeaseID, okResponse()) {
				t.Fatal("completion refused")
			}
			doneAt := clk.Now()
			opQ := submit(t, s, "queued", func(r *SubmitRequest) { r.Invocation = []string{"carol", "build-3"} })
			if _, err := s.Heartbeat("w1", []LeaseReport{{LeaseID: la.LeaseID, Stage: repb.ExecutionStage_EXECUTING}}); err != nil {
				t.Fatal(err)
			}
			if st := s.Stats(); st.Executing != 1 || st.Held != 0 {
				t.Fatalf("before the restart: %+v, want 1 executing", st)
			}
			stop()

			store = reopen(store)
			clk.Advance(time.Minute)
			s2, stop2 := durableTest(t, store, clk)
			defer stop2()
			for _, c := range []struct {
				op       string
				accepted time.Time
				inv      []string
			}{
				{opA, accepted, []string{"alice", "build-1"}},
				{opJ, start.Add(time.Second), []string{"bob", "build-2"}},
				{opD, start.Add(2 * time.Second), []string{"dave", "build-4"}},
				{opQ, start.Add(3 * time.Second), []string{"carol", "build-3"}},
			} {
				st := state(t, s2, c.op)
				if !st.Accepted.Equal(c.accepted) || fmt.Sprint(st.Invocation) != fmt.Sprint(c.inv) {
					t.Errorf("%s after restart: accepted %v, invocation %q; want %v, %q", c.op, st.Accepted, st.Invocation, c.accepted, c.inv)
				}
			}
			if st := state(t, s2, opD); !st.Done || !st.DoneAt.Equal(doneAt) {
				t.Errorf("finished operation after restart: done %v at %v, want done at %v", st.Done, st.DoneAt, doneAt)
			}
			// Nobody knows whether the restored lease runs until its
			// worker says so.
			if st := s2.Stats(); st.Leased != 1 || st.Held != 1 || st.Executing != 0 {
				t.Errorf("restored lease: %+v, want 1 leased, held", st)
			}
			register(s2, "w1")
			if _, err := s2.Heartbeat("w1", []LeaseReport{{LeaseID: la.LeaseID, Stage: repb.ExecutionStage_EXECUTING}}); err != nil {
				t.Fatal(err)
			}
			if st := s2.Stats(); st.Held != 0 || st.Executing != 1 {
				t.Errorf("restored lease reported executing: %+v", st)
			}
		})
	}
}

// An operation record written before operations kept their acceptance
// and invocation (version 1) loads; a queued operation then takes its
// task's queue time and invocation.
func TestRestoreFromV1OperationRecords(t *testing.T) {
	store := statestore.NewMemory()
	clk := &fakeClock{now: time.Unix(1_700_000_000, 0)}
	ad := action("v1")
	queuedAt := clk.now.Add(-time.Minute)
	task := taskRecord{ID: "tq", Instance: "main", Function: int32(ad.Function), Hash: ad.Hash, Size: ad.Size, Cacheable: true, QueuedAt: queuedAt}
	v1 := func(task string) []byte {
		// task, done, response, done_at: the whole version 1 record.
		w := recWriter{recordV1}
		w.str(task)
		w.bool(false)
		w.bytes(nil)
		w.time(time.Time{})
		return w
	}
	st := taskStateRecord{Seq: 1, Invocation: []string{"alice"}}
	if err := store.Apply(context.Background(), []statestore.Mutation{
		{Kind: kindTask, Key: "tq", Value: task.marshal()},
		{Kind: kindTaskState, Key: "tq", Value: st.marshal()},
		{Kind: kindOp, Key: "op-v1", Value: v1("tq")},
	}); err != nil {
		t.Fatal(err)
	}
	s, stop := durableTest(t, store, clk)
	defer stop()
	got := state(t, s, "op-v1")
	if !got.Accepted.Equal(queuedAt) || fmt.Sprint(got.Invocation) != "[alice]" {
		t.Errorf("operation from a version 1 record: accepted %v, invocation %q; want %v, [alice]", got.Accepted, got.Invocation, queuedAt)
	}
}
