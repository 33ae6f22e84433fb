package worker

// control applies the scheduler's controls of the whole worker, sent as
// levels with every heartbeat response: pause suspends every running
// action (SIGSTOP, see runner.Process.Suspend) until a response without
// it; terminate stops polling, and Run returns once the running actions
// are done.
func (w *Worker) control(pause, terminate bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if pause != w.paused {
		w.paused = pause
		n := 0
		for _, l := range w.leases {
			if l.proc == nil || l.completing || l.susp.stopped {
				// Suspended for pre-emption: the scheduler resumes it.
				continue
			}
			var err error
			if pause {
				err = l.proc.Suspend()
			} else {
				err = l.proc.Resume()
			}
			if err != nil {
				w.log.Warn("pausing or resuming an action failed", "lease", l.id, "pause", pause, "err", err)
			}
			n++
		}
		if pause {
			w.log.Info("worker paused by the scheduler: running actions suspended", "actions", n)
		} else {
			w.log.Info("worker resumed by the scheduler: running actions continue", "actions", n)
		}
	}
	if terminate && !w.terminating && w.stopPolling != nil {
		w.terminating = true
		w.log.Info("worker asked to terminate: taking no more work, exiting once the running actions are done", "running", len(w.leases))
		w.stopPolling()
	}
}
