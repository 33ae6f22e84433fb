package scheduler

import repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"

// Completion is one lease's outcome, as reported to CompleteMany.
type Completion struct {
	LeaseID  string
	Response *repb.ExecuteResponse
}

// CompleteMany ends several of a worker's leases, in order, each as
// Complete does, and reports which were still valid. It starts storing
// the changes but does not wait: the caller must call stored (which waits,
// bounded, as Complete does) before telling the worker. So a worker's
// Poll that reports a batch and asks for new work waits for one commit,
// not one per completion and another for the new leases.
func (s *Scheduler) CompleteMany(workerID string, cs []Completion) (accepted []bool, stored func()) {
	accepted = make([]bool, len(cs))
	var ticket uint64
	for i, c := range cs {
		var t uint64
		accepted[i], t = s.complete(workerID, c.LeaseID, c.Response)
		ticket = max(ticket, t)
	}
	return accepted, func() { s.waitDurable(ticket) }
}
