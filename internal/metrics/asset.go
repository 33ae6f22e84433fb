package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gantry-build/gantry/internal/asset"
)

// Asset counts the Remote Asset API's fetches (asset.Observer): by kind
// (blob, directory) and result (cached, fetched, or why it failed), the
// bytes downloaded from origins, and how long origins took.
type Asset struct {
	fetches *prometheus.CounterVec
	bytes   prometheus.Counter
	latency *prometheus.HistogramVec
}

var _ asset.Observer = (*Asset)(nil)

// NewAsset registers the Remote Asset metrics with reg.
func NewAsset(reg prometheus.Registerer) *Asset {
	m := &Asset{
		fetches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gantry_remote_asset_fetches_total",
			Help: "Remote Asset fetches by kind (blob, directory) and result: cached (answered from the index, no origin contacted), fetched (downloaded), not_pushed (a URI Gantry cannot download, urn: for one, that no Push recorded: a cache miss), or the failure (not_found, permission_denied, deadline_exceeded, checksum_mismatch, too_large, bad_archive, invalid, unavailable). A request trying several URIs counts once per URI tried.",
		}, []string{"kind", "result"}),
		bytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gantry_remote_asset_downloaded_bytes_total",
			Help: "Bytes downloaded from origins by Remote Asset fetches.",
		}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "gantry_remote_asset_origin_seconds",
			Help:    "Time to download from an origin (connect to last byte), by result.",
			Buckets: prometheus.ExponentialBuckets(0.01, 4, 9),
		}, []string{"result"}),
	}
	for _, k := range []string{"blob", "directory"} {
		for _, r := range []string{"cached", "fetched", "not_pushed"} {
			m.fetches.WithLabelValues(k, r)
		}
	}
	reg.MustRegister(m.fetches, m.bytes, m.latency)
	return m
}

// Fetched implements asset.Observer.
func (m *Asset) Fetched(kind asset.Kind, result string, n int64, d time.Duration) {
	m.fetches.WithLabelValues(kind.String(), result).Inc()
	if result == "cached" || result == "not_pushed" {
		return // no origin contacted
	}
	m.bytes.Add(float64(n))
	m.latency.WithLabelValues(result).Observe(d.Seconds())
}
