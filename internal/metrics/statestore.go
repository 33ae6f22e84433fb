package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gantry-build/gantry/internal/statestore"
)

// NewStateStore registers the scheduler state store's group-commit
// metrics with reg: commits (by result), the batches and records they
// carried, and each commit's duration. backend labels them (embedded,
// postgres). Batches per commit and records per commit are the ratios an
// operator watches: a durable scheduler that keeps up groups many
// batches into each commit.
func NewStateStore(reg prometheus.Registerer, st statestore.Instrumented, backend string) {
	labels := prometheus.Labels{"backend": backend}
	commitSeconds := prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:        "gantry_state_commit_duration_seconds",
		Help:        "Time of one group commit of the scheduler's state store (write and fsync, or the transaction).",
		ConstLabels: labels,
		Buckets:     prometheus.ExponentialBuckets(0.00005, 2, 16), // 50µs .. ~1.6s
	})
	st.ObserveCommits(func(d time.Duration) { commitSeconds.Observe(d.Seconds()) })
	counter := func(name, help string, v func(statestore.CommitStats) uint64, extra prometheus.Labels) prometheus.Collector {
		l := prometheus.Labels{}
		for k, x := range labels {
			l[k] = x
		}
		for k, x := range extra {
			l[k] = x
		}
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: l},
			func() float64 { return float64(v(st.CommitStats())) })
	}
	reg.MustRegister(commitSeconds,
		counter("gantry_state_commits_total", "Group commits of the scheduler's state store, by result.",
			func(s statestore.CommitStats) uint64 { return s.Commits }, prometheus.Labels{"result": "ok"}),
		counter("gantry_state_commits_total", "Group commits of the scheduler's state store, by result.",
			func(s statestore.CommitStats) uint64 { return s.Failed }, prometheus.Labels{"result": "failed"}),
		counter("gantry_state_batches_total", "Batches of scheduler changes stored (several share one commit).",
			func(s statestore.CommitStats) uint64 { return s.Batches }, nil),
		counter("gantry_state_records_written_total", "Records written or deleted in the scheduler's state store.",
			func(s statestore.CommitStats) uint64 { return s.Mutations }, nil),
	)
}
