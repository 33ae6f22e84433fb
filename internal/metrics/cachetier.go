package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gantry-build/gantry/internal/blobstore"
)

// CacheTier counts what the local cache tier in front of an object store
// CAS does (blobstore.Tiered): reads it served (hits) and reads the bucket
// served (misses), their bytes, the bytes copied into the cache, and the
// cache errors it absorbed.
type CacheTier struct {
	hits, misses            prometheus.Counter
	cacheBytes, bucketBytes prometheus.Counter
	filled                  prometheus.Counter
	errors                  *prometheus.CounterVec
}

var _ blobstore.TierObserver = (*CacheTier)(nil)

// cacheTierOps are the ops blobstore.TierObserver.CacheError reports;
// their series exist from the start, at 0, so that a rate can be taken.
var cacheTierOps = []string{"open", "create", "write", "commit", "touch", "refresh"}

// NewCacheTier registers the cache tier metrics with reg.
func NewCacheTier(reg prometheus.Registerer) *CacheTier {
	reads := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gantry_cas_cache_tier_reads_total",
		Help: "Blob reads through the CAS cache tier, by result: hit (served from this frontend's disk cache) or miss (served from the bucket).",
	}, []string{"result"})
	bytes := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gantry_cas_cache_tier_bytes_total",
		Help: "Blob bytes read through the CAS cache tier, by the source that served them (cache, bucket).",
	}, []string{"source"})
	m := &CacheTier{
		hits: reads.WithLabelValues("hit"), misses: reads.WithLabelValues("miss"),
		cacheBytes: bytes.WithLabelValues("cache"), bucketBytes: bytes.WithLabelValues("bucket"),
		filled: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gantry_cas_cache_tier_filled_bytes_total",
			Help: "Bytes of blobs copied from the bucket into the disk cache by reads that missed it.",
		}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gantry_cas_cache_tier_errors_total",
			Help: "Failures of the CAS disk cache that were absorbed (the bucket served instead), by operation; refresh is the bucket's lifetime extension of a cache hit.",
		}, []string{"op"}),
	}
	for _, op := range cacheTierOps {
		m.errors.WithLabelValues(op)
	}
	reg.MustRegister(reads, bytes, m.filled, m.errors)
	return m
}

// CacheRead implements blobstore.TierObserver.
func (m *CacheTier) CacheRead(hit bool, n int64) {
	if hit {
		m.hits.Inc()
		m.cacheBytes.Add(float64(n))
		return
	}
	m.misses.Inc()
	m.bucketBytes.Add(float64(n))
}

// CacheFilled implements blobstore.TierObserver.
func (m *CacheTier) CacheFilled(n int64) { m.filled.Add(float64(n)) }

// CacheError implements blobstore.TierObserver.
func (m *CacheTier) CacheError(op string, _ error) { m.errors.WithLabelValues(op).Inc() }
