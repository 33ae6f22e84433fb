package server

import (
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/gantry-build/gantry/internal/worker"
)

// newHTTPServer builds the HTTP port of every role: /metrics (reg),
// /healthz (ok, then what health says, if anything), /debug/pprof/, and
// the status pages when pages is not nil (roles that run a scheduler),
// with TLS (on the listener, httpListener) and, with auth on, the
// credentials check applied (unless auth.http_require_token: false, which
// is logged as a warning), and then the browser login (/login, /logout).
// /status/persistent-workers shows the embedded worker's persistent
// worker pool (embedded returns it, nil while none runs here).
// The profiler needs admin, the rest status.
func newHTTPServer(reg *prometheus.Registry, health func() string, pages func() *statusPages, embedded func() *worker.Worker, sec *security, addr string, log *slog.Logger) *http.Server {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		if st := health(); st != "" {
			fmt.Fprintln(w, "ok", st)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	handlePprof(mux, sec.adminOnly)
	handlePersistentWorkers(mux, embedded)
	what := "/metrics, /debug/pprof/"
	if pages != nil {
		handleStatus(mux, pages)
		what = "the status pages with every operation's command, environment and outputs, any blob, and the buttons that kill operations, pause, drain and terminate workers and reload the configuration; " + what
	}
	sec.warnOpenHTTP(log, addr, what)
	// The HTTP server's own errors (TLS handshakes, bad requests) go to
	// the structured log, not the standard logger.
	return &http.Server{Handler: sec.browserHandler(mux, log.With("component", "http")), ReadHeaderTimeout: 10 * time.Second,
		ErrorLog: slog.NewLogLogger(log.With("component", "http").Handler(), slog.LevelWarn)}
}
