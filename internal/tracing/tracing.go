// Package tracing is Gantry's OpenTelemetry tracing: an action is traced
// across the frontend (Execute), the scheduler (submit and lease) and the
// worker (input fetch, execute, output upload). The trace context goes
// from the scheduler to the worker as a W3C traceparent string in the
// lease's assignment. Tracing is off unless an OTLP endpoint is
// configured; then nothing is recorded and the hooks cost one atomic load.
package tracing

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"
)

// Name is the instrumentation scope of Gantry's spans.
const Name = "github.com/gantry-build/gantry"

var enabled atomic.Bool

// Enabled reports whether spans are recorded.
func Enabled() bool { return enabled.Load() }

// Tracer returns Gantry's tracer from the global provider.
func Tracer() trace.Tracer { return otel.Tracer(Name) }

// SetProvider installs tp as the global tracer provider and turns
// tracing on (tests use an SDK provider with an in-memory recorder).
func SetProvider(tp trace.TracerProvider) {
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.TraceContext{})
	enabled.Store(true)
}

// Disable turns tracing off again.
func Disable() { enabled.Store(false) }

// Config is where spans go.
type Config struct {
	// OTLPEndpoint is the host:port of an OTLP/gRPC collector; empty
	// turns tracing off.
	OTLPEndpoint string
	// Insecure sends without TLS.
	Insecure bool
	// SampleRatio is the fraction of new traces recorded (0: all).
	SampleRatio float64
	// Service is the service.name resource attribute.
	Service string
}

// Setup starts exporting spans by OTLP/gRPC when cfg names an endpoint.
// The returned function flushes and stops the exporter; without an
// endpoint it does nothing.
func Setup(ctx context.Context, cfg Config) (shutdown func(context.Context) error, err error) {
	if cfg.OTLPEndpoint == "" {
		return func(context.Context) error { return nil }, nil
	}
	opts := []otlptracegrpc.Option{otlptracegrpc.WithEndpoint(cfg.OTLPEndpoint)}
	if cfg.Insecure {
		opts = append(opts, otlptracegrpc.WithInsecure())
	}
	exp, err := otlptracegrpc.New(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("starting the OTLP trace exporter for %s: %w; check tracing.otlp_endpoint", cfg.OTLPEndpoint, err)
	}
	service := cfg.Service
	if service == "" {
		service = "gantry"
	}
	sampler := sdktrace.ParentBased(sdktrace.AlwaysSample())
	if cfg.SampleRatio > 0 && cfg.SampleRatio < 1 {
		sampler = sdktrace.ParentBased(sdktrace.TraceIDRatioBased(cfg.SampleRatio))
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithSampler(sampler),
		sdktrace.WithResource(resource.NewSchemaless(semconv.ServiceName(service))),
	)
	SetProvider(tp)
	return func(ctx context.Context) error {
		Disable()
		return tp.Shutdown(ctx)
	}, nil
}

// TraceParent returns the W3C traceparent of ctx's span, or "".
func TraceParent(ctx context.Context) string {
	if !Enabled() {
		return ""
	}
	c := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, c)
	return c["traceparent"]
}

// WithTraceParent returns ctx carrying the remote span context of a
// traceparent string; an empty or malformed one leaves ctx as it is.
func WithTraceParent(ctx context.Context, traceparent string) context.Context {
	if traceparent == "" {
		return ctx
	}
	return propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier{"traceparent": traceparent})
}

// Start starts a span when tracing is on; otherwise it returns ctx and a
// span that does nothing.
func Start(ctx context.Context, name string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	if !Enabled() {
		return ctx, trace.SpanFromContext(context.Background())
	}
	return Tracer().Start(ctx, name, trace.WithAttributes(attrs...))
}

// Stage records a finished span from start to end under ctx's span; a
// zero start or end records nothing.
func Stage(ctx context.Context, name string, start, end time.Time, attrs ...attribute.KeyValue) {
	if !Enabled() || start.IsZero() || end.IsZero() {
		return
	}
	_, sp := Tracer().Start(ctx, name, trace.WithTimestamp(start), trace.WithAttributes(attrs...))
	sp.End(trace.WithTimestamp(end))
}
