package server

import (
	"context"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/gantry-build/gantry/internal/config"
	"github.com/gantry-build/gantry/internal/statestore"
)

// openStateStore opens the configured scheduler state store.
func openStateStore(ctx context.Context, cfg config.Config, log *slog.Logger) (statestore.Store, error) {
	switch cfg.Scheduler.Store.Backend {
	case "memory":
		return statestore.NewMemory(), nil
	case "postgres":
		p, err := statestore.OpenPostgresWaiting(ctx, cfg.Scheduler.Store.DSN, statestore.PostgresOptions{CommitsInFlight: cfg.Scheduler.Store.CommitsInFlight}, cfg.Scheduler.Store.StartWait.D(), 30*time.Second, log)
		if err != nil {
			return nil, err
		}
		return p, nil
	default:
		e, err := statestore.OpenEmbedded(filepath.Join(cfg.DataDir, "scheduler", "state"))
		if err != nil {
			return nil, err
		}
		return e, nil
	}
}
