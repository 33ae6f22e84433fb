package scheduler

import (
	"time"

	"github.com/gantry-build/gantry/internal/platform"
)

// bucket holds the queued tasks of one platform in one queue, arranged by
// invocation (see fair.go): inside an invocation lower priority value
// first, then FIFO.
type bucket struct {
	key      string // queue name, instance and canonical platform
	queue    string
	instance string
	req      platform.Request
	root     *bnode
	n        int
}

type taskHeap []*Task

func (h taskHeap) Len() int { return len(h) }
func (h taskHeap) Less(i, j int) bool {
	return h.lessThan(h[i], h[j])
}
func (h taskHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].heapIndex = i
	h[j].heapIndex = j
}
func (h *taskHeap) Push(x any) {
	t := x.(*Task)
	t.heapIndex = len(*h)
	*h = append(*h, t)
}
func (h *taskHeap) Pop() any {
	old := *h
	t := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	t.heapIndex = -1
	return t
}

func (taskHeap) lessThan(a, b *Task) bool {
	if a.priority != b.priority {
		return a.priority < b.priority
	}
	if a.rank != b.rank {
		return a.rank > b.rank // longest expected first (longest.go)
	}
	return a.seq < b.seq
}

// each calls fn for every task queued in the bucket.
func (b *bucket) each(fn func(*Task)) {
	var walk func(bn *bnode)
	walk = func(bn *bnode) {
		for _, t := range bn.direct {
			fn(t)
		}
		for _, k := range bn.kids.items {
			walk(k.bn)
		}
	}
	if b.root != nil {
		walk(b.root)
	}
}

// queue is the set of buckets. Workers match per bucket, so finding work
// costs O(buckets x depth) plus O(depth x log n) to take it.
type queue struct {
	buckets map[string]*bucket
	n       int
	f       *fairness
	// warmBound is Config.PersistentWorkerStickiness (warm.go).
	warmBound time.Duration
}

func newQueue(f *fairness, warmBound time.Duration) *queue {
	return &queue{buckets: map[string]*bucket{}, f: f, warmBound: warmBound}
}

func (q *queue) push(t *Task, now time.Time) {
	b := q.buckets[t.bucketKey]
	if b == nil {
		b = &bucket{key: t.bucketKey, queue: t.Queue, instance: t.Instance, req: t.Req}
		b.root = q.f.bnodeFor(b, q.f.root)
		q.buckets[t.bucketKey] = b
	}
	q.f.push(b, t, now)
	b.n++
	q.n++
}

func (q *queue) remove(t *Task) {
	b := q.buckets[t.bucketKey]
	if b == nil || !q.f.remove(b, t) {
		return
	}
	b.n--
	q.n--
	if b.n == 0 {
		q.f.root.dropBnode(b)
		delete(q.buckets, b.key)
	}
}

// take removes t, which is about to be leased: the lease's start
// repositions t's invocation path (fairness.started).
func (q *queue) take(t *Task) {
	b := q.buckets[t.bucketKey]
	if b == nil || !q.f.detach(b, t) {
		return
	}
	b.n--
	q.n--
	if b.n == 0 {
		q.f.root.dropBnode(b)
		delete(q.buckets, b.key)
	}
}

func (q *queue) fix(t *Task) {
	if b := q.buckets[t.bucketKey]; b != nil && t.heapIndex >= 0 {
		q.f.fix(b, t)
	}
}

// pick chooses the task for a worker whose last work was in invocation
// from: among the tasks the feasibility chain admits (feasibility.go),
// the fair choice, unless the worker's stickiness keeps it in its own
// subtree (choice.go), or its warm persistent worker keys keep it on
// their work (warm.go).
func (q *queue) pick(from *inode, now time.Time, wt *waiter) *Task {
	fair, urgent := fairnessStep{q}.choose(wt)
	chosen := stickinessStep{q}.choose(from, now, wt, fair, urgent)
	return warmStep{q, q.warmBound}.choose(wt, now, chosen, urgent)
}
