package server

import (
	"github.com/gantry-build/gantry/internal/config"
	"github.com/gantry-build/gantry/internal/limits"
	"github.com/gantry-build/gantry/internal/metrics"
)

// streamLimits builds the per-caller stream bounds of cfg
// (grpc.max_streams_per_identity, grpc.max_uploads_per_identity), with
// their metrics.
func (o *observability) streamLimits(cfg config.Config) *limits.Streams {
	bounds := limits.StreamLimits{MaxStreams: cfg.GRPC.MaxStreamsPerIdentity, MaxUploads: cfg.GRPC.MaxUploadsPerIdentity}
	var s *limits.Streams
	m := metrics.NewStreamLimits(o.reg, bounds, func() limits.Counts { return s.Counts() })
	s = limits.NewStreams(bounds, m)
	return s
}
