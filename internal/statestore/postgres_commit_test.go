package statestore

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gantry-build/gantry/internal/statestore/pgtest"
)

// The overlapping commits (postgres_commit.go): a later group is neither
// durable nor acknowledged before an earlier one, two groups writing one
// record apply in order, a connection killed mid-flight loses nothing
// acknowledged, and the groups queued meanwhile fold into one commit.
func TestPostgresOverlap(t *testing.T) {
	server := pgtest.Start(t)
	ctx := context.Background()

	t.Run("LaterWaitsForEarlier", func(t *testing.T) {
		dsn := pgtest.CreateDatabase(t, server)
		s := openPostgresWith(t, dsn, PostgresOptions{CommitsInFlight: 2})
		apply(t, s, put("k", "x", "0"), put("k", "b", "0"))
		blocker := lockRecord(t, dsn, "k", "x")
		waitA := enqueue(t, s, put("k", "x", "1"))
		waitForLockWait(t, dsn)
		waitB := enqueue(t, s, put("k", "b", "1"))
		doneB := waitAsync(waitB)
		select {
		case err := <-doneB:
			t.Fatalf("the later group was answered (%v) while the earlier one is blocked", err)
		case <-time.After(300 * time.Millisecond):
		}
		if got := readValue(t, dsn, "k", "b"); got != "0" {
			t.Fatalf("the later group's write is visible (%q) while the earlier one is not committed", got)
		}
		if s.pipe.chained.Load() == 0 {
			t.Fatal("the later group was not sent while the earlier one was in flight: nothing overlapped")
		}
		if _, err := blocker.Exec(ctx, `COMMIT`); err != nil {
			t.Fatal(err)
		}
		if err := waitA(ctx); err != nil {
			t.Fatalf("earlier group: %v", err)
		}
		if err := <-doneB; err != nil {
			t.Fatalf("later group: %v", err)
		}
		wantRecords(t, s, "k", record{"b", "1"}, record{"x", "1"})
	})

	// As a leader, a later group checks the term only once the earlier
	// one has ended, in its COMMIT's round trip.
	t.Run("LaterWaitsForEarlierAsLeader", func(t *testing.T) {
		dsn := pgtest.CreateDatabase(t, server)
		s := openPostgresWith(t, dsn, PostgresOptions{CommitsInFlight: 2})
		if _, _, err := s.Lead(ctx, "a:1"); err != nil {
			t.Fatalf("Lead: %v", err)
		}
		apply(t, s, put("k", "x", "0"))
		blocker := lockRecord(t, dsn, "k", "x")
		waitA := enqueue(t, s, put("k", "x", "1"))
		waitForLockWait(t, dsn)
		waitB := enqueue(t, s, put("k", "b", "1"))
		deadline := time.Now().Add(5 * time.Second)
		for s.pipe.chained.Load() == 0 {
			if time.Now().After(deadline) {
				t.Fatal("the later group was not sent while the earlier one was in flight")
			}
			time.Sleep(5 * time.Millisecond)
		}
		if _, err := blocker.Exec(ctx, `COMMIT`); err != nil {
			t.Fatal(err)
		}
		if err := waitA(ctx); err != nil {
			t.Fatalf("earlier group: %v", err)
		}
		if err := waitB(ctx); err != nil {
			t.Fatalf("later group: %v", err)
		}
		wantRecords(t, s, "k", record{"b", "1"}, record{"x", "1"})
	})

	t.Run("SameKeyInOrder", func(t *testing.T) {
		dsn := pgtest.CreateDatabase(t, server)
		s := openPostgresWith(t, dsn, PostgresOptions{CommitsInFlight: 2})
		apply(t, s, put("k", "x", "0"))
		blocker := lockRecord(t, dsn, "k", "x")
		// The earlier group creates n (and waits on x's lock); the later
		// one deletes n: sent at once, its DELETE would not see n.
		waitA := enqueue(t, s, put("k", "x", "1"), put("k", "n", "1"))
		waitForLockWait(t, dsn)
		waitB := enqueue(t, s, del("k", "n"))
		deadline := time.Now().Add(5 * time.Second)
		for s.pipe.heldBack.Load() == 0 {
			if time.Now().After(deadline) {
				t.Fatal("the group deleting a record of an in-flight group was not held back")
			}
			time.Sleep(5 * time.Millisecond)
		}
		// Time for the later group's DELETE to run, had it been sent
		// (on a new connection of the pool).
		time.Sleep(300 * time.Millisecond)
		if _, err := blocker.Exec(ctx, `COMMIT`); err != nil {
			t.Fatal(err)
		}
		if err := waitA(ctx); err != nil {
			t.Fatalf("earlier group: %v", err)
		}
		if err := waitB(ctx); err != nil {
			t.Fatalf("later group: %v", err)
		}
		wantRecords(t, s, "k", record{"x", "1"})
	})

	t.Run("QueuedGroupsFold", func(t *testing.T) {
		dsn := pgtest.CreateDatabase(t, server)
		s := openPostgresWith(t, dsn, PostgresOptions{CommitsInFlight: 1})
		apply(t, s, put("k", "x", "0"), put("k", "old", "0"))
		blocker := lockRecord(t, dsn, "k", "x")
		waitA := enqueue(t, s, put("k", "x", "1"))
		waitForLockWait(t, dsn)
		// Queued behind A, these go in one commit: a record created and
		// deleted, one deleted and created again, one overwritten.
		waits := []func(context.Context) error{
			enqueue(t, s, put("k", "n", "1")),
			enqueue(t, s, del("k", "old")),
			enqueue(t, s, put("k", "m", "1"), del("k", "n")),
			enqueue(t, s, put("k", "old", "2"), put("k", "m", "2")),
		}
		before := s.Commits()
		if _, err := blocker.Exec(ctx, `COMMIT`); err != nil {
			t.Fatal(err)
		}
		if err := waitA(ctx); err != nil {
			t.Fatal(err)
		}
		for i, w := range waits {
			if err := w(ctx); err != nil {
				t.Fatalf("batch %d: %v", i, err)
			}
		}
		if n := s.Commits() - before; n != 2 {
			t.Fatalf("%d commits for the blocked group and the four queued behind it, want 2", n)
		}
		wantRecords(t, s, "k", record{"m", "2"}, record{"old", "2"}, record{"x", "1"})
	})

	// Statements are planned with their arguments: a generic plan made
	// while the table was small scanned all of it in each delete.
	t.Run("CustomPlans", func(t *testing.T) {
		dsn := pgtest.CreateDatabase(t, server)
		for _, c := range []struct{ dsn, want string }{
			{dsn, "force_custom_plan"},
			{dsn + "&plan_cache_mode=auto", "auto"}, // the address's own choice stands
		} {
			s := openPostgres(t, c.dsn)
			var mode string
			if err := s.pool.QueryRow(ctx, `SHOW plan_cache_mode`).Scan(&mode); err != nil {
				t.Fatal(err)
			}
			if mode != c.want {
				t.Errorf("plan_cache_mode %q, want %q", mode, c.want)
			}
		}
	})

	t.Run("KillConnections", func(t *testing.T) {
		dsn := pgtest.CreateDatabase(t, server)
		s := openPostgresWith(t, dsn, PostgresOptions{CommitsInFlight: 3})
		admin, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer admin.Close(ctx)

		stop := make(chan struct{})
		var acked sync.Map // key -> true, acknowledged
		var appliers sync.WaitGroup
		for g := range 6 {
			appliers.Add(1)
			go func() {
				defer appliers.Done()
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					k := fmt.Sprintf("%d-%05d", g, i)
					if s.Apply(ctx, []Mutation{put("acked", k, k)}) == nil {
						acked.Store(k, true)
					}
				}
			}()
		}
		// One caller pipelines a chain: a batch may be missing only if
		// its commit failed, and every batch acknowledged is stored.
		var chain []func(context.Context) error
		var chainErrs []error
		var piper sync.WaitGroup
		piper.Add(1)
		go func() {
			defer piper.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				w, err := s.Enqueue(ctx, []Mutation{put("chain", fmt.Sprintf("%06d", i), "v")})
				if err != nil {
					t.Errorf("Enqueue: %v", err)
					return
				}
				chain = append(chain, w)
				if len(chain) > 8 {
					chainErrs = append(chainErrs, chain[len(chainErrs)](ctx))
				}
			}
		}()

		kills := 0
		for range 15 {
			time.Sleep(40 * time.Millisecond)
			var n int
			if err := admin.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
				WHERE datname = current_database() AND pid <> pg_backend_pid()`).Scan(&n); err != nil {
				t.Fatal(err)
			}
			kills += n
		}
		close(stop)
		appliers.Wait()
		piper.Wait()
		for _, w := range chain[len(chainErrs):] {
			chainErrs = append(chainErrs, w(ctx))
		}
		failed := 0
		for _, err := range chainErrs {
			if err != nil {
				failed++
			}
		}
		if kills == 0 {
			t.Fatal("no connection was killed")
		}
		// Read back as a restarted process would (the store's own pooled
		// connections may still include killed ones).
		s.Close()
		s = openPostgres(t, dsn)
		n := 0
		stored := map[string]bool{}
		for _, r := range load(t, s, "acked") {
			stored[r.key] = true
		}
		acked.Range(func(k, _ any) bool {
			n++
			if !stored[k.(string)] {
				t.Errorf("acknowledged record %s is not stored", k)
			}
			return true
		})
		chainStored := load(t, s, "chain")
		inChain := map[string]bool{}
		for _, r := range chainStored {
			inChain[r.key] = true
		}
		for i, err := range chainErrs {
			if k := fmt.Sprintf("%06d", i); !inChain[k] && err == nil {
				t.Errorf("the chain's batch %s was acknowledged but is not stored", k)
			}
		}
		t.Logf("%d connections killed; %d records acknowledged; chain: %d stored of %d, %d failed", kills, n, len(chainStored), len(chain), failed)
		if n == 0 || len(chainStored) == 0 {
			t.Fatal("nothing was acknowledged: the store did not recover from the killed connections")
		}
	})
}

func openPostgresWith(t *testing.T, dsn string, opts PostgresOptions) *Postgres {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := OpenPostgresWith(ctx, dsn, opts)
	if err != nil {
		t.Fatalf("OpenPostgresWith: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func enqueue(t *testing.T, s Pipeliner, batch ...Mutation) func(context.Context) error {
	t.Helper()
	w, err := s.Enqueue(context.Background(), batch)
	if err != nil {
		t.Fatalf("Enqueue: %v", err)
	}
	return w
}

func waitAsync(wait func(context.Context) error) <-chan error {
	c := make(chan error, 1)
	go func() { c <- wait(context.Background()) }()
	return c
}

// lockRecord locks the row of (kind, key) in a transaction of its own
// connection, left open: the store's writes to it wait until it ends.
func lockRecord(t *testing.T, dsn, kind, key string) *pgx.Conn {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(ctx) })
	if _, err := conn.Exec(ctx, `BEGIN`); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `SELECT 1 FROM gantry_state WHERE kind = $1 AND key = $2 FOR UPDATE`, kind, key); err != nil {
		t.Fatal(err)
	}
	return conn
}

// waitForLockWait waits until a session of the database waits for a lock.
func waitForLockWait(t *testing.T, dsn string) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	deadline := time.Now().Add(5 * time.Second)
	for {
		var n int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no commit waits for the locked record")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// readValue reads (kind, key) as another session sees it ("" if absent).
func readValue(t *testing.T, dsn, kind, key string) string {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var v []byte
	err = conn.QueryRow(ctx, `SELECT value FROM gantry_state WHERE kind = $1 AND key = $2`, kind, key).Scan(&v)
	if err == pgx.ErrNoRows {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(v)
}
