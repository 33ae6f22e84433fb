package asset

import (
	"sync"
	"time"
)

// Failure is one failed download from an origin, as the status pages
// show it: never the request's headers, and the URI without a password.
type Failure struct {
	At       time.Time
	Instance string
	Kind     string // "blob" or "directory"
	URI      string
	Err      string
}

// FailureLog keeps the most recent failed downloads in memory, for the
// status pages' failures list. It is safe for concurrent use.
type FailureLog struct {
	mu   sync.Mutex
	ring []Failure
	next int
	full bool
}

// NewFailureLog returns a log of the last size failures (at least one).
func NewFailureLog(size int) *FailureLog {
	return &FailureLog{ring: make([]Failure, max(size, 1))}
}

// Add records f, forgetting the oldest once the log is full.
func (l *FailureLog) Add(f Failure) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ring[l.next] = f
	l.next++
	if l.next == len(l.ring) {
		l.next, l.full = 0, true
	}
}

// Recent returns the failures kept, newest first.
func (l *FailureLog) Recent() []Failure {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := l.next
	if l.full {
		n = len(l.ring)
	}
	out := make([]Failure, 0, n)
	for i := 1; i <= n; i++ {
		out = append(out, l.ring[(l.next-i+len(l.ring))%len(l.ring)])
	}
	return out
}
