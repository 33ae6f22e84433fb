package tracing

import (
	"context"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

func TestTraceParentRoundTrip(t *testing.T) {
	if tp := TraceParent(context.Background()); tp != "" {
		t.Errorf("TraceParent with tracing off = %q, want empty", tp)
	}
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	SetProvider(tp)
	defer Disable()
	ctx, span := Start(context.Background(), "parent")
	s := TraceParent(ctx)
	span.End()
	if s == "" {
		t.Fatal("no traceparent for a recording span")
	}
	remote := trace.SpanContextFromContext(WithTraceParent(context.Background(), s))
	if remote.TraceID() != span.SpanContext().TraceID() || remote.SpanID() != span.SpanContext().SpanID() || !remote.IsRemote() {
		t.Errorf("traceparent %q does not carry the span's context", s)
	}
	Disable()
	if _, sp := Start(context.Background(), "off"); sp.IsRecording() {
		t.Error("a span records with tracing off")
	}
	if n := len(rec.Ended()); n != 1 {
		t.Errorf("%d spans recorded, want 1", n)
	}
}

// FuzzWithTraceParent: a traceparent from the wire never crashes and
// yields either no span context or a valid one.
func FuzzWithTraceParent(f *testing.F) {
	f.Add("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	f.Add("")
	f.Add("ff-0-0-0")
	f.Fuzz(func(t *testing.T, s string) {
		sc := trace.SpanContextFromContext(WithTraceParent(context.Background(), s))
		if sc.IsValid() && (!sc.TraceID().IsValid() || !sc.SpanID().IsValid()) {
			t.Errorf("%q gave an invalid span context %v", s, sc)
		}
	})
}

func TestSetupWithoutEndpointIsOff(t *testing.T) {
	stop, err := Setup(context.Background(), Config{})
	if err != nil || Enabled() {
		t.Fatalf("Setup without an endpoint: enabled %v, err %v", Enabled(), err)
	}
	if err := stop(context.Background()); err != nil {
		t.Error(err)
	}
}

func TestSetupWithEndpointTurnsTracingOnUntilStopped(t *testing.T) {
	defer Disable()
	stop, err := Setup(context.Background(), Config{OTLPEndpoint: "127.0.0.1:1", Insecure: true})
	if err != nil {
		t.Fatal(err)
	}
	if !Enabled() {
		t.Fatal("tracing is off after Setup with an endpoint")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	stop(ctx) // nothing was exported: nothing to fail on
	if Enabled() {
		t.Error("tracing is still on after stop")
	}
}
