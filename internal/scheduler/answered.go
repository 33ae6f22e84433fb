package scheduler

import (
	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"

	"github.com/gantry-build/gantry/internal/digest"
)

// AnsweredOperation is an operation its caller ended without the
// scheduler running it: an Execute answered from the ActionCache, or one
// that failed before it submitted.
type AnsweredOperation struct {
	Name         string
	Instance     string
	ActionDigest digest.Digest
	// Invocation is the caller's invocation path (nil: none).
	Invocation []string
	Response   *repb.ExecuteResponse
}

// Answered keeps a, done, with the finished operations: stored with
// them, restored with them by the next leader, and let go after the same
// retention, so that its name answers wherever theirs do. It does not
// wait for the store (the caller has answered already), and it is not
// told to OnFinished's listeners (the caller reports it). A name already
// known is left as it is.
func (s *Scheduler) Answered(a AnsweredOperation) {
	s.lockFor(a.Name)
	defer s.mu.Unlock()
	if _, taken := s.ops[a.Name]; taken {
		return
	}
	now := s.clock.Now()
	t := &Task{ID: s.newID(), Instance: a.Instance, ActionDigest: a.ActionDigest, heapIndex: -1, state: stateDone,
		stage: repb.ExecutionStage_COMPLETED, response: a.Response, queuedAt: now,
		invPath: a.Invocation, stored: true}
	op := &Operation{Name: a.Name, task: t, accepted: now, invocation: a.Invocation, done: true, response: a.Response, doneAt: now}
	t.ops = []*Operation{op}
	s.ops[op.Name] = op
	s.finished = append(s.finished, op)
	s.touchOp(op)
	s.jr.kickFlush() // flushes coalesce: a burst of hits is one commit
}
