package scheduler

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gantry-build/gantry/internal/statestore"
)

// killedCopy is what a scheduler on m leaves if it is killed now: the
// records m holds (a commit waiting at a gate never happened).
func killedCopy(t *testing.T, m *statestore.Memory) *statestore.Memory {
	t.Helper()
	ctx := context.Background()
	var batch []statestore.Mutation
	for _, kind := range []string{kindTask, kindTaskState, kindOp, kindOpMeta, kindStop} {
		err := m.Load(ctx, kind, func(key string, value []byte) error {
			batch = append(batch, statestore.Mutation{Kind: kind, Key: key, Value: value})
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	out := statestore.NewMemory()
	if err := out.Apply(ctx, batch); err != nil {
		t.Fatal(err)
	}
	return out
}

// leaseUnstored starts a scheduler on a gated store, leases one action
// to worker "w1" while the store writes nothing, and returns the copy a
// kill leaves then, with the lease and the operation. It checks that
// the lease is not in the copy: the worker was told of it first.
func leaseUnstored(t *testing.T, clk *fakeClock) (killed *statestore.Memory, a *Assignment, op string) {
	t.Helper()
	store := newGatedStore()
	s, stop := durableTest(t, store, clk)
	t.Cleanup(stop) // after the gate opens (cleanups run last first)
	register(s, "w1")
	op = submit(t, s, "a")
	store.shut(t, s)
	got := make(chan *Assignment, 1)
	go func() { got <- pollNow(t, s, "w1", 1) }()
	select {
	case a = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("the poll waited for the store to write its lease")
	}
	if a == nil {
		t.Fatal("no lease")
	}
	killed = killedCopy(t, store.Memory)
	killed.Load(context.Background(), kindTaskState, func(key string, value []byte) error {
		var st taskStateRecord
		if err := st.unmarshal(value); err != nil {
			t.Fatal(err)
		}
		if st.Lease != "" {
			t.Fatalf("the lease was stored before the worker was told of it: %+v", st)
		}
		return nil
	})
	return killed, a, op
}

// A lease handed out but not yet stored when the scheduler is killed is
// adopted when its worker registers again listing it: nobody else runs
// the action, before or after the reconciliation window, and the
// worker's result is taken.
func TestUnstoredLeaseAdoptedWhenItsWorkerRegistersAgain(t *testing.T) {
	clk := &fakeClock{now: time.Unix(1_700_000_000, 0)}
	killed, a, op := leaseUnstored(t, clk)

	s2, stop2 := durableTest(t, killed, clk)
	defer stop2()
	register(s2, "other")
	if b := pollNow(t, s2, "other", 1); b != nil {
		t.Fatalf("a restored action that might be running was dispatched at once: %+v", b)
	}
	s2.RegisterWorkerHolding(workerInfo("w1"), []string{a.LeaseID})
	clk.Advance(DefaultReconcileWindow + time.Second)
	s2.Tick()
	if b := pollNow(t, s2, "other", 1); b != nil {
		t.Fatalf("an adopted action was dispatched again: %+v", b)
	}
	if !s2.completeOne("w1", a.LeaseID, okResponse()) {
		t.Fatal("the adopted lease's result was refused")
	}
	if st := state(t, s2, op); !st.Done {
		t.Errorf("operation after the adopted lease's result: %+v", st)
	}
	if m := s2.MetricsSnapshot(); m.Adopted != 1 || m.Retries != 0 {
		t.Errorf("adopted %d, retries %d; want 1 and 0", m.Adopted, m.Retries)
	}
}

// A restored action whose worker never comes back is dispatched again
// once the window has passed, not before; the worker, should it come
// back later, is told to cancel its lease.
func TestRestoredActionDispatchedAgainAfterTheWindow(t *testing.T) {
	clk := &fakeClock{now: time.Unix(1_700_000_000, 0)}
	killed, a, op := leaseUnstored(t, clk)

	s2, stop2 := durableTest(t, killed, clk)
	defer stop2()
	register(s2, "other")
	if st := s2.Stats(); st.Queued != 1 {
		t.Errorf("stats while held back: %+v, want 1 queued", st)
	}
	clk.Advance(DefaultReconcileWindow - time.Millisecond)
	s2.Tick()
	if b := pollNow(t, s2, "other", 1); b != nil {
		t.Fatalf("dispatched before the window ended: %+v", b)
	}
	clk.Advance(2 * time.Millisecond)
	s2.Tick()
	b := pollNow(t, s2, "other", 1)
	if b == nil || b.Task.ops[0].Name != op {
		t.Fatalf("after the window: %+v, want a lease of %s", b, op)
	}
	register(s2, "w1")
	cmds, err := s2.Heartbeat("w1", []LeaseReport{{LeaseID: a.LeaseID}})
	if err != nil {
		t.Fatal(err)
	}
	if len(cmds) != 1 || cmds[0].Kind != CommandCancel || cmds[0].LeaseID != a.LeaseID {
		t.Errorf("a late worker's lease of an action running elsewhere: commands %+v, want a cancel", cmds)
	}
}

// A worker that reports, in a heartbeat, a lease the scheduler has no
// record of gets it adopted while the action is still wanted, and told
// to cancel it once nobody wants the action.
func TestHeartbeatAdoptsUnknownLeaseOfAWantedAction(t *testing.T) {
	for _, wanted := range []bool{true, false} {
		name := "wanted"
		if !wanted {
			name = "cancelled"
		}
		t.Run(name, func(t *testing.T) {
			clk := &fakeClock{now: time.Unix(1_700_000_000, 0)}
			killed, a, op := leaseUnstored(t, clk)
			s2, stop2 := durableTest(t, killed, clk)
			defer stop2()
			if !wanted {
				if err := s2.Cancel(op); err != nil {
					t.Fatal(err)
				}
			}
			register(s2, "w1") // a worker that lists no leases as it registers
			cmds, err := s2.Heartbeat("w1", []LeaseReport{{LeaseID: a.LeaseID}})
			if err != nil {
				t.Fatal(err)
			}
			if !wanted {
				if len(cmds) != 1 || cmds[0].Kind != CommandCancel {
					t.Errorf("lease of a cancelled action: commands %+v, want a cancel", cmds)
				}
				if s2.completeOne("w1", a.LeaseID, okResponse()) {
					t.Error("the result of a cancelled action's lease was taken")
				}
				return
			}
			if len(cmds) != 0 {
				t.Fatalf("lease of a wanted action: commands %+v, want none", cmds)
			}
			if !s2.completeOne("w1", a.LeaseID, okResponse()) {
				t.Fatal("the adopted lease's result was refused")
			}
			if st := state(t, s2, op); !st.Done {
				t.Errorf("operation: %+v", st)
			}
		})
	}
}

// A worker whose Complete reaches the new scheduler before it registers
// again still gets its result taken.
func TestCompleteAdoptsUnknownLease(t *testing.T) {
	clk := &fakeClock{now: time.Unix(1_700_000_000, 0)}
	killed, a, op := leaseUnstored(t, clk)
	s2, stop2 := durableTest(t, killed, clk)
	defer stop2()
	register(s2, "w1")
	if !s2.completeOne("w1", a.LeaseID, okResponse()) {
		t.Fatal("the result of a lease the restore did not hold was refused")
	}
	if st := state(t, s2, op); !st.Done {
		t.Errorf("operation: %+v", st)
	}
}

// After a clean stop every lease is stored, so the restore dispatches at
// once; the restored scheduler marks the store as running again, so a
// kill of it is reconciled.
func TestCleanStopNeedsNoReconciliation(t *testing.T) {
	clk := &fakeClock{now: time.Unix(1_700_000_000, 0)}
	store := statestore.NewMemory()
	s, stop := durableTest(t, store, clk)
	register(s, "w1")
	opA, opB := submit(t, s, "a"), submit(t, s, "b")
	if pollNow(t, s, "w1", 1) == nil {
		t.Fatal("no lease")
	}
	stop()

	s2, stop2 := durableTest(t, store, clk)
	defer stop2()
	register(s2, "other")
	b := pollNow(t, s2, "other", 1)
	if b == nil || b.Task.ops[0].Name != opB {
		t.Fatalf("after a clean stop: %+v, want %s dispatched at once", b, opB)
	}
	if st := s2.Stats(); st.Leased != 2 {
		t.Errorf("after a clean stop: %+v, want 2 leases (%s's stored by the last flush)", st, opA)
	}
	if err := s2.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	submit(t, s2, "c")
	s3, stop3 := durableTest(t, killedCopy(t, store), clk)
	defer stop3()
	register(s3, "other")
	if c := pollNow(t, s3, "other", 1); c != nil {
		t.Fatalf("after a kill of the restored scheduler: %+v dispatched at once", c)
	}
}

// Once the last flush is made, no lease is handed out: it would never be
// stored, and the next scheduler would take the stop for a clean one.
func TestNoLeaseAfterTheLastFlush(t *testing.T) {
	clk := &fakeClock{now: time.Unix(1_700_000_000, 0)}
	store := statestore.NewMemory()
	s, stop := durableTest(t, store, clk)
	register(s, "w1")
	op := submit(t, s, "a")
	stop()
	as, err := s.PollMany(context.Background(), PollRequest{WorkerID: "w1", Free: Capacity{Cores: 1}})
	if !errors.Is(err, ErrHalted) || len(as) != 0 {
		t.Fatalf("poll after the last flush: %v %v, want ErrHalted and no lease", as, err)
	}
	s2, stop2 := durableTest(t, store, clk)
	defer stop2()
	register(s2, "w1")
	if a := pollNow(t, s2, "w1", 1); a == nil || a.Task.ops[0].Name != op || a.Attempt != 1 {
		t.Fatalf("after a restart: %+v, want the first attempt of %s", a, op)
	}
}

// applyCounter counts the commits (Apply calls) of its store, and the
// task records they write or delete.
type applyCounter struct {
	*statestore.Memory
	n, taskRecords atomic.Int64
}

func (c *applyCounter) Apply(ctx context.Context, b []statestore.Mutation) error {
	c.n.Add(1)
	for _, m := range b {
		if m.Kind == kindTask || m.Kind == kindTaskState {
			c.taskRecords.Add(1)
		}
	}
	return c.Memory.Apply(ctx, b)
}

// An action handed straight to a waiting worker costs one commit: its
// submission, its lease and its result are stored together, before the
// caller hears of the operation or its result, and its task, finished
// by then, is not written at all. A longer action's
// submission is stored on its own, soon.
func TestActionHandedToAWaitingWorkerTakesOneCommit(t *testing.T) {
	store := &applyCounter{Memory: statestore.NewMemory()}
	clk := &fakeClock{now: time.Unix(1_700_000_000, 0)}
	s, stop := durableTest(t, store, clk)
	defer stop()
	register(s, "w")
	poll := func() <-chan *Assignment {
		got := make(chan *Assignment, 1)
		go func() {
			as, err := s.PollMany(context.Background(), PollRequest{WorkerID: "w", Free: Capacity{Cores: 1}})
			if err != nil || len(as) != 1 {
				t.Errorf("poll: %v %v", as, err)
				got <- nil
				return
			}
			got <- as[0]
		}()
		waitForWaiters(t, s, 1)
		return got
	}
	submitted := func(name string) <-chan string {
		op := make(chan string, 1)
		go func() { op <- submit(t, s, name) }()
		return op
	}
	if err := s.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	before, tasksBefore := store.n.Load(), store.taskRecords.Load()
	leased := poll()
	op := submitted("a")
	a := receive(t, "lease", leased)
	accepted, stored := s.Complete(context.Background(), "w", []Completion{{LeaseID: a.LeaseID, Response: okResponse()}})
	if !accepted[0] {
		t.Fatal("completion refused")
	}
	stored()
	name := receive(t, "submission", op)
	if st := state(t, s, name); !st.Done {
		t.Fatalf("operation after its result was stored: %+v", st)
	}
	if n := store.n.Load() - before; n != 1 {
		t.Errorf("%d commits for an action handed straight to a waiting worker, want 1", n)
	}
	// Its task finished within that commit: it is neither written nor
	// deleted.
	if n := store.taskRecords.Load() - tasksBefore; n != 0 {
		t.Errorf("%d task records written or deleted for a task that finished within one commit, want 0", n)
	}
	// A long action: the submission does not wait for its result.
	leased = poll()
	op = submitted("b")
	receive(t, "lease of b", leased)
	receive(t, "submission of b (its result never comes)", op)
}

// FuzzReportedLeaseID: whatever lease id a worker reports after a kill,
// the scheduler does not panic, and adopts the held action exactly when
// the id names its task (and cancels the lease otherwise).
func FuzzReportedLeaseID(f *testing.F) {
	f.Add("")
	f.Add(".")
	f.Add("not-a-lease")
	f.Add("x.y.z")
	var once sync.Once
	var killed *statestore.Memory
	var taskID string
	clk := &fakeClock{now: time.Unix(1_700_000_000, 0)}
	f.Fuzz(func(t *testing.T, id string) {
		once.Do(func() {
			var a *Assignment
			killed, a, _ = leaseUnstored(t, clk)
			taskID = a.Task.ID
		})
		s, stop := durableTest(t, killedCopy(t, killed), clk)
		defer stop()
		register(s, "w1")
		for _, lease := range []string{id, taskID + "." + id} {
			cmds, err := s.Heartbeat("w1", []LeaseReport{{LeaseID: lease}})
			if err != nil {
				t.Fatal(err)
			}
			adopted := s.MetricsSnapshot().Adopted == 1
			if want := strings.HasPrefix(lease, taskID+"."); adopted != want {
				t.Fatalf("lease %q: adopted %v, want %v", lease, adopted, want)
			}
			if adopted != (len(cmds) == 0) {
				t.Fatalf("lease %q: adopted %v, commands %+v", lease, adopted, cmds)
			}
			if adopted {
				return
			}
		}
	})
}
