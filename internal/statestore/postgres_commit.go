package statestore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Overlapping commits on PostgreSQL (issue 43). One group commit at a time
// kept the committer busy 95% of the time at 64 actions in flight (much of
// it, it turned out, a delete whose cached plan scanned the table: see
// plan_cache_mode in postgres.go): a group waited for the previous one's
// round trip, statements, WAL flush and wake-ups before its own began.
// With CommitsInFlight up to that many groups are in flight, each a transaction on a
// connection of its own, with two rules that keep the store's promises:
//
//   - Prefix durability. A group sent while an earlier one is in flight
//     runs its statements inside BEGIN at once, but sends COMMIT only once
//     the earlier transaction has committed, and rolls back if it failed:
//     a group is never durable without every group before it, and its
//     callers are told after the earlier ones' (the completer answers in
//     order). A group sent alone needs no BEGIN: one round trip, as before.
//   - Same-key order. A group that writes a record an in-flight group
//     writes is held back until that group's transaction has ended, so
//     that the later change lands last. (Running both at once is not
//     enough: a DELETE does not see a row an uncommitted transaction
//     inserts, and would miss it.)
//
// So two of this store's transactions in flight never write the same row,
// and never wait for each other's locks.
//
// The default is one in flight all the same: against a PostgreSQL on the
// same 2-core machine, two were slower (docs/PERFORMANCE.md): PostgreSQL
// flushes its WAL for one commit after another whatever the connections,
// so overlapping hides only the round trips, while the groups, taken
// sooner, get smaller and cost more transactions an action.

// defaultCommitsInFlight is CommitsInFlight when not set.
const defaultCommitsInFlight = 1

// pgPipeline is the state the committer and completer share.
type pgPipeline struct {
	slots chan struct{} // one per group in flight

	mu     sync.Mutex
	flying []*pgFlight // sent, not yet answered, in order

	heldBack atomic.Uint64 // groups held back by a key of an in-flight group
	chained  atomic.Uint64 // groups sent while an earlier one was in flight
}

func newPGPipeline(depth int) *pgPipeline {
	return &pgPipeline{slots: make(chan struct{}, depth)}
}

// pgFlight is one group commit.
type pgFlight struct {
	reqs  []*request
	last  map[stateKey]Mutation // the group folded: each record's last change
	prev  *pgFlight             // the group before, if in flight when this one was sent
	start time.Time
	err   error         // set before done closes
	done  chan struct{} // closed when the transaction has ended
}

type stateKey struct{ kind, key string }

// fold keeps the last change of each record of reqs: within one
// transaction only that one matters.
func fold(reqs []*request) map[stateKey]Mutation {
	n := 0
	for _, r := range reqs {
		n += len(r.batch)
	}
	last := make(map[stateKey]Mutation, n)
	for _, r := range reqs {
		for _, m := range r.batch {
			last[stateKey{m.Kind, m.Key}] = m
		}
	}
	return last
}

// shares reports whether f and g write a record in common.
func (f *pgFlight) shares(g *pgFlight) bool {
	a, b := f.last, g.last
	if len(a) > len(b) {
		a, b = b, a
	}
	for k := range a {
		if _, ok := b[k]; ok {
			return true
		}
	}
	return false
}

// run is the committer goroutine: it sends each group the queue gives it
// and hands it to the completer, until the queue is closed and every group
// has been answered.
func (p *Postgres) run() {
	if cap(p.pipe.slots) == 1 {
		// One at a time: on this goroutine, without the hand-offs to a
		// sender and a completer (a lone commit waited for two more
		// goroutine wake-ups, which a loaded machine makes slow).
		p.q.run(p.commitAlone)
		return
	}
	defer close(p.q.done)
	inFlight := make(chan *pgFlight, cap(p.pipe.slots))
	completed := make(chan struct{})
	go p.complete(inFlight, completed)
	for {
		// Wait for room first: the groups queued meanwhile then go into
		// one transaction. (Gathering more after a large group, as the
		// embedded store does, cost rate here: workers wait for the
		// commit of their results before their next lease.)
		p.pipe.slots <- struct{}{}
		reqs := p.q.next()
		if len(reqs) == 0 {
			<-p.pipe.slots
			break
		}
		f := &pgFlight{reqs: reqs, last: fold(reqs), start: time.Now(), done: make(chan struct{})}
		p.pipe.mu.Lock()
		flying := slices.Clone(p.pipe.flying)
		p.pipe.mu.Unlock()
		for _, g := range flying {
			if f.shares(g) {
				p.pipe.heldBack.Add(1)
				<-g.done // and the ones before it, which end first
			}
		}
		if n := len(flying); n > 0 {
			select {
			case <-flying[n-1].done:
				// Ended: every earlier group has too.
			default:
				f.prev = flying[n-1]
				p.pipe.chained.Add(1)
			}
		}
		p.pipe.mu.Lock()
		p.pipe.flying = append(p.pipe.flying, f)
		p.pipe.mu.Unlock()
		go p.send(f)
		inFlight <- f
	}
	close(inFlight)
	<-completed
}

// complete is the completer goroutine: it answers the groups in the order
// they were sent, each once its transaction has ended.
func (p *Postgres) complete(in <-chan *pgFlight, done chan<- struct{}) {
	defer close(done)
	for f := range in {
		<-f.done
		if f.err == nil {
			p.commits.Add(1)
		}
		p.pipe.mu.Lock()
		if len(p.pipe.flying) > 0 && p.pipe.flying[0] == f {
			p.pipe.flying[0] = nil
			p.pipe.flying = p.pipe.flying[1:]
		}
		p.pipe.mu.Unlock()
		p.q.finish(f.reqs, f.err, time.Since(f.start))
		<-p.pipe.slots
	}
}

// send writes f's group in one transaction, committed after f.prev's.
func (p *Postgres) send(f *pgFlight) {
	defer close(f.done)
	ctx, cancel := context.WithTimeout(context.Background(), commitTimeout)
	defer cancel()
	term := p.fence.get()
	err := p.transact(ctx, f, term)
	if err != nil && term != 0 && isTermMismatch(err) {
		err = p.fencedAt(ctx, term)
	}
	f.err = err
}

// commitAlone commits reqs when no other group is in flight.
func (p *Postgres) commitAlone(reqs []*request) error {
	f := &pgFlight{reqs: reqs, last: fold(reqs), done: make(chan struct{})}
	p.send(f)
	if f.err == nil {
		p.commits.Add(1)
	}
	return f.err
}

// errEarlierFailed wraps the error of an earlier group whose failure
// rolled back a later one.
type errEarlierFailed struct{ err error }

func (e errEarlierFailed) Error() string {
	return fmt.Sprintf("statestore: an earlier commit in flight with this one failed, so this one was rolled back: %v", e.err)
}

func (e errEarlierFailed) Unwrap() error { return e.err }

func (p *Postgres) transact(ctx context.Context, f *pgFlight, term int64) error {
	conn, err := p.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("statestore: connecting to PostgreSQL for a commit: %w", err)
	}
	// A connection left inside a transaction (an error below) is closed,
	// not reused, by Release.
	defer conn.Release()
	b := &pgx.Batch{}
	if f.prev == nil {
		// Alone, one round trip: the statements go in one pipeline ending
		// in one Sync, which PostgreSQL runs as one implicit transaction,
		// committed at the Sync, or rolled back whole at the first error.
		if term != 0 {
			b.Queue(termCheck, term)
		}
		queueWrites(b, f.last)
		if err := conn.SendBatch(ctx, b).Close(); err != nil {
			return commitErr(err)
		}
		return nil
	}
	b.Queue(`BEGIN`)
	queueWrites(b, f.last)
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		return commitErr(err)
	}
	<-f.prev.done
	if err := f.prev.err; err != nil {
		conn.Exec(ctx, `ROLLBACK`) // best effort; Release closes it otherwise
		var e errEarlierFailed
		if errors.As(err, &e) {
			return err
		}
		return errEarlierFailed{err}
	}
	// The term is checked now, the earlier transaction ended: two
	// transactions holding the leader row's share lock at once would
	// make PostgreSQL create a MultiXact for it at each commit. The
	// lock, held until the commit, still orders it before a takeover's
	// new term.
	b = &pgx.Batch{}
	if term != 0 {
		b.Queue(termCheck, term)
	}
	b.Queue(`COMMIT`)
	br := conn.SendBatch(ctx, b)
	var tag pgconn.CommandTag
	err = nil
	if term != 0 {
		_, err = br.Exec()
	}
	if err == nil {
		tag, err = br.Exec()
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return commitErr(err)
	}
	if tag.String() != "COMMIT" {
		return fmt.Errorf("statestore: committing to PostgreSQL: the transaction was rolled back (%s)", tag)
	}
	return nil
}

func commitErr(err error) error {
	if isTermMismatch(err) {
		return err
	}
	return fmt.Errorf("statestore: committing to PostgreSQL: %w", err)
}

// queueWrites queues the statements that write last: one multi-row
// delete and one multi-row upsert.
func queueWrites(b *pgx.Batch, last map[stateKey]Mutation) {
	var upKinds, upKeys, delKinds, delKeys []string
	var upValues [][]byte
	for k, m := range last {
		if m.Delete {
			delKinds, delKeys = append(delKinds, k.kind), append(delKeys, k.key)
			continue
		}
		upKinds, upKeys = append(upKinds, k.kind), append(upKeys, k.key)
		v := m.Value
		if v == nil {
			v = []byte{}
		}
		upValues = append(upValues, v)
	}
	if len(delKinds) > 0 {
		b.Queue(`DELETE FROM gantry_state s USING unnest($1::text[], $2::text[]) AS d(kind, key)
			WHERE s.kind = d.kind AND s.key = d.key`, delKinds, delKeys)
	}
	if len(upKinds) > 0 {
		b.Queue(`INSERT INTO gantry_state (kind, key, value)
			SELECT * FROM unnest($1::text[], $2::text[], $3::bytea[])
			ON CONFLICT (kind, key) DO UPDATE SET value = EXCLUDED.value`, upKinds, upKeys, upValues)
	}
}
