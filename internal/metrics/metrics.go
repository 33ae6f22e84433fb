// Package metrics holds Gantry's Prometheus metrics and the gRPC
// interceptors that feed them.
package metrics

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
)

// GRPC counts and times gRPC calls by method and status code.
type GRPC struct {
	calls   *prometheus.CounterVec
	latency *prometheus.HistogramVec
}

// NewGRPC registers the gRPC metrics with reg.
func NewGRPC(reg prometheus.Registerer) *GRPC {
	m := &GRPC{
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gantry_grpc_requests_total",
			Help: "gRPC calls handled, by full method name and status code.",
		}, []string{"method", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "gantry_grpc_request_duration_seconds",
			Help:    "Time to handle a gRPC call, by full method name.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10),
		}, []string{"method"}),
	}
	reg.MustRegister(m.calls, m.latency)
	return m
}

func (m *GRPC) observe(method string, start time.Time, err error) {
	m.calls.WithLabelValues(method, status.Code(err).String()).Inc()
	m.latency.WithLabelValues(method).Observe(time.Since(start).Seconds())
}

// Unary is a unary server interceptor.
func (m *GRPC) Unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	start := time.Now()
	resp, err := handler(ctx, req)
	m.observe(info.FullMethod, start, err)
	return resp, err
}

// Stream is a stream server interceptor.
func (m *GRPC) Stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	start := time.Now()
	err := handler(srv, ss)
	m.observe(info.FullMethod, start, err)
	return err
}
