package s3store

import (
	"sync"
	"time"
)

// existence remembers objects this process saw present in the bucket,
// and when each was last written (or refreshed), so that FindMissing
// answers them without a HEAD request. It holds positive answers only:
// a blob missing now may be uploaded by another frontend a moment later.
// An answer is trusted while the object is younger than the refresh age,
// which is below the bucket's expiry, so a remembered object cannot have
// been expired by the bucket in the meantime.
//
// It is bounded by two generations: lookups promote into the current
// one, and when it is full the previous generation is dropped whole. That
// evicts roughly the least recently used half at once, with no list to
// maintain per lookup.
type existence struct {
	mu        sync.Mutex
	half      int
	cur, prev map[string]time.Time
}

func newExistence(entries int) *existence {
	e := &existence{half: entries / 2}
	e.cur, e.prev = map[string]time.Time{}, map[string]time.Time{}
	return e
}

// lookup reports, for each name, whether it is known present with a
// modification time after notBefore; found[i] is set for those.
func (e *existence) lookup(names []string, notBefore time.Time, found []bool) {
	if e.half == 0 {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for i, n := range names {
		t, ok := e.cur[n]
		if !ok {
			if t, ok = e.prev[n]; ok {
				e.putLocked(n, t)
			}
		}
		found[i] = ok && t.After(notBefore)
	}
}

// add remembers name as present, last written at modified.
func (e *existence) add(name string, modified time.Time) {
	if e.half == 0 {
		return
	}
	e.mu.Lock()
	e.putLocked(name, modified)
	e.mu.Unlock()
}

// forget drops name, when a read found it gone.
func (e *existence) forget(name string) {
	e.mu.Lock()
	delete(e.cur, name)
	delete(e.prev, name)
	e.mu.Unlock()
}

func (e *existence) putLocked(name string, modified time.Time) {
	if len(e.cur) >= e.half {
		e.prev, e.cur = e.cur, make(map[string]time.Time, e.half)
	}
	e.cur[name] = modified
}
