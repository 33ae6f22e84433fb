package scheduler

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/gantry-build/gantry/internal/platform"
	"github.com/gantry-build/gantry/internal/statestore"
)

func workerInfo(id string) WorkerInfo {
	return WorkerInfo{ID: id, Platform: platform.Worker{AllowUnmatched: true, Cores: 4}, Slots: 4}
}

// leaseAll polls worker until the queue is empty and returns the leases
// by operation name.
func leaseAll(t *testing.T, s *Scheduler, worker string) map[string]*Assignment {
	t.Helper()
	out := map[string]*Assignment{}
	for a := pollNow(t, s, worker, 1); a != nil; a = pollNow(t, s, worker, 1) {
		out[a.Task.ops[0].Name] = a
	}
	return out
}

// A worker that registers again listing the leases it still holds keeps
// them; its other leases are requeued at once, without the clock moving.
func TestRegisterHoldingKeepsListedLeasesAndRequeuesTheRest(t *testing.T) {
	s, _ := newTest(t)
	register(s, "w")
	opA, opB, opC := submit(t, s, "a"), submit(t, s, "b"), submit(t, s, "c")
	leases := leaseAll(t, s, "w")
	if len(leases) != 3 {
		t.Fatalf("%d leases, want 3", len(leases))
	}
	if n := s.RegisterWorkerHolding(workerInfo("w"), []string{leases[opA].LeaseID, "unknown-lease"}); n != 2 {
		t.Errorf("RegisterWorkerHolding lost %d leases, want 2", n)
	}
	register(s, "other")
	again := leaseAll(t, s, "other")
	if len(again) != 2 || again[opB] == nil || again[opC] == nil {
		t.Fatalf("requeued at once: %v, want %s and %s", again, opB, opC)
	}
	if again[opB].Attempt != 2 {
		t.Errorf("attempt %d, want 2", again[opB].Attempt)
	}
	if !s.completeOne("w", leases[opA].LeaseID, okResponse()) {
		t.Error("the lease the worker listed was not kept")
	}
	if s.completeOne("w", leases[opB].LeaseID, okResponse()) {
		t.Error("a result of a lease the worker did not list was accepted")
	}
	if m := s.MetricsSnapshot(); m.WorkersLost != 2 || m.Retries != 2 {
		t.Errorf("workers lost %d, retries %d; want 2 and 2", m.WorkersLost, m.Retries)
	}
}

// After a restart of the scheduler, the leases restored from the store
// are requeued as soon as their worker registers without them (a
// restarted embedded worker), not after the heartbeat timeout; a worker
// that lists its restored lease keeps it.
func TestRestoredLeasesRequeuedWhenTheirWorkerRegistersWithoutThem(t *testing.T) {
	store := statestore.NewMemory()
	clk := &fakeClock{now: time.Unix(1_700_000_000, 0)}
	s, stop := durableTest(t, store, clk)
	register(s, "embedded")
	register(s, "standalone")
	opE, opS := submit(t, s, "e"), submit(t, s, "s")
	le, ls := pollNow(t, s, "embedded", 1), pollNow(t, s, "standalone", 1)
	if le == nil || ls == nil {
		t.Fatal("no leases")
	}
	stop()

	s2, stop2 := durableTest(t, store, clk)
	defer stop2()
	if st := s2.Stats(); st.Leased != 2 {
		t.Fatalf("restored %+v, want 2 leases", st)
	}
	s2.RegisterWorkerHolding(workerInfo("embedded"), nil)
	s2.RegisterWorkerHolding(workerInfo("standalone"), []string{ls.LeaseID})
	a := pollNow(t, s2, "embedded", 1)
	if a == nil || a.Task.ops[0].Name != opE {
		t.Fatalf("the embedded worker's restored lease was not requeued at once: %+v", a)
	}
	if a := pollNow(t, s2, "embedded", 1); a != nil {
		t.Fatalf("the standalone worker's lease of %s was requeued too", opS)
	}
	if !s2.completeOne("standalone", ls.LeaseID, okResponse()) {
		t.Error("the standalone worker's listed lease was not kept")
	}
}

// A restored lease's heartbeat timeout counts from when the scheduler
// runs, not from the restore: after a restore longer than the timeout,
// the first tick keeps it for its worker, and the timeout still ends it
// if the worker does not come back.
func TestRestoredLeaseTimeoutCountsFromRun(t *testing.T) {
	store := statestore.NewMemory()
	clk := &fakeClock{now: time.Unix(1_700_000_000, 0)}
	s, stop := durableTest(t, store, clk) // heartbeat timeout 10 s
	register(s, "w")
	submit(t, s, "a")
	if pollNow(t, s, "w", 1) == nil {
		t.Fatal("no lease")
	}
	stop()

	s2, stop2 := durableTest(t, store, clk)
	defer stop2()
	clk.Advance(15 * time.Second) // the restore, and what follows until Run, took 15 s
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() { s2.Run(ctx, 5*time.Millisecond); close(ran) }()
	defer func() { cancel(); <-ran }()
	time.Sleep(100 * time.Millisecond) // ticks
	if st := s2.Stats(); st.Leased != 1 || st.Queued != 0 {
		t.Fatalf("after a 15 s restore and the first ticks: %+v, want the lease kept for its worker", st)
	}
	clk.Advance(11 * time.Second)
	deadline := time.Now().Add(10 * time.Second)
	for s2.Stats().Queued != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("11 s after Run with no word from its worker: %+v, want the lease requeued", s2.Stats())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A worker whose session ends loses its leases once SessionGrace passes
// without a new session, long before the heartbeat timeout; a new
// session within the grace keeps them.
func TestSessionEndRequeuesAfterGrace(t *testing.T) {
	s, clk := newTest(t) // heartbeat timeout 10 s, session grace 1 s
	register(s, "w")
	op := submit(t, s, "a")
	sess, err := s.OpenSession("w")
	if err != nil {
		t.Fatal(err)
	}
	if pollNow(t, s, "w", 1) == nil {
		t.Fatal("no lease")
	}

	// A session that ends and opens again within the grace.
	sess.Close()
	clk.Advance(500 * time.Millisecond)
	s.Tick()
	again, err := s.OpenSession("w")
	if err != nil {
		t.Fatal(err)
	}
	clk.Advance(2 * time.Second)
	s.Tick()
	if s.Stats().Leased != 1 {
		t.Fatalf("lease lost although the worker opened a new session in time: %+v", s.Stats())
	}

	// The session ends for good.
	again.Close()
	clk.Advance(900 * time.Millisecond)
	s.Tick()
	if s.Stats().Leased != 1 {
		t.Fatal("lease lost before the grace passed")
	}
	clk.Advance(200 * time.Millisecond)
	s.Tick()
	register(s, "other")
	a := pollNow(t, s, "other", 1)
	if a == nil || a.Task.ops[0].Name != op {
		t.Fatalf("the lease was not requeued after the grace: %+v", a)
	}
}

// A worker without a session (an older one) is judged by heartbeats only,
// as before; so is one whose session stays open but which stopped
// heartbeating (a silent partition).
func TestHeartbeatTimeoutWithoutSessionEnd(t *testing.T) {
	for _, withSession := range []bool{false, true} {
		s, clk := newTest(t)
		register(s, "w")
		op := submit(t, s, "a")
		if withSession {
			if _, err := s.OpenSession("w"); err != nil {
				t.Fatal(err)
			}
		}
		if pollNow(t, s, "w", 1) == nil {
			t.Fatal("no lease")
		}
		clk.Advance(9 * time.Second)
		s.Tick()
		if s.Stats().Leased != 1 {
			t.Fatalf("session %v: lease lost before the heartbeat timeout", withSession)
		}
		clk.Advance(2 * time.Second)
		s.Tick()
		register(s, "other")
		if a := pollNow(t, s, "other", 1); a == nil || a.Task.ops[0].Name != op {
			t.Fatalf("session %v: lease not requeued after the heartbeat timeout: %+v", withSession, a)
		}
	}
}

// A restored worker (not registered since the restart) and an unknown
// one must register before a session opens; once Run returned, sessions
// end and no new ones open.
func TestSessionNeedsRegistrationAndEndsWithRun(t *testing.T) {
	s, _ := newTest(t)
	if _, err := s.OpenSession("nobody"); err != ErrUnknownWorker {
		t.Fatalf("OpenSession of an unknown worker: %v", err)
	}
	register(s, "w")
	sess, err := s.OpenSession("w")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx, time.Hour); close(done) }()
	select {
	case <-sess.Done():
		t.Fatal("session ended while the scheduler runs")
	default:
	}
	cancel()
	receive(t, "end of Run", done)
	receive(t, "end of the session", sess.Done())
	if _, err := s.OpenSession("w"); err != ErrHalted {
		t.Fatalf("OpenSession after Run returned: %v, want ErrHalted", err)
	}
}

// Lost leases are logged with their operation names.
func TestLostLeasesAreLogged(t *testing.T) {
	var buf bytes.Buffer
	clk := &fakeClock{now: time.Unix(1_700_000_000, 0)}
	s := New(Config{HeartbeatTimeout: 10 * time.Second, Logger: slog.New(slog.NewTextHandler(&buf, nil))}, clk, nil)
	register(s, "w")
	op := submit(t, s, "a")
	pollNow(t, s, "w", 1)
	s.RegisterWorkerHolding(workerInfo("w"), nil)
	line := buf.String()
	for _, want := range []string{"leases lost with their worker", "worker=w", "leases=1", "requeued=1", op, "registered again without them"} {
		if !strings.Contains(line, want) {
			t.Errorf("log %q lacks %q", line, want)
		}
	}
}
