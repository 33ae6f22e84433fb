package scheduler

import (
	"slices"
	"time"
)

// RetryKind says why the scheduler took an action back from a worker.
type RetryKind string

// Retry kinds.
const (
	// RetryWorkerLost: the worker stopped responding (its lease expired,
	// it disconnected, or it did not come back after a restart of the
	// scheduler); the action was queued again, or failed after
	// MaxAttempts.
	RetryWorkerLost RetryKind = "worker lost"
	// RetryPreempted: cancelled on its worker for an instance below its
	// min quota, and queued again.
	RetryPreempted RetryKind = "pre-empted"
	// RetrySuspended: stopped (SIGSTOP) on its worker for an instance
	// below its min quota; it resumes there later.
	RetrySuspended RetryKind = "suspended"
	// RetrySuspendExpired: suspended longer than MaxSuspend, cancelled
	// and queued again.
	RetrySuspendExpired RetryKind = "suspension expired"
	// RetryTakenBack: leased to a worker that could not start it, taken
	// back to run elsewhere.
	RetryTakenBack RetryKind = "taken back"
)

// Retry is one time an action was taken from the worker running it (or
// stopped there): when, from which worker, and why. The status pages
// and `gantry operation show` list them.
type Retry struct {
	At     time.Time
	Worker string
	Kind   RetryKind
	Reason string
}

// maxRetries bounds the retries a task remembers: the newest are kept.
const maxRetries = 32

// noteRetryLocked remembers that t was taken from (or stopped on) worker.
// The slice is replaced, never changed in place: OperationStates handed
// out share it.
func (s *Scheduler) noteRetryLocked(t *Task, worker string, kind RetryKind, reason string) {
	r := Retry{At: s.clock.Now(), Worker: worker, Kind: kind, Reason: reason}
	rs := slices.Clip(t.retries)
	if len(rs) >= maxRetries {
		rs = rs[len(rs)-maxRetries+1:]
	}
	t.retries = append(rs, r)
	s.touchTask(t) // the retries are stored with the task
}
