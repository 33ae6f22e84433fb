package scheduler

// EventKind names something that happened in the scheduler.
type EventKind string

// Event kinds.
const (
	EventSubmitted   EventKind = "submitted"
	EventLeased      EventKind = "leased"
	EventCompleted   EventKind = "completed"
	EventRequeued    EventKind = "requeued"
	EventCancelled   EventKind = "cancelled"
	EventWorkerLost  EventKind = "worker_lost"
	EventLateReport  EventKind = "late_report"
	EventGaveUp      EventKind = "gave_up"
	EventWorkerAdded EventKind = "worker_added"
	EventPreempted   EventKind = "preempted"
	EventResumed     EventKind = "resumed"
	EventStoreFailed EventKind = "store_failed"
)

// Event describes a state change, for logs, metrics and tests.
type Event struct {
	Kind      EventKind
	Task      string
	Operation string
	Worker    string
	Reason    string
}

// OnEvent registers a listener. Listeners run under the scheduler's lock:
// they must be quick and must not call back into the scheduler.
func (s *Scheduler) OnEvent(f func(Event)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.listeners = append(s.listeners, f)
}

func (s *Scheduler) emit(e Event) {
	for _, f := range s.listeners {
		f(e)
	}
}
