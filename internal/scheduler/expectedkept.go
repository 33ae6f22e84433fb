package scheduler

import (
	"math"
	"time"
)

// A finished operation's page shows the duration its action was expected
// to take next to what it took. The shape (Scheduler.shapeOf) is let go
// when the task finishes, so the expected time stays in the task's rank:
// the longest-first order no longer reads it then, and a Task has no room
// for another field within its size class (TestTaskFitsItsSizeClass).

// keepExpectedLocked puts t's expected wall time, in milliseconds, in its
// rank as t finishes (0: none known), before its shape is let go.
func (s *Scheduler) keepExpectedLocked(t *Task) {
	t.rank = 0
	if ts := s.shapeOf[t]; ts != nil && ts.known {
		t.rank = expectedMillis(ts.expected)
	}
}

// expectedOfLocked is t's expected wall time while it is queued or
// running (its shape) or once finished (its rank); 0 when none is known.
func (s *Scheduler) expectedOfLocked(t *Task) time.Duration {
	if t.state == stateDone {
		return time.Duration(t.rank) * time.Millisecond
	}
	if ts := s.shapeOf[t]; ts != nil && ts.known {
		return ts.expected
	}
	return 0
}

// expectedMillis is d in whole milliseconds, at least 1, within a uint32.
func expectedMillis(d time.Duration) uint32 {
	return uint32(min(max(d.Milliseconds(), 1), math.MaxUint32-1))
}
