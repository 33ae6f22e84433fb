package worker

import (
	"context"
	"sync"
	"testing"
	"time"

	workerpb "github.com/gantry-build/gantry/api/worker/v1"
)

// restartingScheduler answers every Poll and Heartbeat with Reregister
// while "restarted" is set (as a new scheduler leader does for a worker it
// does not know), and clears it on Register.
type restartingScheduler struct {
	workerpb.UnimplementedWorkersServer

	mu        sync.Mutex
	restarted bool
	registers int
	// intervalMs is the heartbeat interval handed out at registration.
	intervalMs int64
	heartbeats int
	reregSent  int // Reregister answers given (Poll and Heartbeat)
}

func (s *restartingScheduler) Register(context.Context, *workerpb.RegisterRequest) (*workerpb.RegisterResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.registers++
	s.restarted = false
	return &workerpb.RegisterResponse{HeartbeatIntervalMs: s.intervalMs, HeartbeatTimeoutMs: 10_000}, nil
}

func (s *restartingScheduler) Poll(ctx context.Context, req *workerpb.PollRequest) (*workerpb.PollResponse, error) {
	// Hold the poll briefly, like a long poll with nothing to hand out.
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(2 * time.Millisecond):
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.restarted {
		s.reregSent++
		return &workerpb.PollResponse{Reregister: true}, nil
	}
	return &workerpb.PollResponse{}, nil
}

func (s *restartingScheduler) Heartbeat(context.Context, *workerpb.HeartbeatRequest) (*workerpb.HeartbeatResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.heartbeats++
	if s.restarted {
		s.reregSent++
		return &workerpb.HeartbeatResponse{Reregister: true}, nil
	}
	return &workerpb.HeartbeatResponse{}, nil
}

func (s *restartingScheduler) snapshot() (registers, heartbeats, reregSent int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.registers, s.heartbeats, s.reregSent
}

// TestReregisterOnceWhenBothLoopsAreTold: after a scheduler fail-over the
// Match stage and the heartbeat loop both hear Reregister. The worker
// registers once per restart (not once per loop), without a data race
// (run under -race), and adopts the new scheduler's heartbeat interval.
func TestReregisterOnceWhenBothLoopsAreTold(t *testing.T) {
	sched := &restartingScheduler{intervalMs: 1}
	runWorkerAgainst(t, sched, Config{
		ID: "rereg", Cores: 1, WorkDir: t.TempDir(), CacheMaxBytes: 1 << 20,
		PollWait: 10 * time.Millisecond,
	})

	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting until %s", what)
			}
			time.Sleep(time.Millisecond)
		}
	}
	waitFor("the worker registers", func() bool { r, _, _ := sched.snapshot(); return r == 1 })

	const restarts = 20
	for i := 1; i <= restarts; i++ {
		sched.mu.Lock()
		sched.restarted = true
		sched.mu.Unlock()
		waitFor("the worker registers again", func() bool { r, _, _ := sched.snapshot(); return r == 1+i })
		// Let both loops make further calls, so that a loop that heard the
		// same restart late would have registered a second time by now.
		_, hb, _ := sched.snapshot()
		waitFor("two more heartbeats", func() bool { _, h, _ := sched.snapshot(); return h >= hb+2 })
		time.Sleep(20 * time.Millisecond)
		if r, _, _ := sched.snapshot(); r != 1+i {
			t.Fatalf("restart %d: %d registrations, want %d (one per restart, however many loops heard it)", i, r, 1+i)
		}
	}
	r, _, sent := sched.snapshot()
	t.Logf("%d restarts: %d registrations for %d Reregister answers", restarts, r, sent)

	// A new leader may hand out another heartbeat interval; the heartbeat
	// loop takes it on at re-registration.
	sched.mu.Lock()
	sched.intervalMs = 60_000
	sched.restarted = true
	sched.mu.Unlock()
	waitFor("the worker registers with the slow leader", func() bool { r, _, _ := sched.snapshot(); return r == 2+restarts })
	time.Sleep(50 * time.Millisecond)
	_, before, _ := sched.snapshot()
	time.Sleep(300 * time.Millisecond)
	if _, after, _ := sched.snapshot(); after-before > 1 {
		t.Errorf("%d heartbeats in 300ms after the scheduler asked for one a minute", after-before)
	}
}
