package worker

import (
	"context"
	"sort"
	"sync"

	"golang.org/x/sync/semaphore"

	workerpb "github.com/gantry-build/gantry/api/worker/v1"
)

// A result the scheduler accepted and has not yet said it stored stays
// with the worker (issue 43): the action's slots are already free, and
// the scheduler may die before its commit. Such a lease is reported in
// Register, not in heartbeats (the scheduler has finished it and would
// answer CANCEL), and its result is sent again after every Register: a
// restarted scheduler holds the restored task for its reconcile window
// and adopts the lease. unstored keeps them, bounded: past the bound a
// finishing action keeps its slots until there is room, so new work
// waits for the commits, as it did before.
type unstored struct {
	// room bounds the results kept; a result reserves its place before
	// it is sent.
	room *semaphore.Weighted
	// wake tells the confirmer that there is something to ask about.
	wake chan struct{}

	mu      sync.Mutex
	results map[string]*keptResult
	// early are leases listed as stored before their result was kept
	// (a reply listing its own results, or a concurrent call's).
	early map[string]struct{}
	// gen counts registrations: a result accepted by a call sent before
	// the last one may have been forgotten by it, and goes again.
	gen uint64
}

// keptResult is one result accepted and not yet stored.
type keptResult struct {
	req *workerpb.CompleteRequest
	// reserved: it holds a place in room (not when the worker was
	// stopping as it finished).
	reserved bool
}

func newUnstored(bound int) *unstored {
	return &unstored{room: semaphore.NewWeighted(int64(max(bound, 1))), wake: make(chan struct{}, 1), results: map[string]*keptResult{}, early: map[string]struct{}{}}
}

// reserve waits for room for one more result; false when ctx ended first
// (the result then goes without a place).
func (u *unstored) reserve(ctx context.Context) bool {
	return u.room.Acquire(ctx, 1) == nil
}

// unreserve gives back a place reserved for a result that is not kept.
func (u *unstored) unreserve(reserved bool) {
	if reserved {
		u.room.Release(1)
	}
}

// generation is the count of registrations so far.
func (u *unstored) generation() uint64 {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.gen
}

// keep notes req as accepted and not stored, sent at generation gen, and
// reports whether a registration came since (it must go again).
func (u *unstored) keep(req *workerpb.CompleteRequest, reserved bool, gen uint64) (again bool) {
	u.mu.Lock()
	_, stored := u.early[req.LeaseId]
	delete(u.early, req.LeaseId)
	if stored || u.results[req.LeaseId] != nil {
		// Stored already, or accepted again after a Register (it keeps
		// its place).
		u.mu.Unlock()
		u.unreserve(reserved)
		return false
	}
	u.results[req.LeaseId] = &keptResult{req: req, reserved: reserved}
	again = gen != u.gen
	u.mu.Unlock()
	select {
	case u.wake <- struct{}{}:
	default:
	}
	return again
}

// maxEarly bounds the leases listed as stored before they were kept; a
// result is kept right after its call returns, so there are few.
const maxEarly = 4096

// stored forgets the results of leases the scheduler listed as stored
// and frees their places; it returns how many it held. A lease not held
// (yet) is remembered, for keep.
func (u *unstored) stored(leases []string) int {
	return u.forget(leases, true)
}

// forget drops the results of leases (refused when sent again, or
// stored) and frees their places; it returns how many it held. With
// early, the leases it does not hold are remembered as stored.
func (u *unstored) forget(leases []string, early bool) int {
	n := 0
	for _, id := range leases {
		u.mu.Lock()
		r := u.results[id]
		delete(u.results, id)
		if r == nil && early {
			if len(u.early) >= maxEarly {
				clear(u.early)
			}
			u.early[id] = struct{}{}
		}
		u.mu.Unlock()
		if r != nil {
			n++
			u.unreserve(r.reserved)
		}
	}
	return n
}

// registered notes a registration and returns the results to send again.
func (u *unstored) registered() []*workerpb.CompleteRequest {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.gen++
	rs := make([]*workerpb.CompleteRequest, 0, len(u.results))
	for _, r := range u.results {
		rs = append(rs, r.req)
	}
	return rs
}

// count is how many results are kept.
func (u *unstored) count() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.results)
}

// leases are the kept results' lease ids, sorted.
func (u *unstored) leases() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	ids := make([]string, 0, len(u.results))
	for id := range u.results {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}
