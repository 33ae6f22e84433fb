package statestore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Leadership among scheduler processes sharing one PostgreSQL.
//
// Lead takes the advisory lock (TryLead) and then, on the lock's own
// session, increments the term in the one-row table gantry_leader and
// publishes the leader's address there. From then on every commit
// transaction of this store first reads the term with FOR SHARE and
// rolls back unless it is still this leader's: a deposed leader cannot
// write, whatever it still believes. The FOR SHARE row lock orders the
// two: a takeover's term increment waits for the old leader's commits in
// flight, and old commits after it see the new term. The new leader
// loads the state after its increment, so it sees every commit the old
// leader acknowledged.

// ErrFenced is returned by commits of a store whose leadership was taken
// over by another process.
var ErrFenced = errors.New("statestore: another scheduler took over the leadership; this one may no longer write")

// LeaderInfo is the published leader.
type LeaderInfo struct {
	// Term counts takeovers; 0 when nobody ever led.
	Term int64
	// Address is the gRPC address the leader advertised.
	Address string
	// Since is when it took over.
	Since time.Time
}

func (p *Postgres) migrateLeader(ctx context.Context, tx pgx.Tx) error {
	_, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS gantry_leader (
		one boolean PRIMARY KEY DEFAULT true CHECK (one),
		term bigint NOT NULL,
		address text NOT NULL,
		since timestamptz NOT NULL)`)
	return err
}

// fence is the term this store's commits must find (0: none, as in a
// single process that never called Lead).
type fence struct {
	mu   sync.Mutex
	term int64
}

func (f *fence) get() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.term
}

// Lead is TryLead followed by a new term: it returns ErrNotLeader if
// another process leads. On success the address is published for
// frontends (see Leader), and from now on every commit checks the term.
// lost is closed when the leadership ends: the lock's session failed, the
// store was closed, or a commit found a newer term (ErrFenced).
func (p *Postgres) Lead(ctx context.Context, address string) (term int64, lost <-chan struct{}, err error) {
	lost, err = p.TryLead(ctx)
	if err != nil {
		return 0, nil, err
	}
	p.leadMu.Lock()
	l := p.lead
	p.leadMu.Unlock()
	if l == nil {
		return 0, nil, ErrClosed
	}
	// On the lock's own session (its health check shares it): the term
	// is taken only while the lock is held.
	err = l.use(ctx, 0, func(ctx context.Context, conn *pgx.Conn) error {
		return conn.QueryRow(ctx, `INSERT INTO gantry_leader (one, term, address, since) VALUES (true, 1, $1, now())
		ON CONFLICT (one) DO UPDATE SET term = gantry_leader.term + 1, address = EXCLUDED.address, since = EXCLUDED.since
		RETURNING term`, address).Scan(&term)
	})
	if err != nil {
		p.depose(l)
		return 0, nil, fmt.Errorf("statestore: starting a leader term: %w", err)
	}
	p.fence.mu.Lock()
	p.fence.term = term
	p.fence.mu.Unlock()
	return term, lost, nil
}

// depose ends leadership l (its lock session closes, lost closes).
func (p *Postgres) depose(l *leadership) {
	l.stopOnce.Do(func() { close(l.stop) })
}

// fenced is called by a commit that found another term.
func (p *Postgres) fenced() {
	p.leadMu.Lock()
	l := p.lead
	p.leadMu.Unlock()
	if l != nil {
		p.depose(l)
	}
}

// termCheck is the first statement of a leader's commit: it locks the
// leader row until the commit ends and fails the commit, by dividing by
// zero, when the row does not hold the term the commit is for.
const termCheck = `SELECT 1 / count(*)::int FROM (SELECT 1 FROM gantry_leader WHERE one AND term = $1 FOR SHARE) AS t`

// isTermMismatch reports whether err is termCheck's failure.
func isTermMismatch(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "22012" // division_by_zero
}

// fencedAt deposes this process, whose commit for term want found
// another term, and says which.
func (p *Postgres) fencedAt(ctx context.Context, want int64) error {
	p.fenced()
	var term int64
	if err := p.pool.QueryRow(ctx, `SELECT term FROM gantry_leader WHERE one`).Scan(&term); err != nil {
		return fmt.Errorf("%w (term %d, now another)", ErrFenced, want)
	}
	return fmt.Errorf("%w (term %d, now %d)", ErrFenced, want, term)
}

// Leader returns the published leader; Term is 0 if no process ever led.
// It reads the database, not this process's state.
func (p *Postgres) Leader(ctx context.Context) (LeaderInfo, error) {
	var li LeaderInfo
	err := p.pool.QueryRow(ctx, `SELECT term, address, since FROM gantry_leader WHERE one`).Scan(&li.Term, &li.Address, &li.Since)
	if errors.Is(err, pgx.ErrNoRows) {
		return LeaderInfo{}, nil
	}
	if err != nil {
		return LeaderInfo{}, fmt.Errorf("statestore: reading the leader from PostgreSQL: %w", err)
	}
	return li, nil
}
