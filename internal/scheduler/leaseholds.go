package scheduler

// LeaseHolds reports whether lease is the current lease of task: whether
// the worker that holds it runs the task's action now. The live output
// hub asks, so that only that worker writes the action's output streams.
func (s *Scheduler) LeaseHolds(task, lease string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.leases[lease]
	return l != nil && l.task != nil && l.task.ID == task && l.task.lease == l
}
