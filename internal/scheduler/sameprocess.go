package scheduler

import "context"

// sameProcessKey marks a call from a worker in the scheduler's process.
type sameProcessKey struct{}

// SameProcess marks ctx as the context of a worker-protocol call from a
// worker that runs in the scheduler's own process (the embedded worker of
// `gantry serve`). Leases such a worker polls for are handed over without
// waiting for them to be stored, and without starting a commit of their
// own: they are stored with the next commit (at the latest the one of
// their result). A worker elsewhere must never run a lease a restarted
// scheduler would forget, since it would go on running it beside the
// task's next attempt; this worker's actions end with the process, so a
// restart that forgets a lease requeues a task nobody runs any more,
// exactly what a stored lease of a worker that reports none leads to.
// Results are stored before anyone is told of them, as always.
func SameProcess(ctx context.Context) context.Context {
	return context.WithValue(ctx, sameProcessKey{}, true)
}

func sameProcess(ctx context.Context) bool {
	v, _ := ctx.Value(sameProcessKey{}).(bool)
	return v
}

// leaseTicketLocked is what a worker polling with ctx waits for before it
// is told of its new leases: every change so far, or nothing for a worker
// in this process (see SameProcess). s.mu must be held.
func (s *Scheduler) leaseTicketLocked(ctx context.Context) uint64 {
	if sameProcess(ctx) {
		return 0
	}
	return s.ticketLocked()
}
