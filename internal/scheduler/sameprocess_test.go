package scheduler

import (
	"context"
	"testing"
	"time"
)

// A worker in the scheduler's process gets its lease while the store
// cannot write it; a worker elsewhere waits until the lease is stored.
// Either way the lease and its result are stored with the result.
func TestSameProcessPollDoesNotWaitForTheLease(t *testing.T) {
	store := newGatedStore()
	clk := &fakeClock{now: time.Unix(1_700_000_000, 0)}
	s, stop := durableTest(t, store, clk)
	register(s, "embedded")
	register(s, "remote")
	ops := []string{submit(t, s, "a"), submit(t, s, "b")}
	openGate := store.shut(t, s)

	poll := func(ctx context.Context, worker string) <-chan *Assignment {
		got := make(chan *Assignment, 1)
		go func() {
			a, err := s.Poll(ctx, worker, Capacity{Cores: 1})
			if err != nil {
				t.Error(err)
			}
			got <- a
		}()
		return got
	}
	var local *Assignment
	select {
	case local = <-poll(SameProcess(context.Background()), "embedded"):
	case <-time.After(20 * time.Second):
		t.Fatal("the same-process poll waited for the store")
	}
	if local == nil {
		t.Fatal("the same-process poll got no lease")
	}
	remote := poll(context.Background(), "remote")
	select {
	case a := <-remote:
		t.Fatalf("the remote worker was told of lease %v before it was stored", a)
	case <-time.After(50 * time.Millisecond):
	}
	openGate()
	if a := receive(t, "remote poll", remote); a == nil {
		t.Fatal("the remote poll got no lease")
	}
	_, stored := s.CompleteMany("embedded", []Completion{{LeaseID: local.LeaseID, Response: okResponse()}})
	stored()
	stop()
	s2, stop2 := durableTest(t, store.Memory, clk)
	defer stop2()
	done := 0
	for _, op := range ops {
		if state(t, s2, op).Done {
			done++
		}
	}
	if done != 1 {
		t.Errorf("%d operations done after a restart, want 1 (the same-process lease's)", done)
	}
}
