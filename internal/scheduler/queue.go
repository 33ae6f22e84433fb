package scheduler

import (
	"container/heap"

	"github.com/gantry-build/gantry/internal/platform"
)

// bucket holds the queued tasks of one platform, best first: lower
// priority value, then lower sequence number (FIFO among equals).
type bucket struct {
	key   string // queue name and canonical platform
	queue string
	req   platform.Request
	tasks taskHeap
}

type taskHeap []*Task

func (h taskHeap) Len() int { return len(h) }
func (h taskHeap) Less(i, j int) bool {
	if h[i].priority != h[j].priority {
		return h[i].priority < h[j].priority
	}
	return h[i].seq < h[j].seq
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

// queue is the set of buckets. Workers match per bucket, so finding work
// costs O(buckets + log n) rather than a scan of every task.
type queue struct {
	buckets map[string]*bucket
	n       int
}

func newQueue() *queue { return &queue{buckets: map[string]*bucket{}} }

func (q *queue) push(t *Task) {
	b := q.buckets[t.bucketKey]
	if b == nil {
		b = &bucket{key: t.bucketKey, queue: t.Queue, req: t.Req}
		q.buckets[t.bucketKey] = b
	}
	heap.Push(&b.tasks, t)
	q.n++
}

func (q *queue) remove(t *Task) {
	b := q.buckets[t.bucketKey]
	if b == nil || t.heapIndex < 0 || t.heapIndex >= len(b.tasks) || b.tasks[t.heapIndex] != t {
		return
	}
	heap.Remove(&b.tasks, t.heapIndex)
	q.n--
	if len(b.tasks) == 0 {
		delete(q.buckets, b.key)
	}
}

func (q *queue) fix(t *Task) {
	if b := q.buckets[t.bucketKey]; b != nil && t.heapIndex >= 0 {
		heap.Fix(&b.tasks, t.heapIndex)
	}
}

// best returns the best queued task that accept allows, or nil.
func (q *queue) best(accept func(b *bucket, t *Task) bool) *Task {
	var best *Task
	for _, b := range q.buckets {
		head := b.tasks[0]
		if best != nil && !b.tasks.lessThan(head, best) {
			continue
		}
		if accept(b, head) {
			best = head
		}
	}
	return best
}

func (taskHeap) lessThan(a, b *Task) bool {
	if a.priority != b.priority {
		return a.priority < b.priority
	}
	return a.seq < b.seq
}
