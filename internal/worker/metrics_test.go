package worker

import (
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	workerpb "github.com/gantry-build/gantry/api/worker/v1"
)

// TestStageLeasesGauge: gantry_worker_stage_leases counts the leases in
// each stage as the worker moves them along (a lease just matched is
// fetching its inputs; a running action executing; one whose outputs wait
// for the CAS uploading), and none once they are done.
func TestStageLeasesGauge(t *testing.T) {
	w, store, _ := stageWorker(t)
	gate := make(chan struct{})
	w.cas = oneCAS{gatedStore{store, gate}}
	reg := prometheus.NewRegistry()
	if err := w.RegisterMetrics(reg, false); err != nil {
		t.Fatal(err)
	}
	want := func(when string, fetch, exec, upload int) {
		t.Helper()
		fams, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]float64{}
		for _, f := range fams {
			if f.GetName() != "gantry_worker_stage_leases" {
				continue
			}
			for _, m := range f.GetMetric() {
				for _, lp := range m.GetLabel() {
					got[lp.GetValue()] = m.GetGauge().GetValue()
				}
			}
		}
		wantMap := map[string]float64{"input_fetch": float64(fetch), "execute": float64(exec), "output_upload": float64(upload)}
		if fmt.Sprint(got) != fmt.Sprint(wantMap) {
			t.Errorf("%s: gantry_worker_stage_leases %v, want %v", when, got, wantMap)
		}
	}
	want("idle", 0, 0, 0)

	a := assignment(t, store, "exec", actionSpec{script: "exec sleep 60"})
	l, ctx := lease(t, w, a)
	want("matched", 1, 0, 0)
	done := make(chan struct{})
	go func() { defer close(done); w.runStages(ctx, l, a) }()
	waitUntil(t, "the action to run", func() bool { w.mu.Lock(); defer w.mu.Unlock(); return l.disk.kill != nil })
	want("executing", 0, 1, 0)
	l.cancel()
	waitUntil(t, "the cancelled lease to leave", func() bool { return closed(done) })
	want("cancelled", 0, 0, 0)

	a = assignment(t, store, "report", actionSpec{script: "echo out"})
	l, ctx = lease(t, w, a)
	done = make(chan struct{})
	go func() { defer close(done); w.runStages(ctx, l, a) }()
	waitUntil(t, "the Report stage", func() bool { w.mu.Lock(); defer w.mu.Unlock(); return l.stage == workerpb.Stage_REPORTING })
	want("uploading", 0, 0, 1)
	close(gate)
	waitUntil(t, "the lease to complete", func() bool { return closed(done) })
	want("done", 0, 0, 0)
}
