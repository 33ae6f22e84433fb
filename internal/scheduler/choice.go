package scheduler

import "time"

// After the feasibility chain (feasibility.go) says which queued tasks a
// worker may take, two steps choose one: fairnessStep the fair choice,
// stickinessStep whether the worker stays in its own invocation instead.
// queue.pick runs them in that order.

// fairnessStep chooses the first task in the fairness order (fair.go)
// that the feasibility chain admits; each bucket offers its next task.
// Work of instances below their min quota on the worker's cohort comes
// first (urgent); among equals, the fairness order decides.
type fairnessStep struct{ q *queue }

func (f fairnessStep) choose(wt *waiter) (best *Task, urgent bool) {
	q := f.q
	ten, cohort := wt.worker.ten, wt.worker.cohort
	for _, b := range q.buckets {
		head := b.root.next
		if head == nil {
			continue
		}
		u := ten != nil && len(ten.quotas) > 0 && ten.belowMin(b.instance, cohort)
		if best != nil && (urgent && !u || u == urgent && !q.f.before(head, best)) {
			continue
		}
		if wt.accepts(b, head) {
			best, urgent = head, u
		}
	}
	return best, urgent
}

// stickinessStep keeps a worker whose last work was in invocation from
// on work of its own subtree instead of fair, the fair choice, while
// what fair competes with has waited less than the switch would cost
// (fair.go: switchCost and waited). An urgent fair choice (quota) always
// wins, and without stickiness configured fair does.
type stickinessStep struct{ q *queue }

func (st stickinessStep) choose(from *inode, now time.Time, wt *waiter, fair *Task, urgent bool) *Task {
	q := st.q
	if fair == nil || urgent || len(q.f.stickiness) == 0 || from == nil || from.parent == nil {
		return fair
	}
	anc, _, cf := lca(from, fair.inv)
	if anc == from {
		return fair // the fair choice is in the worker's own subtree
	}
	// The sticky candidate: the next task of the deepest invocation on
	// the worker's path that has work it can take.
	var sticky *Task
	var stickyAnc *inode
	for _, b := range q.buckets {
		for n := from; n != nil && n.depth > anc.depth; n = n.parent {
			if stickyAnc != nil && n.depth < stickyAnc.depth {
				break
			}
			bn := n.bnodeIn(b)
			if bn == nil || bn.next == nil {
				continue
			}
			if wt.accepts(b, bn.next) && (sticky == nil || n.depth > stickyAnc.depth || q.f.before(bn.next, sticky)) {
				sticky, stickyAnc = bn.next, n
			}
			break
		}
	}
	if sticky == nil {
		return fair
	}
	extra := q.f.switchCost(anc, from) - q.f.switchCost(stickyAnc, from)
	if waited(anc, cf, now) < extra {
		return sticky
	}
	return fair
}
