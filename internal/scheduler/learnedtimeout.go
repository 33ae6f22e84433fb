package scheduler

import (
	"fmt"
	"math"
	"strings"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/grpc/codes"
)

// LearnedTimeouts stop a hung action long before the client's timeout
// when its shape has history: the action gets min(client timeout,
// max(Floor, Multiple x expected)). A learned timeout that fires is not
// the end: the action runs once more with the client's own timeout, and
// only that run's result is final. The operation's message says which
// timeout applied.
type LearnedTimeouts struct {
	// Multiple of the expected wall time; 0 turns learned timeouts off.
	Multiple float64
	// Floor is the shortest learned timeout.
	Floor time.Duration
	// MinSamples is the number of runs a shape needs first: its decayed
	// sample count, rounded (runs an hour apart still count as whole).
	MinSamples float64
}

// learnedTimeout is the timeout ts's history gives an action whose
// client asked for client (0: none), or 0 when none applies.
func (lt LearnedTimeouts) learnedTimeout(ts *taskShape, client time.Duration) time.Duration {
	if lt.Multiple <= 0 || ts == nil || !ts.known || math.Round(ts.weight) < lt.MinSamples {
		return 0
	}
	d := max(lt.Floor, time.Duration(lt.Multiple*float64(ts.expected)))
	if client > 0 && d >= client {
		return 0
	}
	return d
}

// leaseTimeoutLocked is the learned timeout t's next run gets (0: the
// action's own), remembering it for the lease's result.
func (s *Scheduler) leaseTimeoutLocked(t *Task) time.Duration {
	ts := s.shapeOf[t]
	if ts == nil || ts.fired != 0 {
		return 0
	}
	ts.applied = s.cfg.LearnedTimeouts.learnedTimeout(ts, ts.client)
	return ts.applied
}

// RetryLearnedTimeout is the retry of an action whose learned timeout
// fired: it runs again with the client's timeout.
const RetryLearnedTimeout RetryKind = "learned timeout"

// learnedTimeoutFiredLocked returns the learned timeout that resp says
// fired on t's run (0: none did); then t goes back to the front of its
// queue for its one run with the client's timeout instead of finishing.
func (s *Scheduler) learnedTimeoutFiredLocked(t *Task, resp *repb.ExecuteResponse) time.Duration {
	ts := s.shapeOf[t]
	if ts == nil || ts.applied == 0 || resp.GetStatus().GetCode() != int32(codes.DeadlineExceeded) {
		return 0
	}
	ts.fired, ts.applied = ts.applied, 0
	return ts.fired
}

// noteTimeoutLocked says in resp's message which timeout applied to
// t's final run when a learned one was involved.
func (s *Scheduler) noteTimeoutLocked(t *Task, resp *repb.ExecuteResponse) {
	ts := s.shapeOf[t]
	if ts == nil || resp == nil {
		return
	}
	var note string
	switch {
	case ts.fired != 0:
		note = fmt.Sprintf("the learned timeout of %v (from its expected %v) fired; the action ran again with the client's timeout", ts.fired, ts.expected.Round(time.Millisecond))
	case ts.applied != 0:
		note = fmt.Sprintf("learned timeout %v applied (expected %v); the client's timeout was longer", ts.applied, ts.expected.Round(time.Millisecond))
	default:
		return
	}
	resp.Message = strings.TrimSpace(resp.Message + " (" + note + ")")
}
