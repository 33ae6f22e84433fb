package scheduler

import (
	"context"
	"testing"
	"time"
)

// A poll that asks for unstored leases (the embedded worker's) gets its
// lease while the store cannot write it; any other poll waits until the
// lease is stored. Either way the lease and its result are stored with
// the result.
func TestUnstoredPollDoesNotWaitForTheLease(t *testing.T) {
	store := newGatedStore()
	clk := &fakeClock{now: time.Unix(1_700_000_000, 0)}
	s, stop := durableTest(t, store, clk)
	register(s, "embedded")
	register(s, "remote")
	ops := []string{submit(t, s, "a"), submit(t, s, "b")}
	openGate := store.shut(t, s)

	poll := func(worker string, unstored bool) <-chan *Assignment {
		got := make(chan *Assignment, 1)
		go func() {
			as, err := s.PollMany(context.Background(), PollRequest{WorkerID: worker, Free: Capacity{Cores: 1}, Unstored: unstored})
			if err != nil {
				t.Error(err)
			}
			if len(as) == 0 {
				got <- nil
				return
			}
			got <- as[0]
		}()
		return got
	}
	var local *Assignment
	select {
	case local = <-poll("embedded", true):
	case <-time.After(20 * time.Second):
		t.Fatal("the unstored poll waited for the store")
	}
	if local == nil {
		t.Fatal("the unstored poll got no lease")
	}
	remote := poll("remote", false)
	select {
	case a := <-remote:
		t.Fatalf("the remote worker was told of lease %v before it was stored", a)
	case <-time.After(50 * time.Millisecond):
	}
	openGate()
	if a := receive(t, "remote poll", remote); a == nil {
		t.Fatal("the remote poll got no lease")
	}
	_, stored := s.Complete(context.Background(), "embedded", []Completion{{LeaseID: local.LeaseID, Response: okResponse()}})
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
		t.Errorf("%d operations done after a restart, want 1 (the unstored lease's)", done)
	}
}
