package scheduler

import (
	"fmt"
	"sort"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/grpc/codes"
)

// A worker's leases die with its process. The scheduler learns of that in
// three ways, fastest first:
//
//   - the worker registers again and says which leases it holds
//     (RegisterWorkerHolding): a process that just started holds none, so
//     the leases of its predecessor, also those restored from the store
//     after a restart of the scheduler, are requeued at once;
//   - its session stream ends (the process died, or its connection broke)
//     and it opens no new one within Config.SessionGrace;
//   - no heartbeat reports a lease for Config.HeartbeatTimeout: the only
//     way for a silent network partition (the stream stays open but
//     carries nothing), and for older workers that open no session.
//
// Each way loses the leases alike (loseLeasesLocked): their tasks go back
// to the front of the queue, or fail after MaxAttempts.

// RegisterWorkerHolding is RegisterWorker for a worker that says which
// leases it holds (held; none for a process that just started). The
// worker's other leases, of an earlier process with the same id, are lost
// and requeued at once. It returns how many were.
func (s *Scheduler) RegisterWorkerHolding(info WorkerInfo, held []string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := s.registerLocked(info)
	now := s.clock.Now()
	keep := make(map[string]bool, len(held))
	for _, id := range held {
		keep[id] = true
	}
	// A registering worker opens its session next: the grace of a
	// session that ended before counts from now.
	if !w.detachedAt.IsZero() {
		w.detachedAt = now
	}
	// Resources of cancelled leases are held until the worker stops
	// running them; it says it runs none of those it does not list.
	freed := false
	for id := range w.cancelled {
		if !keep[id] {
			s.releaseCancelledLocked(w, id)
			freed = true
		}
	}
	var lost []*lease
	for id, l := range w.leases {
		if keep[id] {
			l.lastSeen = now
			continue
		}
		lost = append(lost, l)
	}
	if len(lost) > 0 {
		s.loseLeasesLocked(w, lost, "the worker registered again without them (its process restarted)")
		s.ticketLocked() // start storing the requeues
	}
	// Leases handed out before a restart and never stored: adopted if
	// their task is held back for them (reconcile.go).
	for _, id := range held {
		if w.leases[id] == nil {
			s.adoptLocked(w, id)
		}
	}
	if freed {
		s.offerLocked(w)
	}
	return len(lost)
}

// startRestoredLeaseClocks starts the reconciliation window from now
// (reconcile.go), and gives every lease restored from the store
// whose worker has not come back a full HeartbeatTimeout from now: its
// worker can report it only once the scheduler serves, and a restore
// that took longer than the timeout (seconds with a deep queue, more on a
// busy machine) would otherwise requeue them all at the first tick, to
// run a second time next to the first (issue 38: 104 actions leased twice
// after a 19.5 s takeover). Run calls it before its first tick.
func (s *Scheduler) startRestoredLeaseClocks() {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	s.restartReconcileClockLocked(now)
	for _, w := range s.workers {
		if !w.restored {
			continue
		}
		for _, l := range w.leases {
			l.lastSeen = now
		}
	}
}

// loseLeasesLocked ends leases of w, whose worker lost them (why says how
// that was learned): their tasks go back to the front of the queue, or
// fail once they were started MaxAttempts times. It logs one line with
// the operations concerned.
func (s *Scheduler) loseLeasesLocked(w *worker, ls []*lease, why string) {
	sort.Slice(ls, func(i, j int) bool { return ls[i].id < ls[j].id })
	var ops []string
	requeued, gaveUp := 0, 0
	for _, l := range ls {
		t := l.task
		ops = append(ops, openOperations(t)...)
		s.dropLeaseLocked(l)
		s.emit(Event{Kind: EventWorkerLost, Task: t.ID, Worker: w.info.ID, Reason: why})
		s.noteRetryLocked(t, w.info.ID, RetryWorkerLost, why)
		s.counters.workersLost++
		if t.attempts >= s.cfg.MaxAttempts {
			msg := fmt.Sprintf("the action was started %d times and each time its worker stopped responding (last: %s); giving up. Check the workers' health, or retry the build", t.attempts, w.info.ID)
			s.completeTaskLocked(t, &repb.ExecuteResponse{Status: resultStatus(codes.Unavailable, msg)})
			s.emit(Event{Kind: EventGaveUp, Task: t.ID})
			s.counters.gaveUp++
			gaveUp++
			continue
		}
		s.counters.retries++
		s.requeueFrontLocked(t)
		s.emit(Event{Kind: EventRequeued, Task: t.ID})
		requeued++
	}
	s.cfg.Logger.Warn("leases lost with their worker", "worker", w.info.ID, "why", why, "leases", len(ls),
		"requeued", requeued, "gave_up", gaveUp, "operations", ops)
}

// openOperations are the names of t's unfinished operations.
func openOperations(t *Task) []string {
	var out []string
	for _, op := range t.ops {
		if !op.done {
			out = append(out, op.Name)
		}
	}
	return out
}

// Session is a worker's open session stream (the worker protocol's
// Session call): while one is open, the scheduler takes the worker to be
// alive; Close it when the stream ends.
type Session struct {
	s      *Scheduler
	w      *worker
	closed bool
}

// ErrHalted is returned by OpenSession once Run has returned.
var ErrHalted error = &Error{Kind: ErrUnavailable, Msg: "the scheduler is stopping; open the session again (with the next scheduler)"}

// OpenSession records an open session of a registered worker. It fails
// with ErrUnknownWorker for a worker that must register (again) first,
// and with ErrHalted once the scheduler stopped.
func (s *Scheduler) OpenSession(workerID string) (*Session, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-s.halted:
		return nil, ErrHalted
	default:
	}
	w, ok := s.workers[workerID]
	if !ok || w.restored {
		return nil, ErrUnknownWorker
	}
	w.sessions++
	w.detachedAt = time.Time{}
	return &Session{s: s, w: w}, nil
}

// Done is closed when the scheduler stops (Run returned): the session
// should end then, and the worker open one with the next scheduler.
func (x *Session) Done() <-chan struct{} { return x.s.halted }

// Close records the end of the session. When it was the worker's last,
// the worker's leases are lost unless it opens a new session within
// Config.SessionGrace (Tick).
func (x *Session) Close() {
	s := x.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if x.closed {
		return
	}
	x.closed = true
	x.w.sessions--
	if x.w.sessions == 0 {
		x.w.detachedAt = s.clock.Now()
	}
}

// halt ends the sessions (Run's end).
func (s *Scheduler) halt() {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-s.halted:
	default:
		close(s.halted)
	}
}

// loseDetachedLocked loses the leases of workers whose last session ended
// more than SessionGrace ago.
func (s *Scheduler) loseDetachedLocked(now time.Time) {
	for _, w := range s.workers {
		if w.sessions > 0 || w.detachedAt.IsZero() || now.Sub(w.detachedAt) <= s.cfg.SessionGrace {
			continue
		}
		w.detachedAt = time.Time{}
		if len(w.leases) == 0 {
			continue
		}
		ls := make([]*lease, 0, len(w.leases))
		for _, l := range w.leases {
			ls = append(ls, l)
		}
		s.loseLeasesLocked(w, ls, fmt.Sprintf("its session ended (its process died or its connection broke) and it opened no new one within %s", s.cfg.SessionGrace))
	}
}

// WorkerLeases are the unfinished operations one worker holds leases for.
type WorkerLeases struct {
	Worker string
	// Restored: the worker has not registered since the scheduler's state
	// was restored.
	Restored bool
	// Leases counts the leases; Operations are their unfinished operations.
	Leases     int
	Operations []string
}

// Running lists, by worker, the leases held now (for logs at start and
// stop), sorted by worker.
func (s *Scheduler) Running() []WorkerLeases {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []WorkerLeases
	for id, w := range s.workers {
		if len(w.leases) == 0 {
			continue
		}
		wl := WorkerLeases{Worker: id, Restored: w.restored, Leases: len(w.leases)}
		for _, l := range w.leases {
			wl.Operations = append(wl.Operations, openOperations(l.task)...)
		}
		sort.Strings(wl.Operations)
		out = append(out, wl)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Worker < out[j].Worker })
	return out
}
