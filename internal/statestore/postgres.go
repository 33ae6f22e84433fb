package statestore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Postgres is a Store in a PostgreSQL database, shared by several Gantry
// processes: table gantry_state(kind, key, value), and gantry_schema with
// the schema version. One goroutine group-commits: it takes every batch
// waiting, writes them in one transaction and wakes their callers with
// the common result; up to CommitsInFlight such transactions overlap
// (postgres_commit.go).
type Postgres struct {
	pool *pgxpool.Pool
	cfg  *pgxpool.Config

	q    *commitQueue
	pipe *pgPipeline

	commits atomic.Uint64

	leadMu   sync.Mutex
	lead     *leadership
	leadStop bool

	fence fence
}

var _ Store = (*Postgres)(nil)

const (
	schemaVersion = 1
	// schemaLockKey and leaderLockKey are advisory lock keys ("gantry"
	// in ASCII, and one more).
	schemaLockKey = 0x67616e747279
	leaderLockKey = 0x67616e747279 + 1
	// commitTimeout bounds one commit transaction.
	commitTimeout = 30 * time.Second
)

// pingInterval is how often the leadership connection is checked (a
// variable for tests).
var pingInterval = 500 * time.Millisecond

// ErrNotLeader is returned by TryLead when another session holds the
// leadership.
var ErrNotLeader = errors.New("statestore: another process holds the leadership")

// PostgresOptions tune a Postgres store; the zero value is the default.
type PostgresOptions struct {
	// CommitsInFlight is how many group commits may be in flight at once,
	// each a transaction on a connection of its own (0: 1, one at a
	// time; at most MaxCommitsInFlight).
	CommitsInFlight int
}

// MaxCommitsInFlight bounds PostgresOptions.CommitsInFlight.
const MaxCommitsInFlight = 16

// OpenPostgres connects to the database at dsn (a libpq URL or key=value
// string), creating the tables if they are missing. Its errors never quote
// dsn's user name and password (redactDSN).
func OpenPostgres(ctx context.Context, dsn string) (*Postgres, error) {
	return OpenPostgresWith(ctx, dsn, PostgresOptions{})
}

// OpenPostgresWith is OpenPostgres with options.
func OpenPostgresWith(ctx context.Context, dsn string, opts PostgresOptions) (*Postgres, error) {
	depth := opts.CommitsInFlight
	if depth == 0 {
		depth = defaultCommitsInFlight
	}
	if depth < 1 || depth > MaxCommitsInFlight {
		return nil, fmt.Errorf("statestore: %d commits in flight: use 1 to %d", depth, MaxCommitsInFlight)
	}
	cfg, err := parseDSN(dsn)
	if err != nil {
		return nil, err
	}
	// A connection for each commit in flight, and some for reads.
	cfg.MaxConns = max(cfg.MaxConns, int32(depth)+2)
	// Plan each statement with its arguments and the table's size at the
	// time: a prepared statement's generic plan, made while the table was
	// small, deleted by scanning all of it (3-11 ms a delete at 20,000
	// records; issue 43). Unless the address sets it otherwise.
	if _, ok := cfg.ConnConfig.RuntimeParams["plan_cache_mode"]; !ok {
		cfg.ConnConfig.RuntimeParams["plan_cache_mode"] = "force_custom_plan"
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("statestore: connecting to PostgreSQL: %w", err)
	}
	p := &Postgres{pool: pool, cfg: cfg, q: newCommitQueue(), pipe: newPGPipeline(depth)}
	if err := p.migrate(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	go p.run()
	return p, nil
}

func (p *Postgres) migrate(ctx context.Context) error {
	err := pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		// Serialise concurrent first starts.
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(schemaLockKey)); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS gantry_schema (
			one boolean PRIMARY KEY DEFAULT true CHECK (one),
			version integer NOT NULL)`); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO gantry_schema (version) VALUES ($1) ON CONFLICT DO NOTHING`, schemaVersion); err != nil {
			return err
		}
		var v int
		if err := tx.QueryRow(ctx, `SELECT version FROM gantry_schema`).Scan(&v); err != nil {
			return err
		}
		if v > schemaVersion {
			return fmt.Errorf("the database's schema version is %d, newer than this Gantry's %d: upgrade Gantry", v, schemaVersion)
		}
		// key sorts bytewise (COLLATE "C"), as Go strings do, so that the
		// primary key's index serves Load's order.
		_, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS gantry_state (
			kind text NOT NULL,
			key text COLLATE "C" NOT NULL,
			value bytea NOT NULL,
			PRIMARY KEY (kind, key))`)
		if err != nil {
			return err
		}
		return p.migrateLeader(ctx, tx)
	})
	if err != nil {
		return fmt.Errorf("statestore: preparing the PostgreSQL schema: %w", err)
	}
	return nil
}

// Apply implements Store. If ctx ends while the batch still waits for a
// commit, Apply returns ctx's error and the batch is not applied; once a
// commit has taken it, Apply returns that commit's result (bounded by a
// 30 s transaction timeout). A connection lost during COMMIT leaves the
// outcome unknown, as with any database: Apply then returns an error
// although the batch may have been applied.
func (p *Postgres) Apply(ctx context.Context, batch []Mutation) error {
	wait, err := p.q.enqueue(ctx, batch, false)
	if err != nil {
		return err
	}
	return wait(ctx)
}

// Enqueue implements Pipeliner. The store keeps the values.
func (p *Postgres) Enqueue(ctx context.Context, batch []Mutation) (wait func(context.Context) error, err error) {
	return p.q.enqueue(ctx, batch, true)
}

// Load implements Store: a cursor over the kind's records in key order,
// in one read-only snapshot.
func (p *Postgres) Load(ctx context.Context, kind string, fn func(key string, value []byte) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	opts := pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}
	err := pgx.BeginTxFunc(ctx, p.pool, opts, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `DECLARE gantry_load NO SCROLL CURSOR FOR
			SELECT key, value FROM gantry_state WHERE kind = $1 ORDER BY key`, kind); err != nil {
			return err
		}
		type rec struct {
			key   string
			value []byte
		}
		for {
			rows, err := tx.Query(ctx, `FETCH 256 FROM gantry_load`)
			if err != nil {
				return err
			}
			recs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (rec, error) {
				var r rec
				err := row.Scan(&r.key, &r.value)
				return r, err
			})
			if err != nil {
				return err
			}
			if len(recs) == 0 {
				return nil
			}
			// Call fn after the rows are read: fn may use the store.
			for _, r := range recs {
				if err := fn(r.key, r.value); err != nil {
					return errCallback{err}
				}
			}
		}
	})
	var cb errCallback
	if errors.As(err, &cb) {
		return cb.err
	}
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("statestore: loading %q from PostgreSQL: %w", kind, err)
	}
	return nil
}

type errCallback struct{ err error }

func (e errCallback) Error() string { return e.err.Error() }

// Commits returns the number of commit transactions since open.
func (p *Postgres) Commits() uint64 { return p.commits.Load() }

type leadership struct {
	// conn is the lock's session. A pgx.Conn serves one call at a time:
	// connMu serialises the health check and the leader's own statements.
	connMu   sync.Mutex
	conn     *pgx.Conn
	lost     chan struct{}
	stop     chan struct{}
	stopOnce sync.Once
}

// TryLead tries to become the leader among the processes sharing the
// database: it takes a session-level advisory lock on a connection of its
// own. It returns ErrNotLeader if another session holds it. On success,
// lost is closed when the leadership ends: the connection died or failed
// its health check (checked every 500 ms), or the store was closed. The
// server releases the lock when that session ends, so another process can
// then take over. Calling TryLead while leading returns the same channel.
func (p *Postgres) TryLead(ctx context.Context) (lost <-chan struct{}, err error) {
	p.leadMu.Lock()
	defer p.leadMu.Unlock()
	if p.leadStop {
		return nil, ErrClosed
	}
	if l := p.lead; l != nil {
		select {
		case <-l.lost:
		default:
			return l.lost, nil
		}
	}
	conn, err := pgx.ConnectConfig(ctx, p.cfg.ConnConfig.Copy())
	if err != nil {
		return nil, fmt.Errorf("statestore: connecting for leadership: %w", err)
	}
	var ok bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, int64(leaderLockKey)).Scan(&ok); err != nil {
		conn.Close(context.Background())
		return nil, fmt.Errorf("statestore: taking the leadership lock: %w", err)
	}
	if !ok {
		conn.Close(context.Background())
		return nil, ErrNotLeader
	}
	l := &leadership{conn: conn, lost: make(chan struct{}), stop: make(chan struct{})}
	p.lead = l
	go l.watch()
	return l.lost, nil
}

// watch checks the leadership connection until it fails or stop closes,
// then closes the connection (ending the session and its lock) and lost.
func (l *leadership) watch() {
	defer close(l.lost)
	t := time.NewTicker(pingInterval)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			l.close(5 * time.Second)
			return
		case <-t.C:
		}
		err := l.use(context.Background(), 2*time.Second, func(ctx context.Context, conn *pgx.Conn) error { return conn.Ping(ctx) })
		if err != nil {
			l.close(time.Second)
			return
		}
	}
}

// use runs fn on the leadership connection, alone, with ctx bounded by
// timeout (0: ctx as it is).
func (l *leadership) use(ctx context.Context, timeout time.Duration, fn func(context.Context, *pgx.Conn) error) error {
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	l.connMu.Lock()
	defer l.connMu.Unlock()
	return fn(ctx, l.conn)
}

// close closes the leadership connection, ending the session and its lock.
func (l *leadership) close(timeout time.Duration) {
	l.use(context.Background(), timeout, func(ctx context.Context, conn *pgx.Conn) error { return conn.Close(ctx) })
}

// Close waits for the batches already passed to Apply to commit, gives up
// the leadership and closes the connections.
func (p *Postgres) Close() error {
	if !p.q.close() {
		return nil
	}
	p.leadMu.Lock()
	p.leadStop = true
	if l := p.lead; l != nil {
		p.depose(l)
		<-l.lost
	}
	p.leadMu.Unlock()
	p.pool.Close()
	return nil
}

// CommitStats implements Instrumented.
func (p *Postgres) CommitStats() CommitStats { return p.q.stats() }

// ObserveCommits implements Instrumented.
func (p *Postgres) ObserveCommits(fn func(time.Duration)) { p.q.observe.Store(&fn) }
