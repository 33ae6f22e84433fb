package execution

import "sync"

// announced holds the operations Execute has named to its client but not
// yet handed to the scheduler (while it checks the ActionCache, reads the
// action and submits). A CancelOperation for one of them is remembered
// here, and Execute honours it once it knows where the operation stands,
// so that a name a client was given can always be cancelled.
type announced struct {
	mu    sync.Mutex
	names map[string]bool // name -> cancel requested
}

func newAnnounced() *announced { return &announced{names: map[string]bool{}} }

// add records name as announced.
func (a *announced) add(name string) {
	a.mu.Lock()
	a.names[name] = false
	a.mu.Unlock()
}

// remove forgets name and reports whether a cancel was requested for it.
func (a *announced) remove(name string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	cancelled := a.names[name]
	delete(a.names, name)
	return cancelled
}

// cancelled reports whether a cancel was requested for name.
func (a *announced) cancelled(name string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.names[name]
}

// cancel requests the cancellation of name and reports whether name is
// announced (and so will honour it).
func (a *announced) cancel(name string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.names[name]; !ok {
		return false
	}
	a.names[name] = true
	return true
}
