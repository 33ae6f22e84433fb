package loadgen

import (
	"context"
	"fmt"
	"io"
	"os/exec"
	"sync"
	"sync/atomic"
	"time"
)

// SpawnProgram and spawnParallel are the spawn-rate baseline of issue 23:
// the rate at which this machine starts and reaps a trivial program, a
// few at a time, which bounds any executor of trivial actions here. It
// varies several-fold between machines of the same kind, so an action
// rate means something only as a ratio to it, measured in the same run.
const (
	SpawnProgram  = "/bin/true"
	spawnParallel = 4
)

// spawnRate runs program parallel at a time for d and returns the
// completed runs per second.
func spawnRate(ctx context.Context, program string, parallel int, d time.Duration) (float64, error) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var (
		done     atomic.Int64
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
	)
	start := time.Now()
	for range parallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				if err := exec.Command(program).Run(); err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					cancel()
					return
				}
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return 0, fmt.Errorf("running %s for the spawn-rate baseline: %w", program, firstErr)
	}
	return float64(done.Load()) / time.Since(start).Seconds(), nil
}

// spawnBaseline is the spawn rate measured before and after a run.
type spawnBaseline struct {
	before, after float64
}

// mean is the baseline the run is compared with.
func (s spawnBaseline) mean() float64 { return (s.before + s.after) / 2 }

// report prints the baseline and the run's rate as a ratio to it, and a
// machine-readable SPAWN line.
func (s spawnBaseline) report(w io.Writer, rate float64) {
	ratio := 0.0
	if s.mean() > 0 {
		ratio = rate / s.mean()
	}
	fmt.Fprintf(w, "spawn rate: %.1f/s before, %.1f/s after (%s, %d at a time); the run's rate is %.2fx their mean\n",
		s.before, s.after, SpawnProgram, spawnParallel, ratio)
	fmt.Fprintf(w, "SPAWN before=%.2f after=%.2f mean=%.2f ratio=%.3f\n", s.before, s.after, s.mean(), ratio)
}
