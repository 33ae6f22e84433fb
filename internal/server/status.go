package server

import (
	"encoding/json"
	"net/http"
	"strings"

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

// serveInvocations shows the fairness trie: a text table, or JSON with
// ?format=json.
func (s *Server) serveInvocations(w http.ResponseWriter, r *http.Request) {
	if status.WantsHTML(r) {
		s.status.ServeHTTP(w, r)
		return
	}
	keys := s.exec.KeyNames()
	stats := s.Scheduler.Invocations()
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
