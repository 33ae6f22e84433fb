package server

import (
	"context"
	"path/filepath"

	"github.com/gantry-build/gantry/internal/config"
	"github.com/gantry-build/gantry/internal/statestore"
)

// openStateStore opens the configured scheduler state store.
func openStateStore(ctx context.Context, cfg config.Config) (statestore.Store, error) {
	switch cfg.Scheduler.Store.Backend {
	case "memory":
		return statestore.NewMemory(), nil
	case "postgres":
		p, err := statestore.OpenPostgres(ctx, cfg.Scheduler.Store.DSN)
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
