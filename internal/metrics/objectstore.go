package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// ObjectStore counts the requests the s3 storage backends send to the
// bucket, by operation (head, get, put, multipart_part, copy, ...) and
// result (ok, not_found, error), with their latency. It implements
// s3store.Observer.
type ObjectStore struct {
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
}

// NewObjectStore registers the object store metrics with reg.
func NewObjectStore(reg prometheus.Registerer) *ObjectStore {
	m := &ObjectStore{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gantry_s3_requests_total",
			Help: "Requests sent to the storage bucket, by operation (head, get, put, multipart_create, multipart_part, multipart_complete, multipart_abort, copy, bucket_exists, make_bucket) and result (ok, not_found, error).",
		}, []string{"op", "result"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "gantry_s3_request_duration_seconds",
			Help:    "Time from sending a request to the storage bucket to its answer (for a GET, to the start of the body), by operation.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}, []string{"op"}),
	}
	reg.MustRegister(m.requests, m.latency)
	return m
}

// Request implements s3store.Observer.
func (m *ObjectStore) Request(op, result string, took time.Duration) {
	m.requests.WithLabelValues(op, result).Inc()
	m.latency.WithLabelValues(op).Observe(took.Seconds())
}
