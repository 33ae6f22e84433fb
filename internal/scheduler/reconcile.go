package scheduler

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gantry-build/gantry/internal/statestore"
)

// A worker is told of its lease before the lease is stored (PollMany):
// the lease rides the next group commit, at the latest the one of its
// result. A scheduler that dies in between restores the task as queued,
// while a worker may be running it. So, after a restore, the restored
// queued tasks are held back, not dispatched, for a reconciliation
// window (Config.ReconcileWindow, counted from when the scheduler runs):
// the workers come back meanwhile (they register again within about a
// second of the scheduler serving) and report the leases they hold; a
// reported lease of a held task is adopted, the task leased to that
// worker under the lease's own id. At the window's end the tasks nobody
// reported go back on the queue, in their order. Tasks restored with
// their lease stored wait for their worker as before (recovery.go).
//
// A lease id names its task (leaseIDFor), which is what lets a scheduler
// that never heard of a lease find the task it is for.

// DefaultReconcileWindow is the default Config.ReconcileWindow: several
// times what a worker takes to register again after the scheduler
// serves (session retries back off to 0.5 s).
const DefaultReconcileWindow = 3 * time.Second

// reconciliation is what a restore holds back until its window ends.
type reconciliation struct {
	until time.Time
	// tasks are the restored unfinished tasks by id, for adoption.
	tasks map[string]*Task
	// held are the restored queued tasks not yet on the queue.
	held map[*Task]struct{}
}

// leaseIDFor is a new lease id of t: t's id, a dot, and an id unique in
// this process (task ids hold no dot).
func (s *Scheduler) leaseIDFor(t *Task) string {
	return t.ID + "." + s.newID()
}

// taskOfLease is the task id a lease id names ("" for an id of another
// form).
func taskOfLease(leaseID string) string {
	i := strings.IndexByte(leaseID, '.')
	if i <= 0 {
		return ""
	}
	return leaseID[:i]
}

// A scheduler marks its store as running (runningMark) before it
// serves; a clean stop stores every lease it handed out in its last
// flush, which also removes the mark (unless a reconciliation was still
// under way), and hands out no lease after that flush. A restore that
// finds the mark follows a kill, a crash or a fail-over: leases may be
// missing, so it reconciles. One that does not find it follows a clean
// stop, or a Gantry that stored every lease before handing it out.
const kindStop = "stop"

var runningMark = statestore.Mutation{Kind: kindStop, Key: "running", Value: []byte("1")}

// markRunning reports whether the last scheduler on store stopped
// without removing its mark, and marks store as running.
func markRunning(ctx context.Context, store statestore.Store) (killed bool, err error) {
	err = store.Load(ctx, kindStop, func(key string, _ []byte) error {
		killed = killed || key == runningMark.Key
		return nil
	})
	if err != nil || killed {
		return killed, err
	}
	if err := store.Apply(ctx, []statestore.Mutation{runningMark}); err != nil {
		return false, fmt.Errorf("marking the state store as in use: %w; check that the state store is writable (disk space, permissions, the database's connection)", err)
	}
	return false, nil
}

// stoppedMark removes runningMark.
var stoppedMark = statestore.Mutation{Kind: kindStop, Key: runningMark.Key, Delete: true}

// holdRestoredLocked takes the restored queued tasks (queued, in queue
// order; byID are all the restored unfinished tasks): after a clean stop
// they go on the queue, after a kill they are held back until the window
// ends.
func (s *Scheduler) holdRestoredLocked(queued []*Task, byID map[string]*Task, killed bool, now time.Time) {
	if !killed {
		for _, t := range queued {
			if t.state == stateQueued {
				s.queue.push(t, now)
			}
		}
		return
	}
	held := map[*Task]struct{}{}
	for _, t := range queued {
		if t.state == stateQueued {
			held[t] = struct{}{}
		}
	}
	if len(held) == 0 {
		return
	}
	s.recon = &reconciliation{until: now.Add(s.cfg.ReconcileWindow), tasks: byID, held: held}
	s.cfg.Logger.Info("restored actions are held back while the workers report the leases they hold (the last scheduler did not stop cleanly)",
		"actions", len(held), "window", s.cfg.ReconcileWindow)
}

// heldLocked reports whether t is held back by a reconciliation.
func (s *Scheduler) heldLocked(t *Task) bool {
	if s.recon == nil {
		return false
	}
	_, ok := s.recon.held[t]
	return ok
}

// restartReconcileClock starts the window from now: workers can report
// their leases only once the scheduler serves (Run).
func (s *Scheduler) restartReconcileClockLocked(now time.Time) {
	if s.recon != nil {
		s.recon.until = now.Add(s.cfg.ReconcileWindow)
	}
}

// endReconcilingLocked puts the held tasks nobody reported back on the
// queue, in their order, once the window has passed.
func (s *Scheduler) endReconcilingLocked(now time.Time) {
	r := s.recon
	if r == nil || now.Before(r.until) {
		return
	}
	s.recon = nil
	ts := make([]*Task, 0, len(r.held))
	for t := range r.held {
		if t.state == stateQueued {
			ts = append(ts, t)
		}
	}
	slices.SortFunc(ts, func(a, b *Task) int { return cmp.Compare(a.seq, b.seq) })
	for _, t := range ts {
		s.enqueueLocked(t)
	}
	if len(ts) > 0 {
		s.cfg.Logger.Info("reconciliation window ended: restored actions no worker reported go back on the queue",
			"window", s.cfg.ReconcileWindow, "requeued", len(ts))
	}
}

// adoptLocked takes over lease leaseID, which w reports and the
// scheduler has no record of: if it names a task held back by a
// reconciliation, that task is leased to w under leaseID (it was leased
// to w before the restart, unstored). It returns the lease, or nil when
// the lease is not adoptable (the caller cancels it).
func (s *Scheduler) adoptLocked(w *worker, leaseID string) *lease {
	if s.recon == nil || w == nil || w.restored {
		return nil
	}
	if _, known := s.leases[leaseID]; known {
		return nil
	}
	t := s.recon.tasks[taskOfLease(leaseID)]
	if t == nil || t.state != stateQueued || !s.heldLocked(t) {
		return nil
	}
	delete(s.recon.held, t)
	s.leaseWithIDLocked(t, w, nil, leaseID)
	s.counters.adopted++
	s.cfg.Logger.Info("adopted a lease the restored state did not hold", "worker", w.info.ID, "lease", leaseID, "operations", openOperations(t))
	return s.leases[leaseID]
}

// heldCount is how many tasks r holds back (0 for nil).
func (r *reconciliation) heldCount() int {
	if r == nil {
		return 0
	}
	return len(r.held)
}
