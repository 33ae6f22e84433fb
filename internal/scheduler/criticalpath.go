package scheduler

import (
	"time"

	"github.com/gantry-build/gantry/internal/protocol"
)

// Critical path first: when the submitter tells how much work waits for
// an action (SubmitRequest.CriticalPath, which gantry batch computes
// from its job graph and sends in protocol.CriticalPathHeader), the
// longest-first order ranks the action by its own expected time plus
// that: a short compile that a long chain of links and tests waits for
// runs before a long leaf. The value is the client's; it is bounded and
// used for nothing but this order within the client's own invocation,
// so a client that inflates it only reorders its own work.

// unseenRank is the lowest rank of a shape never seen: such actions rank
// above every known one (they may be long, and their first run teaches
// their time), among themselves by the work waiting for them.
const unseenRank = 1 << 31

// clampTail bounds a submitter's critical path estimate.
func clampTail(d time.Duration) time.Duration {
	return min(max(d, 0), protocol.MaxCriticalPath)
}

// criticalRank is the longest-first rank of a task of shape ts: higher
// first. A known shape ranks by its expected time plus the work waiting
// for it, in milliseconds, from 1 to unseenRank-1; one never seen ranks
// from unseenRank up, by the waiting work alone.
func criticalRank(ts *taskShape) uint32 {
	tail := ts.tail.Milliseconds()
	if !ts.known {
		return unseenRank + uint32(min(tail, unseenRank-1))
	}
	ms := ts.expected.Milliseconds() + tail
	return uint32(min(max(ms, 1), unseenRank-1))
}

// joinTailLocked raises the critical path of t, queued or running, when
// a submission of the same action (ts, its shape) says more work waits
// for it: the action's rank follows the longest chain that waits.
func (s *Scheduler) joinTailLocked(t *Task, ts *taskShape) {
	cur := s.shapeOf[t]
	if cur == nil || ts == nil || ts.tail <= cur.tail {
		return
	}
	cur.tail = ts.tail
	if t.rank == 0 {
		return
	}
	t.rank = criticalRank(cur)
	if t.state == stateQueued {
		s.queue.fix(t)
	}
}
