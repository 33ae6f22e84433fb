package worker

import "context"

// Drain makes the worker take no more work: Run returns once the running
// actions are done and reported, as it does for the scheduler's
// terminate control. gantry worker drains on SIGTERM for
// worker.stop_grace, so that a worker scaled down finishes its actions
// instead of having them start over elsewhere.
//
// A Poll in flight is let end rather than cancelled: the scheduler may
// have leased an action to it already, which a cancelled call would drop
// (the action would then be retried elsewhere, an attempt spent). The
// worker runs what that Poll brings and polls no more, so an idle worker
// exits at most one poll's wait (Config.PollWait, 20s) after the signal.
func (w *Worker) Drain() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.terminating {
		return
	}
	w.terminating = true
	w.log.Info("worker draining: taking no more work, exiting once the running actions are done", "running", len(w.leases), "poll_in_flight", w.polling)
	if !w.polling && w.stopPolling != nil {
		// Nothing is asked of the scheduler: end the waits for a fetch
		// slot or disk space at once.
		w.stopPolling()
	}
	if w.stopRegistering != nil {
		// Still registering (the scheduler unreachable): nothing runs.
		w.stopRegistering()
	}
}

// registerUnlessDrained is Run's first registration, which a drain ends:
// a worker stopped before it reached the scheduler holds no work. It
// returns nil when drained.
func (w *Worker) registerUnlessDrained(ctx context.Context) error {
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w.mu.Lock()
	if w.terminating {
		w.mu.Unlock()
		return nil
	}
	w.stopRegistering = cancel
	w.mu.Unlock()
	err := w.register(rctx)
	w.mu.Lock()
	w.stopRegistering = nil
	w.mu.Unlock()
	if err != nil && ctx.Err() == nil && w.draining() {
		return nil
	}
	return err
}

// draining reports whether the worker was asked to take no more work.
func (w *Worker) draining() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.terminating
}
