package statestore

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// CommitStats counts a store's group commits since it was opened.
type CommitStats struct {
	Commits   uint64 // group commits (successful)
	Failed    uint64 // group commits that failed
	Batches   uint64 // Apply/Enqueue batches they carried
	Mutations uint64 // records written or deleted
}

// Instrumented is a store that reports its group commits. Both Embedded
// and Postgres are.
type Instrumented interface {
	CommitStats() CommitStats
	// ObserveCommits sets a function told each commit's duration (from
	// taking the batches to the end of the fsync or transaction). Set it
	// before the store is used; it is called on the committer goroutine.
	ObserveCommits(func(time.Duration))
}

// commitQueue is the group commit both backends share: Apply calls queue
// their batches in call order, and one committer goroutine takes every
// batch waiting (up to MaxBatchBytes) into each commit.
type commitQueue struct {
	mu      sync.Mutex // guards pending, closed
	pending []*request
	closed  bool
	wake    chan struct{}
	done    chan struct{} // closed when the committer has stopped

	commits, failed, batches, mutations atomic.Uint64
	observe                             atomic.Pointer[func(time.Duration)]
}

func (q *commitQueue) stats() CommitStats {
	return CommitStats{Commits: q.commits.Load(), Failed: q.failed.Load(), Batches: q.batches.Load(), Mutations: q.mutations.Load()}
}

func newCommitQueue() *commitQueue {
	return &commitQueue{wake: make(chan struct{}, 1), done: make(chan struct{})}
}

// enqueue validates batch and queues it; wait reports its commit. The
// values are copied unless owned (the caller never changes them again).
func (q *commitQueue) enqueue(ctx context.Context, batch []Mutation, owned bool) (wait func(context.Context) error, err error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := validate(batch); err != nil {
		return nil, err
	}
	if len(batch) == 0 {
		return func(context.Context) error { return nil }, nil
	}
	r := &request{batch: make([]Mutation, len(batch)), done: make(chan struct{})}
	for i, m := range batch {
		if m.Delete {
			m.Value = nil
		} else if !owned || m.Value == nil {
			m.Value = append(make([]byte, 0, len(m.Value)), m.Value...)
		}
		r.batch[i] = m
		r.size += mutationSize(m)
	}
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return nil, ErrClosed
	}
	q.pending = append(q.pending, r)
	q.mu.Unlock()
	q.kick()
	return func(ctx context.Context) error { return q.wait(ctx, r) }, nil
}

func (q *commitQueue) kick() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// wait waits for r's commit, or withdraws r if ctx ends first and no
// commit has taken it yet.
func (q *commitQueue) wait(ctx context.Context, r *request) error {
	select {
	case <-r.done:
		return r.err
	case <-ctx.Done():
	}
	q.mu.Lock()
	if !r.taken {
		for i, p := range q.pending {
			if p == r {
				q.pending = append(q.pending[:i], q.pending[i+1:]...)
				break
			}
		}
		q.mu.Unlock()
		return ctx.Err()
	}
	q.mu.Unlock()
	<-r.done
	return r.err
}

// take removes the requests of the next commit, in call order, up to
// maxBytes (at least one).
func (q *commitQueue) take(maxBytes int) []*request {
	q.mu.Lock()
	defer q.mu.Unlock()
	n, size := 0, 0
	for n < len(q.pending) {
		size += q.pending[n].size
		if n > 0 && size > maxBytes {
			break
		}
		q.pending[n].taken = true
		n++
	}
	reqs := append([]*request(nil), q.pending[:n]...)
	rest := copy(q.pending, q.pending[n:])
	clear(q.pending[rest:])
	q.pending = q.pending[:rest]
	return reqs
}

// next waits for the requests of the next commit (see take); it returns
// none once the queue is closed and drained.
func (q *commitQueue) next() []*request {
	for {
		if reqs := q.take(MaxBatchBytes); len(reqs) > 0 {
			return reqs
		}
		q.mu.Lock()
		closed := q.closed && len(q.pending) == 0
		q.mu.Unlock()
		if closed {
			return nil
		}
		<-q.wake
	}
}

// finish counts a commit of reqs that took d and tells their callers err.
func (q *commitQueue) finish(reqs []*request, err error, d time.Duration) {
	if obs := q.observe.Load(); obs != nil {
		(*obs)(d)
	}
	if err != nil {
		q.failed.Add(1)
	} else {
		n := 0
		for _, r := range reqs {
			n += len(r.batch)
		}
		q.commits.Add(1)
		q.batches.Add(uint64(len(reqs)))
		q.mutations.Add(uint64(n))
	}
	for _, r := range reqs {
		r.err = err
		close(r.done)
	}
}

// run is a committer that commits one group at a time: it commits what is
// queued until the queue is closed and drained.
func (q *commitQueue) run(commit func([]*request) error) {
	defer close(q.done)
	for {
		reqs := q.next()
		if len(reqs) == 0 {
			return
		}
		start := time.Now()
		err := commit(reqs)
		q.finish(reqs, err, time.Since(start))
	}
}

// close stops taking batches, lets the committer drain what is queued and
// waits for it. It reports false when the queue was already closed.
func (q *commitQueue) close() bool {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return false
	}
	q.closed = true
	q.mu.Unlock()
	q.kick()
	<-q.done
	return true
}
