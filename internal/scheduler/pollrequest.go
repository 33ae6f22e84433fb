package scheduler

// PollRequest is a worker's ask for work (PollMany).
type PollRequest struct {
	WorkerID string
	// Free is what the worker has free now.
	Free Capacity
	// Limit is the most tasks to lease (below 1: 1).
	Limit int
	// Unstored hands the new leases over without waiting for them to be
	// stored, and without starting a commit of their own: they are
	// stored with the next commit (at the latest the one of their
	// result). Only a worker that runs in the scheduler's own process
	// (the embedded worker of `gantry serve`, over the in-process
	// transport) may ask for it. A worker elsewhere must never run a
	// lease a restarted scheduler would forget, since it would go on
	// running it beside the task's next attempt; this worker's actions
	// end with the process, so a restart that forgets a lease requeues a
	// task nobody runs any more, exactly what a stored lease of a worker
	// that reports none leads to. Results are stored before anyone is
	// told of them, as always.
	Unstored bool
}

// leaseTicketLocked is what the worker of req waits for before it is
// told of its new leases: every change so far, or nothing when req asks
// for unstored leases. s.mu must be held.
func (s *Scheduler) leaseTicketLocked(req PollRequest) uint64 {
	if req.Unstored {
		return 0
	}
	return s.ticketLocked()
}
