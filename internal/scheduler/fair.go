package scheduler

import (
	"container/heap"
	"math"
	"sort"
	"time"
)

// Fairness: every task carries an invocation path, a list of keys (for
// example instance name, correlated invocations id, tool invocation id).
// The paths form a trie of invocations. Inside each bucket (a queue and
// platform), queued tasks sit in a mirror of that trie: a bucket node has
// the tasks queued directly at its invocation and a heap of its children
// that have queued work, ordered by how far below its fair share each is.
// Every bucket node caches the task it would hand out next, so that the
// next task of a bucket is read at its root and an update costs
// O(depth x log n).
//
// The order among the entries of one node (each child invocation, and the
// tasks queued directly at the node, which compete as one more child):
//
//  1. lower share score first, where
//     score = (executing + 1) x 2^(priority / PriorityHalving)
//     executing is the number of leased tasks in the entry's subtree (for
//     the direct entry: leased tasks queued directly at the node) and
//     priority is that of the entry's next task. With equal priorities the
//     entry with fewer executing tasks goes first, so every entry converges
//     to an equal number of workers; an entry whose next task has a
//     priority PriorityHalving lower gets twice the workers.
//  2. then the entry that started work least recently;
//  3. then the next task's priority and submission order.
//
// The same order compares the candidates of different buckets: it is
// applied at the lowest common ancestor of their invocations.

// inode is one invocation: a node of the global invocation trie. It lives
// while tasks or workers refer to it.
type inode struct {
	parent *inode
	key    string
	// keys is the node's invocation path, shared by the tasks and
	// operations of the invocation instead of a copy each (canonical).
	keys     []string
	depth    int
	children map[string]*inode
	refs     int

	// executing counts leased tasks in the subtree; selfExecuting those
	// whose invocation is this node itself.
	executing, selfExecuting int
	// queued counts queued tasks in the subtree; selfQueued those here.
	queued, selfQueued int
	// lastStart orders entries by when they last started work (a counter,
	// 0 = never); lastStartAt is the time, for stickiness.
	lastStart, selfLastStart     int64
	lastStartAt, selfLastStartAt time.Time
	// queuedSince is when the subtree (self: the node) last went from no
	// queued work to some.
	queuedSince, selfQueuedSince time.Time

	// bnodes are the invocation's places in buckets (usually one or two).
	bnodes []*bnode
}

// bnodeIn returns the invocation's node in bucket b, or nil.
func (n *inode) bnodeIn(b *bucket) *bnode {
	for _, bn := range n.bnodes {
		if bn.bucket == b {
			return bn
		}
	}
	return nil
}

func (n *inode) dropBnode(b *bucket) {
	for i, bn := range n.bnodes {
		if bn.bucket == b {
			last := len(n.bnodes) - 1
			n.bnodes[i] = n.bnodes[last]
			n.bnodes[last] = nil
			n.bnodes = n.bnodes[:last]
			return
		}
	}
}

// bnode is an invocation's place in one bucket.
type bnode struct {
	inv       *inode
	bucket    *bucket
	parent    *bnode
	kids      bnodeHeap
	direct    taskHeap
	next      *Task
	heapIndex int
}

// fairness holds the invocation trie and its policy.
type fairness struct {
	root        *inode
	halving     float64
	stickiness  []time.Duration
	startSerial int64
}

func newFairness(halving float64, stickiness []time.Duration) *fairness {
	if halving <= 0 {
		halving = DefaultPriorityHalving
	}
	return &fairness{root: &inode{children: map[string]*inode{}, refs: 1}, halving: halving, stickiness: stickiness}
}

// DefaultPriorityHalving is how many priority points double an
// invocation's share.
const DefaultPriorityHalving = 10

// node returns the invocation for path, creating it, with a reference.
func (f *fairness) node(path []string) *inode {
	n := f.root
	for _, k := range path {
		c := n.children[k]
		if c == nil {
			keys := append(n.keys[:len(n.keys):len(n.keys)], k)
			c = &inode{parent: n, key: k, keys: keys[:len(keys):len(keys)], depth: n.depth + 1, children: map[string]*inode{}}
			n.children[k] = c
		}
		n = c
	}
	n.refs++
	return n
}

func (f *fairness) ref(n *inode) { n.refs++ }

// canonical returns the keys of path's node if there is one (the same
// strings, shared), else path.
func (f *fairness) canonical(path []string) []string {
	n := f.root
	for _, k := range path {
		if n = n.children[k]; n == nil {
			return path
		}
	}
	return n.keys
}

// unref drops a reference and removes invocations nothing refers to.
func (f *fairness) unref(n *inode) {
	n.refs--
	for n != f.root && n.refs <= 0 && len(n.children) == 0 && n.executing == 0 && n.queued == 0 {
		p := n.parent
		delete(p.children, n.key)
		n = p
	}
}

// path returns the keys from the root to n.
func (n *inode) path() []string {
	out := make([]string, n.depth)
	for x := n; x.parent != nil; x = x.parent {
		out[x.depth-1] = x.key
	}
	return out
}

// lca returns the lowest common ancestor of a and b, and the children of
// it on the way to a and to b (nil when a or b is the ancestor itself).
func lca(a, b *inode) (anc, ca, cb *inode) {
	for a.depth > b.depth {
		ca, a = a, a.parent
	}
	for b.depth > a.depth {
		cb, b = b, b.parent
	}
	for a != b {
		ca, a = a, a.parent
		cb, b = b, b.parent
	}
	return a, ca, cb
}

// entry is what the fairness order compares.
type entry struct {
	exec int
	prio int32
	last int64
	seq  int64
}

func (f *fairness) less(a, b entry) bool {
	if a.prio == b.prio {
		if a.exec != b.exec {
			return a.exec < b.exec
		}
	} else {
		sa := float64(a.exec+1) * math.Exp2(float64(a.prio)/f.halving)
		sb := float64(b.exec+1) * math.Exp2(float64(b.prio)/f.halving)
		if sa != sb {
			return sa < sb
		}
	}
	if a.last != b.last {
		return a.last < b.last
	}
	if a.prio != b.prio {
		return a.prio < b.prio
	}
	return a.seq < b.seq
}

func directEntry(n *inode, t *Task) entry {
	return entry{exec: n.selfExecuting, prio: t.priority, last: n.selfLastStart, seq: t.seq}
}

func childEntry(c *inode, t *Task) entry {
	return entry{exec: c.executing, prio: t.priority, last: c.lastStart, seq: t.seq}
}

// entryFor is the entry t competes with at ancestor anc, given the child
// of anc on the way to t (nil: t is queued at anc itself).
func entryFor(anc, child *inode, t *Task) entry {
	if child == nil {
		return directEntry(anc, t)
	}
	return childEntry(child, t)
}

// before reports whether task a goes before task b in the fairness order.
func (f *fairness) before(a, b *Task) bool {
	if a.inv == b.inv {
		return taskHeap.lessThan(nil, a, b)
	}
	anc, ca, cb := lca(a.inv, b.inv)
	return f.less(entryFor(anc, ca, a), entryFor(anc, cb, b))
}

// bnodeHeap orders a node's children. Each item carries its child's key,
// so comparisons read one array rather than chase pointers; the key is
// refreshed (setKey) before every heap.Fix.
type bnodeHeap struct {
	f     *fairness
	items []kidItem
}

type kidItem struct {
	k  entry
	bn *bnode
}

func (h *bnodeHeap) Len() int           { return len(h.items) }
func (h *bnodeHeap) Less(i, j int) bool { return h.f.less(h.items[i].k, h.items[j].k) }
func (h *bnodeHeap) Swap(i, j int) {
	h.items[i], h.items[j] = h.items[j], h.items[i]
	h.items[i].bn.heapIndex = i
	h.items[j].bn.heapIndex = j
}
func (h *bnodeHeap) Push(x any) {
	n := x.(*bnode)
	n.heapIndex = len(h.items)
	h.items = append(h.items, kidItem{k: childEntry(n.inv, n.next), bn: n})
}
func (h *bnodeHeap) Pop() any {
	old := h.items
	n := old[len(old)-1].bn
	old[len(old)-1] = kidItem{}
	h.items = old[:len(old)-1]
	n.heapIndex = -1
	return n
}

func (h *bnodeHeap) top() *bnode {
	if len(h.items) == 0 {
		return nil
	}
	return h.items[0].bn
}

// rekey refreshes bn's key in its parent's heap and restores the order.
func rekey(bn *bnode) {
	h := &bn.parent.kids
	h.items[bn.heapIndex].k = childEntry(bn.inv, bn.next)
	heap.Fix(h, bn.heapIndex)
}

// bnodeFor returns inv's node in bucket b, creating the chain to the root.
func (f *fairness) bnodeFor(b *bucket, inv *inode) *bnode {
	if bn := inv.bnodeIn(b); bn != nil {
		return bn
	}
	bn := &bnode{inv: inv, bucket: b, heapIndex: -1, kids: bnodeHeap{f: f}}
	inv.bnodes = append(inv.bnodes, bn)
	if inv.parent != nil {
		bn.parent = f.bnodeFor(b, inv.parent)
	}
	return bn
}

// computeNext picks the node's next task: the best of its direct tasks
// and its best child's next task.
func (f *fairness) computeNext(bn *bnode) *Task {
	var d, c *Task
	if len(bn.direct) > 0 {
		d = bn.direct[0]
	}
	top := bn.kids.top()
	if top != nil {
		c = top.next
	}
	switch {
	case d == nil:
		return c
	case c == nil:
		return d
	case f.less(directEntry(bn.inv, d), childEntry(top.inv, c)):
		return d
	default:
		return c
	}
}

// refresh recomputes bn's next task and its place in its parent, up to
// the root. Empty nodes leave the bucket. With force, it goes all the way
// up even when a node's next task did not change (its key did).
func (f *fairness) refresh(b *bucket, bn *bnode, force bool) {
	for bn != nil {
		old := bn.next
		bn.next = f.computeNext(bn)
		p := bn.parent
		if p == nil {
			return
		}
		switch {
		case bn.next == nil:
			if bn.heapIndex >= 0 {
				heap.Remove(&p.kids, bn.heapIndex)
			}
			bn.inv.dropBnode(b)
		case bn.heapIndex < 0:
			heap.Push(&p.kids, bn)
		case old != bn.next || force:
			rekey(bn)
		default:
			return
		}
		bn = p
	}
}

// push queues t in bucket b at its invocation.
func (f *fairness) push(b *bucket, t *Task, now time.Time) {
	bn := f.bnodeFor(b, t.inv)
	heap.Push(&bn.direct, t)
	if t.inv.selfQueued == 0 {
		t.inv.selfQueuedSince = now
	}
	t.inv.selfQueued++
	for n := t.inv; n != nil; n = n.parent {
		if n.queued == 0 {
			n.queuedSince = now
		}
		n.queued++
	}
	f.refresh(b, bn, false)
}

// remove takes a queued t out of bucket b.
func (f *fairness) remove(b *bucket, t *Task) bool {
	bn := t.inv.bnodeIn(b)
	if bn == nil || t.heapIndex < 0 || t.heapIndex >= len(bn.direct) || bn.direct[t.heapIndex] != t {
		return false
	}
	heap.Remove(&bn.direct, t.heapIndex)
	t.inv.selfQueued--
	for n := t.inv; n != nil; n = n.parent {
		n.queued--
	}
	f.refresh(b, bn, false)
	return true
}

// detach takes a queued t out of bucket b without repositioning its path:
// the caller leases t at once, and the lease start (started) repositions
// the path in one pass.
func (f *fairness) detach(b *bucket, t *Task) bool {
	bn := t.inv.bnodeIn(b)
	if bn == nil || t.heapIndex < 0 || t.heapIndex >= len(bn.direct) || bn.direct[t.heapIndex] != t {
		return false
	}
	heap.Remove(&bn.direct, t.heapIndex)
	t.inv.selfQueued--
	for n := t.inv; n != nil; n = n.parent {
		n.queued--
	}
	return true
}

// fix restores t's place after its priority changed.
func (f *fairness) fix(b *bucket, t *Task) {
	bn := t.inv.bnodeIn(b)
	if bn == nil || t.heapIndex < 0 {
		return
	}
	heap.Fix(&bn.direct, t.heapIndex)
	f.refresh(b, bn, true)
}

// started records that a task of inv was leased (delta +1) or that a
// lease ended (delta -1), and repositions inv and its ancestors in every
// bucket. A start also stamps the path as the most recent to start work.
func (f *fairness) started(inv *inode, delta int, now time.Time) {
	if delta > 0 {
		f.startSerial++
		inv.selfLastStart, inv.selfLastStartAt = f.startSerial, now
		for n := inv; n != nil; n = n.parent {
			n.lastStart, n.lastStartAt = f.startSerial, now
		}
	}
	f.adjust(inv, delta)
}

// adjust changes the executing counts of inv's path by delta and
// repositions the path in every bucket.
func (f *fairness) adjust(inv *inode, delta int) {
	inv.selfExecuting += delta
	for n := inv; n != nil; n = n.parent {
		n.executing += delta
	}
	// Bottom-up, every bucket node of the path gets its next task again
	// and its place in its parent; nodes left empty (by detach) leave.
	for n := inv; n != nil; n = n.parent {
		for i := len(n.bnodes) - 1; i >= 0; i-- {
			bn := n.bnodes[i]
			bn.next = f.computeNext(bn)
			switch {
			case bn.parent == nil:
			case bn.next == nil:
				if bn.heapIndex >= 0 {
					heap.Remove(&bn.parent.kids, bn.heapIndex)
				}
				n.dropBnode(bn.bucket)
			case bn.heapIndex >= 0:
				rekey(bn)
			}
		}
	}
}

// switchCost is what moving a worker from invocation from to one that
// diverges from it below anc costs: the stickiness of every level whose
// key would change.
func (f *fairness) switchCost(anc, from *inode) time.Duration {
	var d time.Duration
	for i := anc.depth; i < from.depth && i < len(f.stickiness); i++ {
		d += f.stickiness[i]
	}
	return d
}

// waited is how long the entry that t competes with at anc (child: the
// child of anc on t's side, nil for t's own node) has gone without
// starting work while it had work queued.
func waited(anc, child *inode, now time.Time) time.Duration {
	var since time.Time
	if child == nil {
		since = laterOf(anc.selfLastStartAt, anc.selfQueuedSince)
	} else {
		since = laterOf(child.lastStartAt, child.queuedSince)
	}
	return now.Sub(since)
}

func laterOf(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// InvocationStats describes one invocation of the trie.
type InvocationStats struct {
	// Path is the invocation's keys from the root; empty for the root.
	Path []string
	// Queued and Executing count the subtree's tasks; SelfQueued and
	// SelfExecuting those whose invocation is this one itself (work shared
	// by several invocations sits at their lowest common ancestor).
	Queued, Executing         int
	SelfQueued, SelfExecuting int
	// Workers counts the workers whose last task was in this invocation.
	Workers int
	// LastStart is when the subtree last started an action.
	LastStart time.Time
}

// Invocations returns the invocation trie, parents before children and
// siblings by key. Invocations with nothing queued or executing and no
// worker are left out, except the root.
func (s *Scheduler) Invocations() []InvocationStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	workers := map[*inode]int{}
	covered := map[*inode]bool{}
	for _, w := range s.workers {
		if w.inv != nil {
			workers[w.inv]++
			for x := w.inv; x != nil && !covered[x]; x = x.parent {
				covered[x] = true
			}
		}
	}
	var out []InvocationStats
	var walk func(n *inode)
	walk = func(n *inode) {
		if n.parent != nil && n.queued == 0 && n.executing == 0 && !covered[n] {
			return
		}
		out = append(out, InvocationStats{Path: n.path(), Queued: n.queued, Executing: n.executing,
			SelfQueued: n.selfQueued, SelfExecuting: n.selfExecuting, Workers: workers[n], LastStart: n.lastStartAt})
		keys := make([]string, 0, len(n.children))
		for k := range n.children {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			walk(n.children[k])
		}
	}
	walk(s.fair.root)
	return out
}
