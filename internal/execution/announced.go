package execution

import (
	"context"
	"sync"
)

// announced holds the operations Execute has named to its client but not
// yet handed to the scheduler (while it checks the ActionCache, reads the
// action and submits). A CancelOperation for one of them is remembered
// here, and Execute honours it once it knows where the operation stands,
// so that a name a client was given can always be cancelled; a
// WaitExecution for one waits until the scheduler has it.
type announced struct {
	mu    sync.Mutex
	names map[string]*announcement
}

type announcement struct {
	cancel  bool          // a cancel was requested
	gone    chan struct{} // closed by remove
	waiting int           // WaitExecution calls waiting on it (for tests)
}

func newAnnounced() *announced { return &announced{names: map[string]*announcement{}} }

// add records name as announced.
func (a *announced) add(name string) {
	a.mu.Lock()
	a.names[name] = &announcement{gone: make(chan struct{})}
	a.mu.Unlock()
}

// remove forgets name and reports whether a cancel was requested for it.
func (a *announced) remove(name string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	n, ok := a.names[name]
	if !ok {
		return false
	}
	delete(a.names, name)
	close(n.gone)
	return n.cancel
}

// cancelled reports whether a cancel was requested for name.
func (a *announced) cancelled(name string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	n, ok := a.names[name]
	return ok && n.cancel
}

// cancel requests the cancellation of name and reports whether name is
// announced (and so will honour it).
func (a *announced) cancel(name string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	n, ok := a.names[name]
	if !ok {
		return false
	}
	n.cancel = true
	return true
}

// wait waits until name is no longer announced (submitted, or its Execute
// ended without submitting) or ctx ends. It reports whether name was
// announced when called.
func (a *announced) wait(ctx context.Context, name string) bool {
	a.mu.Lock()
	n, ok := a.names[name]
	if ok {
		n.waiting++
	}
	a.mu.Unlock()
	if !ok {
		return false
	}
	select {
	case <-n.gone:
	case <-ctx.Done():
	}
	return true
}
