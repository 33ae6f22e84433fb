package execution

import (
	"sync"

	"github.com/gantry-build/gantry/internal/scheduler"
)

// recentMax bounds how many operations recentlyDone keeps: those Execute
// finished without the scheduler (a cache hit, a cancel before the
// submit) are otherwise unknown the moment their Execute ends.
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
