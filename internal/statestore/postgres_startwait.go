package statestore

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// OpenPostgresWaiting is OpenPostgresWith, tried again while the database is
// unreachable (a server restarting along with this process) for up to
// wait, each failure logged with how long it goes on waiting. Errors that
// waiting cannot cure (a bad DSN, refused credentials, a missing database,
// a newer schema) are returned at once. Each try is bounded by tryTimeout.
func OpenPostgresWaiting(ctx context.Context, dsn string, opts PostgresOptions, wait, tryTimeout time.Duration, log *slog.Logger) (*Postgres, error) {
	deadline := time.Now().Add(wait)
	pause := 250 * time.Millisecond
	for {
		tctx, cancel := context.WithTimeout(ctx, tryTimeout)
		p, err := OpenPostgresWith(tctx, dsn, opts)
		cancel()
		if err == nil || !Unreachable(err) || time.Now().Add(pause).After(deadline) {
			return p, err
		}
		log.Warn("PostgreSQL unreachable at start; waiting for it", "err", err, "retry_in", pause, "gives_up_in", time.Until(deadline).Round(time.Second))
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(pause):
		}
		pause = min(2*pause, 4*time.Second)
	}
}

// Unreachable reports whether err is a failure to reach PostgreSQL at all
// (no connection, a timeout, a server still starting or shutting down)
// rather than an answer that waiting would not change.
func Unreachable(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "57P01", "57P02", "57P03": // admin_shutdown, crash_shutdown, cannot_connect_now
			return true
		}
		return false
	}
	var connErr *pgconn.ConnectError
	if errors.As(err, &connErr) {
		return true
	}
	return pgconn.Timeout(err) || errors.Is(err, context.DeadlineExceeded)
}
