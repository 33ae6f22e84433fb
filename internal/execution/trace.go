package execution

import (
	"context"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"

	"github.com/gantry-build/gantry/internal/digest"
	"github.com/gantry-build/gantry/internal/scheduler"
	"github.com/gantry-build/gantry/internal/tracing"
)

// Spans: Execute (frontend) is the root of an action's trace; under it
// scheduler.Submit, and under that scheduler.Lease for each lease of the
// task, whose context goes to the worker in the assignment (the worker's
// spans are its children). A task joined by a second Execute is traced
// only under the first.

func startExecuteSpan(ctx context.Context, name, instance string, ad digest.Digest) (context.Context, trace.Span) {
	return tracing.Start(ctx, "Execute",
		attribute.String("gantry.operation", name),
		attribute.String("gantry.instance", instance),
		attribute.String("gantry.action_digest", ad.String()))
}

func endExecuteSpan(span trace.Span, resp *repb.ExecuteResponse) {
	if !span.IsRecording() {
		return
	}
	code := codes.Code(resp.GetStatus().GetCode())
	span.SetAttributes(attribute.String("gantry.status", code.String()), attribute.Bool("gantry.cached", resp.GetCachedResult()))
	if resp.GetResult() != nil {
		span.SetAttributes(attribute.Int("gantry.exit_code", int(resp.Result.ExitCode)))
	}
	if code != codes.OK {
		span.SetStatus(otelcodes.Error, resp.GetStatus().GetMessage())
	}
}

// submit hands sub to the scheduler inside a scheduler.Submit span whose
// context the task keeps for its leases.
func (s *Service) submit(ctx context.Context, sub *scheduler.SubmitRequest) error {
	ctx, span := tracing.Start(ctx, "scheduler.Submit")
	defer span.End()
	sub.TraceParent = tracing.TraceParent(ctx)
	_, err := s.sched.Submit(*sub)
	if err != nil && span.IsRecording() {
		span.SetStatus(otelcodes.Error, err.Error())
	}
	return err
}

// leaseTraceParent records the scheduler.Lease span of an assignment and
// returns the context to send to the worker ("" without tracing).
func leaseTraceParent(sched scheduler.Leases, workerID string, a *scheduler.Assignment) string {
	if !tracing.Enabled() {
		return ""
	}
	parent := sched.TraceParent(a.Task)
	if parent == "" {
		return ""
	}
	ctx, span := tracing.Start(tracing.WithTraceParent(context.Background(), parent), "scheduler.Lease",
		attribute.String("gantry.worker", workerID),
		attribute.String("gantry.lease", a.LeaseID),
		attribute.Int("gantry.attempt", a.Attempt),
		attribute.String("gantry.queue", a.Task.Queue))
	defer span.End()
	return tracing.TraceParent(ctx)
}
