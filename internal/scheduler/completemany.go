package scheduler

import repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"

// Completion is one lease's outcome, as reported to CompleteMany.
type Completion struct {
	LeaseID  string
	Response *repb.ExecuteResponse
}

// CompleteMany ends several of a worker's leases, in order, each as
// Complete does, and reports which were still valid. It does not wait
// for storing: the caller must call stored (which waits, bounded, as
// Complete does) before telling the worker. Nor does it start storing,
// so that the new leases of the Poll that called it (PollMany, which
// starts storing whether it leases or waits) go into the same flush and
// commit: a worker's Poll that reports a batch and asks for new work waits
// for one commit, not one for its results and a later one for its leases.
// stored starts storing too, for a caller that does not poll.
func (s *Scheduler) CompleteMany(workerID string, cs []Completion) (accepted []bool, stored func()) {
	accepted = make([]bool, len(cs))
	var ticket uint64
	for i, c := range cs {
		var t uint64
		accepted[i], t = s.complete(workerID, c.LeaseID, c.Response, false)
		ticket = max(ticket, t)
	}
	return accepted, func() {
		s.jr.kickFlush()
		s.waitDurable(ticket)
	}
}
