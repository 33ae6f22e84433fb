package server

import (
	"encoding/json"
	"net/http"
	"net/http/pprof"
	"strings"

	"github.com/gantry-build/gantry/internal/config"
	"github.com/gantry-build/gantry/internal/scheduler"
	"github.com/gantry-build/gantry/internal/status"
)

// invocationJSON is one invocation in /status/invocations?format=json.
type invocationJSON struct {
	Path          []string `json:"path"`
	Queued        int      `json:"queued"`
	Executing     int      `json:"executing"`
	SelfQueued    int      `json:"self_queued"`
	SelfExecuting int      `json:"self_executing"`
	Workers       int      `json:"workers"`
}

// statusPages is the status page of one scheduler: its HTML pages, and
// /status/invocations also as text and JSON.
type statusPages struct {
	page  *status.Handler
	sched scheduler.Snapshot
	keys  func() []string
}

func (p *statusPages) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/status/invocations" || r.URL.Path == "/status/fairness" {
		p.serveInvocations(w, r)
		return
	}
	p.page.ServeHTTP(w, r)
}

// serveInvocations shows the fairness trie to scripts: a text table, or
// JSON with ?format=json, at /status/fairness and (as before the builds
// took its page) /status/invocations. Browsers get the HTML pages: the
// trie at /status/fairness, the builds at /status/invocations.
func (p *statusPages) serveInvocations(w http.ResponseWriter, r *http.Request) {
	if status.WantsHTML(r) {
		p.page.ServeHTTP(w, r)
		return
	}
	keys := p.keys()
	stats := p.sched.Invocations()
	if r.URL.Query().Get("format") == "json" || strings.Contains(r.Header.Get("Accept"), "application/json") {
		out := struct {
			Keys        []string         `json:"keys"`
			Invocations []invocationJSON `json:"invocations"`
		}{Keys: keys, Invocations: make([]invocationJSON, 0, len(stats))}
		for _, st := range stats {
			out.Invocations = append(out.Invocations, invocationJSON{Path: st.Path, Queued: st.Queued, Executing: st.Executing,
				SelfQueued: st.SelfQueued, SelfExecuting: st.SelfExecuting, Workers: st.Workers})
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(out)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	scheduler.WriteInvocations(w, keys, stats)
}

// handleStatus serves the status pages that pages returns (nil: none,
// with what to do instead) under /status, and redirects the port's root
// there.
func handleStatus(mux *http.ServeMux, pages func() *statusPages) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := pages()
		if p == nil {
			http.Error(w, "this scheduler stands by and has no status pages; open those of the leading scheduler (its gantry_scheduler_leader metric is 1)", http.StatusServiceUnavailable)
			return
		}
		p.ServeHTTP(w, r)
	})
	mux.Handle("/status", h)
	mux.Handle("/status/", h)
	mux.Handle("/{$}", http.RedirectHandler("/status", http.StatusSeeOther))
}

// reloadFrom is an AdminService.Reload: it re-reads the config file at
// path and applies it with reload.
func reloadFrom(path string, reload func(config.Config) error) func() error {
	return func() error {
		cfg, err := config.Load(path)
		if err != nil {
			return err
		}
		return reload(cfg)
	}
}

// handlePprof serves Go's profiler under /debug/pprof/, each path
// wrapped in guard (the admin permission when the port authenticates: a
// goroutine dump shows what every caller's request is doing).
func handlePprof(mux *http.ServeMux, guard func(http.Handler) http.Handler) {
	mux.Handle("/debug/pprof/", guard(http.HandlerFunc(pprof.Index)))
	mux.Handle("/debug/pprof/profile", guard(http.HandlerFunc(pprof.Profile)))
	mux.Handle("/debug/pprof/symbol", guard(http.HandlerFunc(pprof.Symbol)))
	mux.Handle("/debug/pprof/trace", guard(http.HandlerFunc(pprof.Trace)))
}
