package loadgen

import (
	"context"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// runLoad runs actions with plan.Concurrency workers until plan.Actions
// have run, plan.Duration has passed, or ctx ends. Actions cut short by
// ctx's end are not counted. It reports progress on errOut as prog says.
func runLoad(ctx context.Context, plan *Plan, run actionFunc, prog progress, errOut io.Writer) *benchStats {
	// A fatal error (e.g. the server lacks the Execution service) would
	// fail every other action the same way: it ends the run.
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	rec := &recorder{errOut: errOut}
	start := time.Now()
	var deadline time.Time
	if plan.Duration > 0 {
		deadline = start.Add(plan.Duration)
	}
	var next, inFlight atomic.Int64
	var wg sync.WaitGroup
	for range plan.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				if !deadline.IsZero() && !time.Now().Before(deadline) {
					return
				}
				i := next.Add(1) - 1
				if plan.Actions > 0 && i >= int64(plan.Actions) {
					return
				}
				inFlight.Add(1)
				latency, cached, err := run(ctx, int(i))
				inFlight.Add(-1)
				if err != nil && ctx.Err() != nil {
					rec.cancelled.Add(1)
					continue
				}
				rec.add(latency, cached, err)
				if fatal(err) {
					stop()
				}
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	every := prog.every
	if every <= 0 {
		every = progressEvery
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-done:
			s := rec.stats(time.Since(start))
			s.concurrency = plan.Concurrency
			return s
		case <-tick.C:
			ok, failed := rec.counts()
			line := fmt.Sprintf("bench: %s: %d ok, %d failed, %d in flight", time.Since(start).Round(time.Second), ok, failed, inFlight.Load())
			if ok+failed == 0 {
				note := "nothing has completed yet"
				if prog.stalled != nil {
					note = prog.stalled(ctx)
				}
				line += " (" + note + ")"
			}
			fmt.Fprintln(errOut, line)
		}
	}
}

// progress is how runLoad reports progress.
type progress struct {
	// every is the interval of the progress lines (0: progressEvery).
	every time.Duration
	// stalled says why no action has completed yet (nil: nothing more).
	stalled func(context.Context) string
}

// fatal reports whether err will recur for every action.
func fatal(err error) bool {
	switch status.Code(err) {
	case codes.Unimplemented, codes.Unauthenticated, codes.PermissionDenied:
		return true
	}
	return false
}

// recorder collects the outcomes of actions from many goroutines.
type recorder struct {
	errOut    io.Writer
	cancelled atomic.Int64

	mu        sync.Mutex
	latencies []time.Duration // of successful actions
	failed    int
	cached    int
	firstErr  error
}

func (r *recorder) add(latency time.Duration, cached bool, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.failed++
		if r.firstErr == nil {
			r.firstErr = err
			fmt.Fprintf(r.errOut, "bench: first failure: %v\n", err)
		}
		return
	}
	r.latencies = append(r.latencies, latency)
	if cached {
		r.cached++
	}
}

func (r *recorder) counts() (ok, failed int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.latencies), r.failed
}

func (r *recorder) stats(elapsed time.Duration) *benchStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	return &benchStats{
		ok:        len(r.latencies),
		failed:    r.failed,
		cached:    r.cached,
		cancelled: int(r.cancelled.Load()),
		firstErr:  r.firstErr,
		elapsed:   elapsed,
		latency:   summarize(r.latencies),
	}
}
