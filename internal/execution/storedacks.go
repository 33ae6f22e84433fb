package execution

import "sync"

// storedAcks are the completions of workers that poll with
// store_completions_later, accepted and waiting to be stored: each is
// listed once, in a reply to a later Poll of its worker, after its commit.
type storedAcks struct {
	mu      sync.Mutex
	workers map[string][]pendingAck
}

// pendingAck is one accepted completion: its lease and the scheduler's
// ticket of the change that ended it.
type pendingAck struct {
	lease  string
	ticket uint64
}

// maxPendingAcks bounds the completions a worker may have waiting to be
// listed: past it the oldest are dropped unlisted (the worker, which
// bounds its own far lower, then sends them again after it registers,
// and they are refused as no longer leased).
const maxPendingAcks = 1 << 16

func newStoredAcks() *storedAcks { return &storedAcks{workers: map[string][]pendingAck{}} }

// add notes worker's accepted completions with ticket.
func (a *storedAcks) add(worker string, leases []string, ticket uint64) {
	if len(leases) == 0 {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	p := a.workers[worker]
	for _, l := range leases {
		p = append(p, pendingAck{lease: l, ticket: ticket})
	}
	if over := len(p) - maxPendingAcks; over > 0 {
		p = append(p[:0], p[over:]...)
	}
	a.workers[worker] = p
}

// take removes and returns worker's completions whose ticket stored says
// is stored. Tickets only grow within a worker's list, so it stops at the
// first that is not.
func (a *storedAcks) take(worker string, stored func(uint64) bool) []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	p := a.workers[worker]
	n := 0
	for n < len(p) && stored(p[n].ticket) {
		n++
	}
	if n == 0 {
		return nil
	}
	leases := make([]string, n)
	for i := range n {
		leases[i] = p[i].lease
	}
	if n == len(p) {
		delete(a.workers, worker)
	} else {
		a.workers[worker] = append(p[:0], p[n:]...)
	}
	return leases
}

// last is the ticket of worker's latest completion waiting to be listed
// (false: none waits).
func (a *storedAcks) last(worker string) (uint64, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	p := a.workers[worker]
	if len(p) == 0 {
		return 0, false
	}
	return p[len(p)-1].ticket, true
}

// forget drops worker's list: after it registers anew it sends what it
// still holds again.
func (a *storedAcks) forget(worker string) {
	a.mu.Lock()
	delete(a.workers, worker)
	a.mu.Unlock()
}
