package execution

import (
	"sync"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gantry-build/gantry/internal/scheduler"
)

// recentMax bounds how many operations recentlyDone keeps: those Execute
// finished without the scheduler (a cache hit, a cancel before the
// submit, a call failed before the submit) are otherwise unknown the moment their Execute ends.
const recentMax = 4096

// recentlyDone keeps the final state of the last operations Execute ended
// on its own, without handing them to the scheduler, so that a
// WaitExecution or GetOperation for one (a client whose Execute stream
// broke after the first message, which names the operation) gets its
// result instead of NOT_FOUND. The oldest is forgotten first.
type recentlyDone struct {
	mu    sync.Mutex
	max   int
	ops   map[string]scheduler.OperationState
	order []string // ring of names, oldest at next
	next  int
}

func newRecentlyDone(max int) *recentlyDone {
	return &recentlyDone{max: max, ops: make(map[string]scheduler.OperationState, max)}
}

// add keeps st, a done operation, under its name.
func (r *recentlyDone) add(st scheduler.OperationState) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.addLocked(st)
}

// keep keeps st, an operation Execute answered from the ActionCache,
// here and with the scheduler's finished operations, which outlive this
// process (a fail-over) and stay for scheduler.retention.
func (s *Service) keep(st scheduler.OperationState) {
	s.recent.add(st)
	s.sched.Answered(scheduler.AnsweredOperation{Name: st.Name, Instance: st.Instance, ActionDigest: st.ActionDigest, Response: st.Response})
}

// keepFailed keeps st, an operation whose Execute call ended with err
// before it reached the scheduler (the ActionCache or the scheduler
// unreachable), as done with that error, so that a client that follows
// the name it was given sees a final state; a name already kept (an
// answer whose sending failed) stays as it is.
func (s *Service) keepFailed(st scheduler.OperationState, err error) {
	se, ok := status.FromError(err)
	if !ok {
		se = status.FromContextError(err)
	}
	st.Done, st.Stage = true, repb.ExecutionStage_COMPLETED
	st.Response = &repb.ExecuteResponse{Status: status.New(se.Code(),
		"the Execute call that named this operation failed before running it: "+se.Message()+"; call Execute again").Proto()}
	if !s.recent.addNew(st) {
		return
	}
	// A refused request (bad input, missing inputs) is kept in this
	// process only: it must leave nothing behind in the scheduler's
	// state. A call that failed for want of a part that was down (the
	// ActionCache, the CAS, the scheduler) is kept with the finished
	// operations too, so that its name answers after a fail-over as well.
	if failedForAnOutage(se.Code()) {
		s.sched.Answered(scheduler.AnsweredOperation{Name: st.Name, Instance: st.Instance, ActionDigest: st.ActionDigest, Response: st.Response})
	}
}

// failedForAnOutage reports whether an Execute that failed with code
// failed because a part it needs was unreachable or overloaded, not
// because of its request.
func failedForAnOutage(code codes.Code) bool {
	switch code {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Internal, codes.Unknown, codes.Aborted, codes.ResourceExhausted, codes.Canceled:
		return true
	}
	return false
}

// addNew keeps st unless its name is kept already, and reports whether
// it did.
func (r *recentlyDone) addNew(st scheduler.OperationState) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.ops[st.Name]; ok {
		return false
	}
	r.addLocked(st)
	return true
}

func (r *recentlyDone) addLocked(st scheduler.OperationState) {
	if _, ok := r.ops[st.Name]; ok {
		r.ops[st.Name] = st
		return
	}
	if len(r.order) < r.max {
		r.order = append(r.order, st.Name)
	} else {
		delete(r.ops, r.order[r.next])
		r.order[r.next] = st.Name
		r.next = (r.next + 1) % r.max
	}
	r.ops[st.Name] = st
}

// get returns the kept state of name.
func (r *recentlyDone) get(name string) (scheduler.OperationState, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	st, ok := r.ops[name]
	return st, ok
}
