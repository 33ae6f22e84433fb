package scheduler

import "context"

// A worker that polls with store_completions_later is not held until its
// results are stored: its slots free as its actions finish, and it takes
// its next action while the last one's result is committed. It keeps
// each result until a later reply says it is stored, and sends it again
// after it registers anew (a restart or a fail-over lost the commit): the
// restored task is held for the reconcile window (reconcile.go), the
// reported lease adopted, its result taken. The client still hears of a
// result only once it is stored (Operation.done waits for the commit).

// CompleteLater is Complete for a worker that hears later whether its
// results are stored: instead of a wait it returns the ticket to ask
// Stored about. The caller starts the commit with StartStoring (after
// leasing, so that new leases ride the same commit).
func (s *Scheduler) CompleteLater(ctx context.Context, workerID string, cs []Completion) (accepted []bool, ticket uint64) {
	s.cacheResults(ctx, workerID, cs)
	accepted = make([]bool, len(cs))
	s.mu.Lock()
	for i, c := range cs {
		accepted[i] = s.completeLocked(workerID, c.LeaseID, c.Response)
	}
	ticket = s.jr.seqLocked()
	s.mu.Unlock()
	return accepted, ticket
}

// StartStoring starts a commit of the changes so far, without waiting.
func (s *Scheduler) StartStoring() { s.jr.kickFlush() }

// Stored reports whether the changes up to ticket are stored. After a
// failed commit nothing later is: the caller's results are then never
// said to be stored, and the worker sends them to the next scheduler.
func (s *Scheduler) Stored(ticket uint64) bool {
	j := s.jr
	if j == nil || ticket == 0 {
		return true
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.stored >= ticket
}

// WaitStored waits until the changes up to ticket are stored, the store
// failed (Stored then stays false), or ctx ends. It starts no commit:
// the call that took the ticket did (StartStoring), and another would
// only split the next group.
func (s *Scheduler) WaitStored(ctx context.Context, ticket uint64) {
	j := s.jr
	if j == nil || ticket == 0 {
		return
	}
	// The journal's cond wakes on its flushes only: wake it when ctx ends.
	stop := context.AfterFunc(ctx, func() { j.mu.Lock(); j.cond.Broadcast(); j.mu.Unlock() })
	defer stop()
	_ = s.durable(ctx, ticket)
}
