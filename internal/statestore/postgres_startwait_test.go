package statestore

import (
	"context"
	"io"
	"log/slog"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/gantry-build/gantry/internal/statestore/pgtest"
)

// TestOpenPostgresWaitsForTheDatabase: a process that starts while
// PostgreSQL is down (both restarting after an outage) waits for it, up
// to the start wait, instead of exiting; past the wait it gives up with
// the connection's error; an answer that waiting cannot change (here a
// database that does not exist) fails at once.
func TestOpenPostgresWaitsForTheDatabase(t *testing.T) {
	s := pgtest.StartServer(t)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx := context.Background()

	u, err := url.Parse(s.DSN)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/no_such_database"
	start := time.Now()
	if _, err := OpenPostgresWaiting(ctx, u.String(), PostgresOptions{}, time.Minute, 10*time.Second, quiet); err == nil || !strings.Contains(err.Error(), "no_such_database") {
		t.Fatalf("OpenPostgresWaiting of a missing database: %v, want its error", err)
	}
	if waited := time.Since(start); waited > 20*time.Second {
		t.Fatalf("OpenPostgresWaiting of a missing database waited %s; it cannot come by waiting", waited)
	}

	s.Stop(true)
	if _, err := OpenPostgresWaiting(ctx, s.DSN, PostgresOptions{}, 500*time.Millisecond, 5*time.Second, quiet); err == nil || !Unreachable(err) {
		t.Fatalf("OpenPostgresWaiting with the server down past the wait: %v, want the connection's error", err)
	}

	type result struct {
		p   *Postgres
		err error
	}
	done := make(chan result, 1)
	go func() {
		p, err := OpenPostgresWaiting(ctx, s.DSN, PostgresOptions{}, time.Minute, 5*time.Second, quiet)
		done <- result{p, err}
	}()
	select {
	case r := <-done:
		t.Fatalf("OpenPostgresWaiting returned while the server was down: %v", r.err)
	case <-time.After(time.Second):
	}
	s.Restart()
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatalf("OpenPostgresWaiting after the server came back: %v", r.err)
		}
		r.p.Close()
	case <-time.After(30 * time.Second):
		t.Fatal("OpenPostgresWaiting still waiting 30s after the server came back")
	}
}
