package statestore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gantry-build/gantry/internal/statestore/pgtest"
)

func openPostgres(t *testing.T, dsn string) *Postgres {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := OpenPostgres(ctx, dsn)
	if err != nil {
		t.Fatalf("OpenPostgres: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestPostgres(t *testing.T) {
	server := pgtest.Start(t)
	t.Run("Conformance", func(t *testing.T) {
		runConformance(t, func(t *testing.T) func() Store {
			dsn := pgtest.CreateDatabase(t, server)
			return func() Store {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				s, err := OpenPostgres(ctx, dsn)
				if err != nil {
					t.Fatalf("OpenPostgres: %v", err)
				}
				return s
			}
		})
	})

	t.Run("SchemaVersion", func(t *testing.T) {
		dsn := pgtest.CreateDatabase(t, server)
		s := openPostgres(t, dsn)
		s.Close()
		ctx := context.Background()
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		var v int
		if err := conn.QueryRow(ctx, `SELECT version FROM gantry_schema`).Scan(&v); err != nil || v != schemaVersion {
			t.Fatalf("schema version %d, %v; want %d", v, err, schemaVersion)
		}
		if _, err := conn.Exec(ctx, `UPDATE gantry_schema SET version = 99`); err != nil {
			t.Fatal(err)
		}
		if s, err := OpenPostgres(ctx, dsn); err == nil {
			s.Close()
			t.Fatal("OpenPostgres accepted a newer schema")
		}
	})

	t.Run("Leadership", func(t *testing.T) {
		dsn := pgtest.CreateDatabase(t, server)
		ctx := context.Background()
		a, b := openPostgres(t, dsn), openPostgres(t, dsn)
		lostA, err := a.TryLead(ctx)
		if err != nil {
			t.Fatalf("first TryLead: %v", err)
		}
		if again, err := a.TryLead(ctx); err != nil || again != lostA {
			t.Fatalf("TryLead while leading = %v, %v; want the same channel", again, err)
		}
		if _, err := b.TryLead(ctx); !errors.Is(err, ErrNotLeader) {
			t.Fatalf("second store's TryLead = %v, want ErrNotLeader", err)
		}
		select {
		case <-lostA:
			t.Fatal("leadership lost without cause")
		case <-time.After(3 * pingInterval):
		}
		a.Close()
		select {
		case <-lostA:
		case <-time.After(5 * time.Second):
			t.Fatal("lost not closed by Close")
		}
		lostB := leadWithin(t, b, 5*time.Second)

		// The leader's session dies (a network cut, a server restart, an
		// administrator): lost closes, and leadership can be taken again.
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		var n int
		if err := conn.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_locks
			WHERE locktype = 'advisory' AND granted AND objsubid = 1
			AND (classid::bigint << 32 | objid::bigint) = $1`, int64(leaderLockKey)).Scan(&n); err != nil || n != 1 {
			t.Fatalf("terminating the leader's session: %d sessions, %v", n, err)
		}
		select {
		case <-lostB:
		case <-time.After(5 * time.Second):
			t.Fatal("lost not closed when the leader's connection died")
		}
		c := openPostgres(t, dsn)
		leadWithin(t, c, 5*time.Second)
		if _, err := b.TryLead(ctx); !errors.Is(err, ErrNotLeader) {
			t.Fatalf("TryLead of the deposed leader = %v, want ErrNotLeader", err)
		}
	})
}

func leadWithin(t *testing.T, s *Postgres, d time.Duration) <-chan struct{} {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		lost, err := s.TryLead(context.Background())
		if err == nil {
			return lost
		}
		if !errors.Is(err, ErrNotLeader) || time.Now().After(deadline) {
			t.Fatalf("TryLead: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
