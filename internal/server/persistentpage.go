package server

import (
	"net/http"

	"github.com/gantry-build/gantry/internal/worker"
	"github.com/gantry-build/gantry/internal/worker/persistent"
)

// handlePersistentWorkers serves /status/persistent-workers: the
// persistent worker pool of the worker embedded in this process, by
// persistentWorkerKey (processes, warm hits, cold starts, restarts,
// evictions, time saved), as a standalone worker's HTTP port serves its
// own. Without an embedded worker it says where to look instead.
func handlePersistentWorkers(mux *http.ServeMux, embedded func() *worker.Worker) {
	mux.HandleFunc("/status/persistent-workers", func(w http.ResponseWriter, _ *http.Request) {
		wk := embedded()
		if wk == nil {
			http.Error(w, "no worker runs in this process (worker.enabled is off, or it has not started); each standalone worker serves its own pool at /status/persistent-workers on its --http-listen port", http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		persistent.WriteStats(w, wk.PersistentStats())
	})
}
