package scheduler

// Every operation that finishes is reported once, whoever waits for it:
// the completion log line and the history must not depend on a caller
// still streaming it (a Ctrl-C'd CI job, a crashed Bazel), nor count it
// twice when two callers watch it. An operation is reported when callers
// see it done (visible.go: once its result is stored), so that nothing
// is reported that a restart would forget.

// FinishedOperation is an operation that finished, as OnFinished tells
// it: its final state and the note its submitter left with it.
type FinishedOperation struct {
	OperationState
	// Note is the submitter's SubmitRequest.Note; nil when it left none,
	// or after a restart (notes are not stored).
	Note any
}

// reporter holds the finished operations not yet told to the listeners
// (under Scheduler.mu).
type reporter struct {
	listeners []func(FinishedOperation)
	queue     []*Operation
	// delivering: a goroutine is telling the listeners; it runs until
	// the queue is empty, so none is left running while nothing finishes.
	delivering bool
}

// OnFinished registers a listener told once of every operation that
// finishes: with a result, a failure, a cancel, or as work nobody waited
// for. Listeners are called one at a time, in the order the operations
// became visible, on a goroutine of the scheduler's and without its lock:
// they may block briefly and call the scheduler. Operations that finished
// before the listener was registered are not told.
func (s *Scheduler) OnFinished(f func(FinishedOperation)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rep.listeners = append(s.rep.listeners, f)
}

// reportLocked queues op, which callers now see done, for the listeners.
func (s *Scheduler) reportLocked(op *Operation) {
	if len(s.rep.listeners) == 0 {
		op.note, op.meta = nil, nil
		return
	}
	s.rep.queue = append(s.rep.queue, op)
	if !s.rep.delivering {
		s.rep.delivering = true
		go s.deliverReports()
	}
}

// reportBatch bounds the operations whose states are taken in one hold
// of the lock (and kept at once) while reporting.
const reportBatch = 128

// deliverReports tells the listeners of the queued operations, a batch
// at a time, until none is left.
func (s *Scheduler) deliverReports() {
	var taken []*Operation // taken from the queue, reported up to next
	next := 0
	batch := make([]FinishedOperation, 0, reportBatch)
	for {
		s.mu.Lock()
		if next == len(taken) {
			// Swap the queue for the emptied slice: reused, not grown.
			clear(taken)
			taken, s.rep.queue, next = s.rep.queue, taken[:0], 0
			if len(taken) == 0 {
				s.rep.delivering = false
				s.mu.Unlock()
				return
			}
		}
		end := min(len(taken), next+reportBatch)
		for _, op := range taken[next:end] {
			batch = append(batch, FinishedOperation{OperationState: s.stateLocked(op), Note: op.note})
			// The note (a command, the caller's metadata) and the stored
			// metadata are not kept for the operation's retention: the
			// report was their last reader (the store keeps the metadata
			// until the operation goes).
			op.note, op.meta = nil, nil
		}
		next = end
		listeners := s.rep.listeners
		s.mu.Unlock()
		for _, fo := range batch {
			for _, f := range listeners {
				f(fo)
			}
		}
		clear(batch)
		batch = batch[:0]
	}
}
