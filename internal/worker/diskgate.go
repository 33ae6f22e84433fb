package worker

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"
)

// diskGate holds the Match stage while the work directory's file system
// has less free space than worker.min_free_disk: an action taken then
// would be killed by the disk guard as soon as it wrote, and the next try
// of it would most likely land on this same idle worker again. The worker
// asks for no work until the space comes back (a cache evicted, a file
// deleted); other workers take the queue meanwhile.
type diskGate struct {
	dir   string
	min   int64 // 0: no gate
	every time.Duration
	log   *slog.Logger
	low   atomic.Bool // the stage is held now
}

func newDiskGate(dir string, min int64, every time.Duration, log *slog.Logger) *diskGate {
	return &diskGate{dir: dir, min: min, every: every, log: log}
}

// wait returns once the free space is at least the reserve (at once if it
// is, or if it cannot be read: the disk guard warns of that), or with
// ctx's error.
func (g *diskGate) wait(ctx context.Context) error {
	if g.min <= 0 {
		return nil
	}
	free, err := freeBytes(g.dir)
	if err != nil || free >= g.min {
		return nil
	}
	g.low.Store(true)
	defer g.low.Store(false)
	since := time.Now()
	g.log.Warn("the work directory's file system is below worker.min_free_disk: this worker asks for no work until space comes back; free some space (or lower worker.min_free_disk)",
		"work_dir", g.dir, "free", formatBytes(free), "min_free_disk", formatBytes(g.min))
	t := time.NewTicker(g.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		free, err := freeBytes(g.dir)
		if err != nil || free >= g.min {
			g.log.Info("free disk space is back above worker.min_free_disk: taking work again",
				"free", formatBytes(free), "held_for", time.Since(since).Round(time.Millisecond))
			return nil
		}
	}
}

// holding reports whether the gate is holding the Match stage now (never
// for a worker without one).
func (g *diskGate) holding() bool { return g != nil && g.low.Load() }
