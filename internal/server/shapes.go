package server

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/gantry-build/gantry/internal/config"
	"github.com/gantry-build/gantry/internal/scheduler"
	"github.com/gantry-build/gantry/internal/statestore"
)

// loadShapes opens the duration history the scheduler keeps in state
// (nil when scheduler.durations.max_shapes is 0), and has closers write
// what it has not stored yet before state closes.
func loadShapes(ctx context.Context, cfg config.Config, state statestore.Store, closers *closers, log *slog.Logger) (*scheduler.ShapeHistory, error) {
	d := cfg.Scheduler.Durations
	if d.MaxShapes == 0 {
		return nil, nil
	}
	lctx, cancel := context.WithTimeout(ctx, historyLoadTimeout)
	defer cancel()
	h, err := scheduler.NewShapeHistory(lctx, state, scheduler.ShapeOptions{MaxShapes: d.MaxShapes, HalfLife: d.HalfLife.D()}, log)
	if err != nil {
		return nil, fmt.Errorf("loading the duration history (scheduler.durations): %w", err)
	}
	closers.push(func() {
		fctx, cancel := context.WithTimeout(context.Background(), shapesFlushTimeout)
		defer cancel()
		if err := h.Flush(fctx); err != nil {
			log.Warn("the last durations learned were not stored", "err", err)
		}
	})
	return h, nil
}

// shapesFlushTimeout bounds writing the duration history at a stop.
const shapesFlushTimeout = 10 * time.Second

// sizeClasses are the size classes of cfg (nil: none configured, or no
// duration history shapes to choose from).
func sizeClasses(cfg config.SizeClassesConfig, shapes *scheduler.ShapeHistory) (*scheduler.SizeClasses, error) {
	if len(cfg.Classes) == 0 || shapes == nil {
		return nil, nil
	}
	classes := make([]scheduler.SizeClass, len(cfg.Classes))
	for i, c := range cfg.Classes {
		classes[i] = scheduler.SizeClass{Name: c.Name, Cores: c.Cores, Memory: int64(c.Memory)}
	}
	sc, err := scheduler.NewSizeClasses(classes, scheduler.SizeClassOptions{MaxSlowdown: cfg.MaxSlowdown, Exploration: cfg.Exploration, LearnedResources: cfg.LearnedResources}, nil)
	if err != nil {
		return nil, fmt.Errorf("scheduler.size_classes: %w", err)
	}
	return sc, nil
}
