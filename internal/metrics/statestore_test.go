package metrics

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gantry-build/gantry/internal/statestore"
)

func TestStateStoreMetricsCountCommits(t *testing.T) {
	st, err := statestore.OpenEmbedded(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	reg := prometheus.NewRegistry()
	NewStateStore(reg, st, "embedded")
	ctx := context.Background()
	for i, batch := range [][]statestore.Mutation{
		{{Kind: "task", Key: "a", Value: []byte("1")}, {Kind: "tstate", Key: "a", Value: []byte("q")}},
		{{Kind: "tstate", Key: "a", Value: []byte("leased")}},
		{{Kind: "task", Key: "a", Delete: true}, {Kind: "tstate", Key: "a", Delete: true}, {Kind: "op", Key: "o", Value: []byte("done")}},
	} {
		if err := st.Apply(ctx, batch); err != nil {
			t.Fatalf("Apply %d: %v", i, err)
		}
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			name := mf.GetName()
			for _, l := range m.GetLabel() {
				if l.GetName() == "backend" && l.GetValue() != "embedded" {
					t.Errorf("%s has backend=%q, want embedded", name, l.GetValue())
				}
				if l.GetName() == "result" {
					name += "{" + l.GetValue() + "}"
				}
			}
			switch {
			case m.GetCounter() != nil:
				got[name] = m.GetCounter().GetValue()
			case m.GetHistogram() != nil:
				got[name] = float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	want := map[string]float64{
		"gantry_state_commits_total{ok}":       3,
		"gantry_state_commits_total{failed}":   0,
		"gantry_state_batches_total":           3,
		"gantry_state_records_written_total":   6,
		"gantry_state_commit_duration_seconds": 3, // samples
	}
	for name, w := range want {
		if g, ok := got[name]; !ok || g != w {
			t.Errorf("%s = %v (present: %v), want %v", name, g, ok, w)
		}
	}
}
