package server

import (
	"log/slog"
	"os"

	"github.com/gantry-build/gantry/internal/config"
	"github.com/gantry-build/gantry/internal/scheduler"
)

// Logs of what a restart does to running actions: at start, what was
// restored and which leases wait for their workers; at a stop, which
// leases the stop loses. (The scheduler itself logs leases it requeues.)

// logRestored logs the scheduler state restored from its store.
func logRestored(log *slog.Logger, sched scheduler.Snapshot) {
	st := sched.Stats()
	running := sched.Running()
	waiting, leases := 0, 0
	for _, wl := range running {
		leases += wl.Leases
		if wl.Restored {
			waiting++
		}
	}
	log.Info("scheduler state restored", "operations", st.Operations, "queued", st.Queued, "running", leases, "workers_to_return", waiting)
	for _, wl := range running {
		if !wl.Restored {
			continue
		}
		log.Info("restored leases wait for their worker: it keeps those it reports when it registers again, the rest are requeued at once (after the heartbeat timeout if it does not return)",
			"worker", wl.Worker, "leases", wl.Leases, "operations", wl.Operations)
	}
}

// logStopping logs, as the server stops, what runs and what becomes of
// it: the embedded worker (id embedded; "" for none) stops its actions,
// so its leases are requeued when the server starts again; standalone
// workers keep theirs if they report them to the next scheduler.
func logStopping(log *slog.Logger, sched scheduler.Snapshot, embedded string) {
	st := sched.Stats()
	var own, other scheduler.WorkerLeases
	workers := 0
	for _, wl := range sched.Running() {
		if wl.Worker == embedded {
			own = wl
			continue
		}
		workers++
		other.Leases += wl.Leases
		other.Operations = append(other.Operations, wl.Operations...)
	}
	log.Info("gantry stopping", "queued", st.Queued, "running", own.Leases+other.Leases, "running_embedded", own.Leases, "running_standalone", other.Leases)
	if own.Leases > 0 {
		log.Warn("the embedded worker's actions stop now; their leases are requeued when the server starts again",
			"worker", embedded, "leases", own.Leases, "operations", own.Operations)
	}
	if other.Leases > 0 {
		log.Info("standalone workers go on running their actions; the restarted scheduler keeps the leases they report and requeues the rest",
			"workers", workers, "leases", other.Leases, "operations", other.Operations)
	}
}

// embeddedWorkerID is the id of the embedded worker cfg configures.
func embeddedWorkerID(cfg config.Config) string {
	if cfg.Worker.ID != "" {
		return cfg.Worker.ID
	}
	host, _ := os.Hostname()
	return host + "-embedded"
}
