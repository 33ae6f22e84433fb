package scheduler

import (
	"context"
	"sync"
	"time"
)

// The scheduler's own share of a dispatch. A worker measures the time
// from a slot freeing to its next lease, which adds its own wake-ups and
// the network; handoffs measures only the server's part: from the
// worker's poll reaching PollMany with work queued (or, for a poll that
// waited, from its lease being made) to the leases being handed back to
// the transport. It also measures how long PollMany held the scheduler's
// lock to answer, per lease, and how long the leases waited to be stored
// (no longer any time: a lease is stored after its worker is told). One
// observation per lease.

// HandoffBuckets are the upper bounds, in seconds, of the hand-off
// histograms: sub-millisecond first.
var HandoffBuckets = handoffBounds[:]

var handoffBounds = [...]float64{0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1}

// handoffs holds the histograms under a lock of their own: a hand-off
// ends after the scheduler's lock is let go (storing the leases).
type handoffs struct {
	mu                 sync.Mutex
	total, lock, store boundedHistogram
}

type boundedHistogram struct {
	counts [len(handoffBounds) + 1]uint64 // the last is +Inf
	count  uint64
	sum    float64
}

func (h *boundedHistogram) observe(v float64, n int) {
	i := 0
	for i < len(handoffBounds) && v > handoffBounds[i] {
		i++
	}
	h.counts[i] += uint64(n)
	h.count += uint64(n)
	h.sum += v * float64(n)
}

func (h *boundedHistogram) snapshot() HistogramSnapshot {
	out := HistogramSnapshot{Buckets: HandoffBuckets, Cumulative: make([]uint64, len(handoffBounds)), Count: h.count, Sum: h.sum}
	var c uint64
	for i := range handoffBounds {
		c += h.counts[i]
		out.Cumulative[i] = c
	}
	return out
}

// observe counts n leases handed off d after their poll arrived (or
// their lease was made), answered with the lock held for held, stored
// after waiting stored.
func (h *handoffs) observe(d, held, stored time.Duration, n int) {
	if n == 0 {
		return
	}
	h.mu.Lock()
	h.total.observe(d.Seconds(), n)
	h.lock.observe(held.Seconds()/float64(n), n)
	h.store.observe(stored.Seconds(), n)
	h.mu.Unlock()
}

func (h *handoffs) snapshot() (total, lock, store HistogramSnapshot) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.total.snapshot(), h.lock.snapshot(), h.store.snapshot()
}

// handOff counts the leases as handed off since from, held being how
// long PollMany held the lock for them, once the leases of tasks that let
// go of their action have it back from the store (actionstore.go).
// Leases are not stored first (reconcile.go): the store histogram
// observes no wait, and stays for dashboards that read it.
func (s *Scheduler) handOff(ctx context.Context, as []*Assignment, from time.Time, held time.Duration) ([]*Assignment, error) {
	// Not the poll's own context: the leases are made.
	as, err := s.withActions(context.WithoutCancel(ctx), as)
	if err != nil {
		return nil, err
	}
	s.handoffs.observe(time.Since(from), held, 0, len(as))
	return as, nil
}
