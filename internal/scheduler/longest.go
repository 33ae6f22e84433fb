package scheduler

import (
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"

	workerpb "github.com/gantry-build/gantry/api/worker/v1"
)

// LongestFirstMode says whose invocations run their longest expected
// actions first (scheduler.fairness.longest_first). It orders the tasks
// queued at one invocation only: which invocation a worker serves next is
// the fairness order's choice, as before.
type LongestFirstMode string

const (
	// LongestFirstOff keeps first come, first served within an
	// invocation.
	LongestFirstOff LongestFirstMode = "off"
	// LongestFirstGantry orders the invocations of Gantry's own clients
	// (RequestMetadata tool_name "gantry": gantry batch, run and cc; only
	// batch submits many actions per invocation).
	LongestFirstGantry LongestFirstMode = "gantry"
	// LongestFirstAll orders every invocation.
	LongestFirstAll LongestFirstMode = "all"
)

// gantryToolName is the tool_name of Gantry's client commands
// (internal/remote.ToolName; the scheduler does not link client code).
const gantryToolName = "gantry"

// taskShape is what the scheduler knows of a task's shape while it is
// queued or running: kept aside (Scheduler.shapeOf), so Task stays small.
type taskShape struct {
	key      shapeKey
	expected time.Duration
	// known: the shape has history (expected is learned), of weight
	// (decayed samples).
	known  bool
	weight float64
	// client is the action's own timeout (0: none); applied the learned
	// timeout of the run in progress, fired the one that fired
	// (learnedtimeout.go).
	client, applied, fired time.Duration
	// sizeClass is the position plus one of the size class the scheduler
	// placed the task on (0: none; sizeclassplace.go).
	sizeClass int
	// tail is the submitter's SubmitRequest.CriticalPath.
	tail time.Duration
}

// shapeForSubmit derives req's shape and looks up its history, outside
// the scheduler's lock (it decodes the Command), and takes ShapeProperty
// out of req's platform. It returns nil when no history is kept.
func (s *Scheduler) shapeForSubmit(req *SubmitRequest) (*taskShape, bool) {
	props := req.Platform
	if len(props.Values(ShapeProperty)) > 0 {
		req.Platform = props.Without([]string{ShapeProperty})
	}
	if s.cfg.Shapes == nil {
		return nil, false
	}
	md := DecodeMetadata(req.Metadata)
	k := s.shapeKeys.derive(req.Instance, props.Without(s.cfg.IgnoredProperties), req.CommandBytes, req.Action.GetCommandDigest(), md.GetActionMnemonic())
	exp, weight := s.cfg.Shapes.Expected(k.ID, s.clock.Now())
	longest := s.cfg.LongestFirst == LongestFirstAll ||
		s.cfg.LongestFirst == LongestFirstGantry && md.GetToolDetails().GetToolName() == gantryToolName
	return &taskShape{key: k, expected: exp, known: weight > 0, weight: weight, client: req.Action.GetTimeout().AsDuration(), tail: clampTail(req.CriticalPath)}, longest
}

// noteShapeLocked keeps a new task's shape and, when its invocation runs
// longest first, ranks it by its expected time and the work waiting for
// it (criticalRank).
func (s *Scheduler) noteShapeLocked(t *Task, ts *taskShape, longest bool) {
	if ts == nil {
		return
	}
	if s.shapeOf == nil {
		s.shapeOf = map[*Task]*taskShape{}
	}
	s.shapeOf[t] = ts
	if longest {
		t.rank = criticalRank(ts)
	}
}

// learnLocked records what t's completed lease l took in the history.
// Only runs that reached a result count: an error status (lost, timed
// out, cancelled) says nothing of the action's usual time.
func (s *Scheduler) learnLocked(t *Task, l *lease, resp *repb.ExecuteResponse) {
	ts := s.shapeOf[t]
	if ts == nil || s.cfg.Shapes == nil || resp.GetResult() == nil || resp.GetStatus().GetCode() != 0 {
		return
	}
	now := s.clock.Now()
	s.cfg.Shapes.Record(ts.key, s.historyClass(l), sampleOf(resp.Result, now.Sub(l.started)), now)
}

// forgetShapeLocked lets go of a finished task's shape.
func (s *Scheduler) forgetShapeLocked(t *Task) {
	if s.shapeOf != nil {
		delete(s.shapeOf, t)
	}
}

// sampleOf reads a result's wall time (the worker's execution
// timestamps; leased, the lease's length, when it reports none), CPU
// time and peak memory (the worker's ResourceUsage).
func sampleOf(ar *repb.ActionResult, leased time.Duration) Sample {
	s := Sample{Wall: leased, ExitCode: ar.ExitCode}
	md := ar.GetExecutionMetadata()
	if start, end := md.GetExecutionStartTimestamp(), md.GetExecutionCompletedTimestamp(); start.IsValid() && end.IsValid() {
		if d := end.AsTime().Sub(start.AsTime()); d > 0 {
			s.Wall = d
		}
	}
	for _, a := range md.GetAuxiliaryMetadata() {
		u := &workerpb.ResourceUsage{}
		if a.MessageIs(u) && a.UnmarshalTo(u) == nil {
			s.CPU = time.Duration(u.UserCpuMicros+u.SystemCpuMicros) * time.Microsecond
			s.PeakMemory = u.MaxRssBytes
		}
	}
	return s
}

// ExpectedDuration is the expected wall time of operation name's action
// from its shape's history while it is queued or running; false when
// none is known.
func (s *Scheduler) ExpectedDuration(name string) (time.Duration, bool) {
	s.lockFor(name)
	defer s.mu.Unlock()
	op, ok := s.ops[name]
	if !ok {
		return 0, false
	}
	ts := s.shapeOf[op.task]
	if ts == nil || !ts.known {
		return 0, false
	}
	return ts.expected, true
}
