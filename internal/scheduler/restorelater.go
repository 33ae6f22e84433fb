package scheduler

import (
	"context"
	"slices"
	"strings"
	"time"
)

// A store with a million finished operations in retention takes seconds
// to restore, and nothing but WaitExecution and GetOperation of old names
// needs them: Attach restores the unfinished work and returns, so the
// server serves Execute at once, and the finished operations whose task
// is gone join afterwards, in the background (restoreLater), a batch at a
// time under the lock. Until they all have, a call about a name still to
// join waits for them (lockFor): it is never answered NOT_FOUND for an
// operation whose record is still being read. Other names do not wait:
// an Execute (a new name) or an unknown name is answered at once.

// restoreLaterBatch is how many finished operations join under one hold
// of the lock: short enough not to stall dispatch for long.
var restoreLaterBatch = 4096

// beforeLaterBatch, when set (tests), runs before each batch is decoded.
var beforeLaterBatch func()

// laterOps are the finished operations left for restoreLater: their raw
// records and the names of those that have stored metadata, both in
// name order.
type laterOps struct {
	ops   []rawOp
	metas metaIndex
	// batch and beforeBatch are restoreLaterBatch and beforeLaterBatch
	// as Attach found them.
	batch       int
	beforeBatch func()
}

// rawOp is an operation record as read, not decoded: small, as a
// million of them wait.
type rawOp struct {
	name  string
	value []byte
}

// sort orders the records by name, if the store did not.
func (l *laterOps) sort() {
	byName := func(a, b rawOp) int { return strings.Compare(a.name, b.name) }
	if !slices.IsSortedFunc(l.ops, byName) {
		slices.SortFunc(l.ops, byName)
	}
}

// has reports whether name is one of the records (joined already or
// not).
func (l *laterOps) has(name string) bool {
	_, found := slices.BinarySearchFunc(l.ops, name, func(r rawOp, n string) int { return strings.Compare(r.name, n) })
	return found
}

// lockFor locks s.mu for a call about operation name. While finished
// operations are still being restored, a name that is among them but not
// joined yet waits until they all have.
func (s *Scheduler) lockFor(name string) {
	s.mu.Lock()
	for s.restoring != nil && name != "" {
		if _, ok := s.ops[name]; ok || !s.later.has(name) {
			return
		}
		ch := s.restoring
		s.mu.Unlock()
		<-ch
		s.mu.Lock()
	}
}

// lockAll locks s.mu once every finished operation has been restored, for
// calls that list them all.
func (s *Scheduler) lockAll() {
	s.mu.Lock()
	for s.restoring != nil {
		ch := s.restoring
		s.mu.Unlock()
		<-ch
		s.mu.Lock()
	}
}

// Restored is closed once every stored operation has been restored,
// including the finished ones Attach leaves to the background.
func (s *Scheduler) Restored() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.restoring != nil {
		return s.restoring
	}
	c := make(chan struct{})
	close(c)
	return c
}

// restoreLater joins the finished operations of later. Each batch is
// decoded outside the lock and joins under it; at the end they take
// their place, oldest first, before the operations finished since the
// restart, for retention to let them go in order. A record that does not
// decode is logged and left out (Attach already checked its first
// fields); if ctx ends first, the rest are left out.
func (s *Scheduler) restoreLater(ctx context.Context, later *laterOps, started time.Time) {
	var restored []*Operation
	anonymous, damaged := 0, 0
	buf := make([]storedOp, later.batch)
	for lo := 0; lo < len(later.ops) && ctx.Err() == nil; lo += later.batch {
		if later.beforeBatch != nil {
			later.beforeBatch()
		}
		raw := later.ops[lo:min(lo+later.batch, len(later.ops))]
		batch := buf[:len(raw)]
		for i, r := range raw {
			batch[i] = storedOp{name: r.name, value: r.value}
		}
		decodeParallel(len(batch), func(i int) { decodeStoredOp(&batch[i]) })
		now := s.clock.Now()
		s.mu.Lock()
		for i := range batch {
			o := &batch[i]
			_, hasMeta := later.metas.find(o.name)
			if o.err != nil {
				damaged++
				s.cfg.Logger.Error("a finished operation's stored record does not decode: not restored (WaitExecution of it answers NOT_FOUND)", "err", o.err)
				continue
			}
			op := &Operation{Name: o.name, goneSince: now, accepted: o.r.Accepted, invocation: o.r.Invocation, hasMeta: hasMeta, stored: true}
			if !finishDecoded(op, &o.r, o.resp, o.fin, nil) {
				anonymous++
				continue
			}
			if _, taken := s.ops[o.name]; taken {
				continue
			}
			s.ops[o.name] = op
			restored = append(restored, op)
		}
		s.restorePending -= len(batch)
		s.mu.Unlock()
		clear(batch)
	}
	sortFinished(restored)
	s.mu.Lock()
	s.finished = append(restored, s.finished...)
	ch := s.restoring
	s.restoring, s.restorePending, s.later = nil, 0, nil
	s.mu.Unlock()
	close(ch)
	if anonymous > 0 {
		s.cfg.Logger.Warn("finished operations stored by an older Gantry do not say whose they are: not restored (WaitExecution of them answers NOT_FOUND; their results stay in the ActionCache)",
			"operations", anonymous)
	}
	if len(later.ops) > 0 {
		s.cfg.Logger.Info("finished operations restored", "operations", len(restored), "damaged", damaged, "took", time.Since(started).Round(time.Millisecond))
	}
}

// sortFinished puts finished operations oldest first; the same instant
// in name order.
func sortFinished(ops []*Operation) {
	slices.SortFunc(ops, func(a, b *Operation) int {
		if c := a.doneAt.Compare(b.doneAt); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
}
