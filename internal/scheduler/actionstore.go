package scheduler

import (
	"context"
	"fmt"

	"github.com/gantry-build/gantry/internal/statestore"
)

// A queued task's Action and Command bytes, the bulk of what it holds,
// are kept once: by the task until its record is stored, then, with a
// store that reads records back (statestore.Getter: the embedded store,
// which keeps in memory only where each record lies in its files), by
// the store alone. A lease of such a task reads them back as it is handed
// over, outside the scheduler's lock (handOff). With any other store (or
// none) the task keeps them until it finishes.

// readsBack reports whether the scheduler's store gives records back.
func readsBack(store statestore.Store) bool {
	_, ok := store.(statestore.Getter)
	return ok
}

// letGoOfActions drops the action and command bytes of tasks whose
// records a commit has just stored, when the store gives them back.
func (s *Scheduler) letGoOfActions(tasks []*Task) {
	if len(tasks) == 0 || !readsBack(s.jr.store) {
		return
	}
	s.mu.Lock()
	for _, t := range tasks {
		t.ActionBytes, t.CommandBytes, t.actionInStore = nil, nil, true
	}
	s.mu.Unlock()
}

// withActions fills in the action and command of the assignments whose
// task let go of them, from the task records in the store. A task that
// finished meanwhile (its record gone with it) is given back, not handed
// over without its action.
func (s *Scheduler) withActions(ctx context.Context, as []*Assignment) ([]*Assignment, error) {
	var g statestore.Getter
	kept := as[:0]
	for _, a := range as {
		if !a.fromStore {
			kept = append(kept, a)
			continue
		}
		if g == nil {
			g = s.jr.store.(statestore.Getter)
		}
		v, ok, err := g.Get(ctx, kindTask, a.Task.ID)
		if err != nil {
			return nil, errorf(ErrUnavailable, "reading task %s's action back from the scheduler's store: %v; retry", a.Task.ID, err)
		}
		if !ok {
			s.giveBack(a)
			continue
		}
		var rec taskRecord
		if err := rec.unmarshal(v); err != nil {
			return nil, errorf(ErrUnavailable, "%v", fmt.Errorf("task record %s: %w", a.Task.ID, err))
		}
		a.ActionBytes, a.CommandBytes, a.fromStore = rec.Action, rec.Command, false
		kept = append(kept, a)
	}
	return kept, nil
}

// giveBack undoes the lease of a, which its worker will never hear of.
func (s *Scheduler) giveBack(a *Assignment) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l := s.leases[a.LeaseID]; l != nil {
		t, w := l.task, l.worker
		s.dropLeaseLocked(l)
		t.attempts--
		if t.state != stateDone {
			s.requeueFrontLocked(t)
		}
		s.offerLocked(w)
		return
	}
	for _, w := range s.workers {
		if _, held := w.cancelled[a.LeaseID]; held {
			s.releaseCancelledLocked(w, a.LeaseID)
			s.offerLocked(w)
			return
		}
	}
}
