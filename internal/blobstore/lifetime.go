package blobstore

import (
	"fmt"
	"time"

	"github.com/gantry-build/gantry/internal/digest"
)

// Lifetime is the promise a bounded store keeps to clients that hold
// only digests (Bazel's --remote_download_minimal): a blob FindMissing
// reported present is not evicted for Min after that call. Eviction
// takes other blobs first; when only promised blobs are left, the store
// refuses new blobs with a *LifetimeError rather than break the promise.
type Lifetime struct {
	// Min is how long a blob stays after FindMissing saw it; 0 promises
	// nothing (plain LRU).
	Min time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

func (l Lifetime) now() time.Time {
	if l.Now != nil {
		return l.Now()
	}
	return time.Now()
}

// LifetimeError is the refusal of a blob that fits only by evicting
// blobs still under the lifetime promise.
type LifetimeError struct {
	Digest digest.Digest
	Min    time.Duration
}

func (e *LifetimeError) Error() string {
	return fmt.Sprintf("storing blob %s: the CAS is full of blobs that clients were told exist within the last %s (storage.cas.min_lifetime), which it keeps rather than fail their builds; retry later, or raise storage.cas.max_size (or lower storage.cas.min_lifetime, but not below the clients' --experimental_remote_cache_ttl)", e.Digest, e.Min)
}

// tickClock dates a store's use clock, coarsely, so that an index entry
// needs no timestamp of its own. Each mark (at, clock) says that every
// tick up to clock happened at or before at; the store marks after each
// operation that ticks, and a mark less than a grain old is moved
// forward rather than a new one added, so a tick is dated at most a grain
// late and one lifetime needs about tickMarks marks. Dating late errs on
// the side of keeping.
type tickClock struct {
	grain time.Duration
	marks []tickMark // oldest first
	open  time.Time  // when the last mark was added
}

type tickMark struct {
	at    time.Time
	clock uint64
}

// tickMarks is about the number of marks kept over one lifetime.
const tickMarks = 64

func newTickClock(l Lifetime) tickClock {
	return tickClock{grain: max(l.Min/tickMarks, time.Millisecond)}
}

// mark records that every tick up to clock happened at or before now.
func (c *tickClock) mark(now time.Time, clock uint64) {
	if n := len(c.marks); n > 0 && now.Sub(c.open) < c.grain {
		c.marks[n-1] = tickMark{now, clock}
		return
	}
	c.open = now
	c.marks = append(c.marks, tickMark{now, clock})
}

// cutoff returns the latest clock value known to be at least min old at
// now: a use stamped after it may be younger than min, one stamped at or
// before it is not. Marks older than the one answered are dropped.
func (c *tickClock) cutoff(now time.Time, min time.Duration) uint64 {
	limit := now.Add(-min)
	i := 0 // marks[:i] are at or before limit
	for i < len(c.marks) && !c.marks[i].at.After(limit) {
		i++
	}
	if i == 0 {
		return 0
	}
	cut := c.marks[i-1].clock
	c.marks = append(c.marks[:0], c.marks[i-1:]...)
	return cut
}
