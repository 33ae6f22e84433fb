package main

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/gantry-build/gantry/internal/worker"
)

// workerStopContext is the context gantry worker runs under: it ends at
// SIGTERM or Ctrl-C, which stops the running actions (the scheduler
// requeues them). With grace (worker.stop_grace) the first signal drains
// w instead, so that a worker scaled down or rolled finishes its
// actions, and the context ends only when grace has passed or at a
// second signal. stop releases the signals.
func workerStopContext(w *worker.Worker, grace time.Duration, log *slog.Logger) (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		defer cancel()
		select {
		case <-sigs:
		case <-done:
			return
		}
		if grace <= 0 {
			return
		}
		w.Drain()
		log.Info("stop signal: draining the worker before it exits; a second signal stops the running actions now", "stop_grace", grace)
		t := time.NewTimer(grace)
		defer t.Stop()
		select {
		case <-sigs:
			log.Warn("second stop signal: stopping the running actions; the scheduler runs them again elsewhere")
		case <-t.C:
			log.Warn("worker.stop_grace ran out: stopping the running actions; the scheduler runs them again elsewhere", "stop_grace", grace)
		case <-done:
		}
	}()
	return ctx, func() { signal.Stop(sigs); close(done); cancel() }
}
