package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gantry-build/gantry/internal/client"
)

// Chunking counts the chunked transfers of a client or worker
// (client.Chunked): transfers by direction and whether they went as
// chunks, the blob bytes that crossed the network, the bytes that did not
// because the server (upload) or the local chunk cache (download) held
// the chunks, and damaged chunks found in the local cache.
type Chunking struct {
	transfers *prometheus.CounterVec
	sent      *prometheus.CounterVec
	saved     *prometheus.CounterVec
	corrupt   prometheus.Counter
}

var _ client.ChunkObserver = (*Chunking)(nil)

// NewChunking registers the chunking metrics with reg.
func NewChunking(reg prometheus.Registerer) *Chunking {
	m := &Chunking{
		transfers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gantry_chunked_transfers_total",
			Help: "Large blobs moved as content-defined chunks, by direction (upload, download).",
		}, []string{"direction"}),
		sent: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gantry_chunked_transferred_bytes_total",
			Help: "Bytes of chunks sent (upload) or fetched (download) by chunked transfers.",
		}, []string{"direction"}),
		saved: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gantry_chunked_saved_bytes_total",
			Help: "Bytes chunked transfers did not move: chunks the server already held (upload) or the local chunk cache held (download).",
		}, []string{"direction"}),
		corrupt: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gantry_chunk_cache_corrupt_total",
			Help: "Chunks of the local chunk cache that failed their digest check; they were removed and fetched again.",
		}),
	}
	for _, dir := range []string{"upload", "download"} {
		m.transfers.WithLabelValues(dir)
		m.sent.WithLabelValues(dir)
		m.saved.WithLabelValues(dir)
	}
	reg.MustRegister(m.transfers, m.sent, m.saved, m.corrupt)
	return m
}

// ChunkedUpload implements client.ChunkObserver.
func (m *Chunking) ChunkedUpload(s client.ChunkStats) { m.observe("upload", s) }

// ChunkedDownload implements client.ChunkObserver.
func (m *Chunking) ChunkedDownload(s client.ChunkStats) { m.observe("download", s) }

func (m *Chunking) observe(dir string, s client.ChunkStats) {
	m.transfers.WithLabelValues(dir).Inc()
	m.sent.WithLabelValues(dir).Add(float64(s.BytesTransferred))
	m.saved.WithLabelValues(dir).Add(float64(s.BytesSaved))
	m.corrupt.Add(float64(s.Corrupt))
}
