package server

import (
	"fmt"

	"github.com/gantry-build/gantry/internal/config"
	"github.com/gantry-build/gantry/internal/dirlock"
)

// lockDataDir takes the data directory for this process, whatever its
// stores are: even with every store in memory the directory holds the
// embedded worker's files and the worker controls. It runs before any
// store is opened, so a second process is refused before it can delete
// the first one's uploads in progress or write into its logs.
func lockDataDir(cfg config.Config) (*dirlock.Lock, error) {
	l, err := dirlock.Acquire(cfg.DataDir, "gantry serve --role "+cfg.Role)
	if err != nil {
		return nil, fmt.Errorf("data_dir: %w", err)
	}
	return l, nil
}
