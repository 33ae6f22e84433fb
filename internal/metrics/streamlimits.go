package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gantry-build/gantry/internal/limits"
)

// StreamLimits exports the per-caller stream bounds (limits.Streams):
// the streams open, the busiest caller's, the bounds, and the refusals.
// Callers are not a label (their number has no bound); the busiest
// caller's count tells how close anyone is to a bound.
type StreamLimits struct {
	counts          func() limits.Counts
	bounds          limits.StreamLimits
	open, busy, max *prometheus.Desc
	refused         *prometheus.CounterVec
}

var _ limits.Observer = (*StreamLimits)(nil)

// NewStreamLimits registers the metrics of the bounds with reg: counts
// reads the streams open at each scrape. Give the result to
// limits.NewStreams as its Observer, which counts the refusals.
func NewStreamLimits(reg prometheus.Registerer, bounds limits.StreamLimits, counts func() limits.Counts) *StreamLimits {
	kind := []string{"kind"}
	m := &StreamLimits{
		counts: counts,
		bounds: bounds,
		open: prometheus.NewDesc("gantry_grpc_open_streams",
			"Streams open now over every caller, by kind: stream (ByteStream, Execute, WaitExecution, GetTree) or upload (ByteStream Write, counted as a stream too).", kind, nil),
		busy: prometheus.NewDesc("gantry_grpc_open_streams_busiest_caller",
			"Streams open now of the one caller with the most, by kind; compare with gantry_grpc_streams_per_caller_limit.", kind, nil),
		max: prometheus.NewDesc("gantry_grpc_streams_per_caller_limit",
			"The most streams one caller may have open, by kind (grpc.max_streams_per_identity, grpc.max_uploads_per_identity); 0: no bound.", kind, nil),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gantry_grpc_stream_refusals_total",
			Help: "Streams refused with RESOURCE_EXHAUSTED because their caller had as many open as it may, by kind: stream (grpc.max_streams_per_identity) or upload (grpc.max_uploads_per_identity).",
		}, kind),
	}
	for _, k := range []limits.Kind{limits.KindStream, limits.KindUpload} {
		m.refused.WithLabelValues(string(k))
	}
	reg.MustRegister(m, m.refused)
	return m
}

// Refused implements limits.Observer.
func (m *StreamLimits) Refused(k limits.Kind) { m.refused.WithLabelValues(string(k)).Inc() }

// Describe implements prometheus.Collector.
func (m *StreamLimits) Describe(ch chan<- *prometheus.Desc) {
	ch <- m.open
	ch <- m.busy
	ch <- m.max
}

// Collect implements prometheus.Collector.
func (m *StreamLimits) Collect(ch chan<- prometheus.Metric) {
	c := m.counts()
	for _, g := range []struct {
		d              *prometheus.Desc
		stream, upload int
	}{
		{m.open, c.Streams, c.Uploads},
		{m.busy, c.BusiestStreams, c.BusiestUploads},
		{m.max, m.bounds.MaxStreams, m.bounds.MaxUploads},
	} {
		ch <- prometheus.MustNewConstMetric(g.d, prometheus.GaugeValue, float64(g.stream), string(limits.KindStream))
		ch <- prometheus.MustNewConstMetric(g.d, prometheus.GaugeValue, float64(g.upload), string(limits.KindUpload))
	}
}
