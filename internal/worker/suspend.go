package worker

import "context"

// Pre-emption by suspension (the scheduler's scheduler.preemption:
// suspend). SUSPEND stops every process of a running action (SIGSTOP; its
// timeout stops too, see runner.Process.Suspend) and lends its execute
// cores to the work it was pre-empted for: they go back to the Execute
// stage, so an action this worker holds behind it can start. The action
// keeps its exec root, its output so far and its memory. RESUME takes the
// cores back (waiting for them if another action holds them), then
// continues its processes (SIGCONT). The worker keeps reporting the
// lease in its heartbeats meanwhile, so it does not time out.

// suspendState is a lease's part in that, guarded by Worker.mu.
type suspendState struct {
	// ctx is the lease's context, cores the execute cores it takes.
	ctx   context.Context
	cores int64
	// held: the lease holds its cores of Worker.exec; done: its action
	// ended and takes none again.
	held, done bool
	// stopped: the scheduler suspended it; resuming: a RESUME waits for
	// its cores.
	stopped, resuming bool
}

// releaseExec lets go of l's execute cores for good (its action ended).
func (w *Worker) releaseExec(l *activeLease) {
	w.mu.Lock()
	held, cores := l.susp.held, l.susp.cores
	l.susp.held, l.susp.done = false, true
	if held {
		w.freeCPU += int(cores)
	}
	w.mu.Unlock()
	if held {
		w.exec.Release(cores)
	}
}

// suspendLease stops l's action and lends its cores. An action not yet
// started is stopped as soon as it starts (Worker.started).
func (w *Worker) suspendLease(l *activeLease, reason string) {
	w.mu.Lock()
	if l.susp.stopped || l.susp.done {
		w.mu.Unlock()
		return
	}
	l.susp.stopped = true
	proc, lend, cores := l.proc, l.susp.held, l.susp.cores
	l.susp.held = false
	if lend {
		w.freeCPU += int(cores)
	}
	w.mu.Unlock()
	// Stop it before its cores go to another action.
	if proc != nil {
		if err := proc.Suspend(); err != nil {
			w.log.Warn("suspending an action failed", "lease", l.id, "err", err)
		}
	}
	if lend {
		w.exec.Release(cores)
	}
	w.log.Info("action suspended for pre-emption; its cores are lent", "lease", l.id, "cores", cores, "reason", reason)
}

// resumeLease continues l's action once it has its cores back. While the
// worker is paused, the process stays stopped until the pause ends.
func (w *Worker) resumeLease(l *activeLease) {
	w.mu.Lock()
	if !l.susp.stopped || l.susp.resuming {
		w.mu.Unlock()
		return
	}
	if l.susp.held || l.susp.done || l.susp.ctx == nil {
		// It lent nothing (it was stopped before it took its cores, or
		// it has ended).
		l.susp.stopped = false
		proc := w.toContinueLocked(l)
		w.mu.Unlock()
		w.continueProc(l, proc)
		return
	}
	l.susp.resuming = true
	ctx, cores := l.susp.ctx, l.susp.cores
	w.mu.Unlock()
	go func() {
		// Ends with the lease: a cancelled action is killed stopped.
		err := w.exec.Acquire(ctx, cores)
		w.mu.Lock()
		l.susp.resuming = false
		if err != nil {
			w.mu.Unlock()
			return
		}
		if l.susp.done {
			w.mu.Unlock()
			w.exec.Release(cores)
			return
		}
		l.susp.held, l.susp.stopped = true, false
		w.freeCPU -= int(cores)
		proc := w.toContinueLocked(l)
		w.mu.Unlock()
		w.continueProc(l, proc)
		w.log.Info("action resumed after pre-emption", "lease", l.id, "cores", cores)
	}()
}

// toContinueLocked returns l's process to continue: none while the
// worker is paused (the end of the pause continues it).
func (w *Worker) toContinueLocked(l *activeLease) processControl {
	if w.paused {
		return nil
	}
	return l.proc
}

// continueProc sends SIGCONT to a suspended action's processes.
func (w *Worker) continueProc(l *activeLease, proc processControl) {
	if proc == nil {
		return
	}
	if err := proc.Resume(); err != nil {
		w.log.Warn("resuming an action failed", "lease", l.id, "err", err)
	}
}
