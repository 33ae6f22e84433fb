package worker

import (
	"context"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/types/known/timestamppb"

	workerpb "github.com/gantry-build/gantry/api/worker/v1"
	"github.com/gantry-build/gantry/internal/tracing"
)

// traceLease observes a finished lease's stage durations (metrics.go)
// and records its spans from the timestamps the driver (lease.go) left in
// md: worker.Action under the scheduler's lease span (the assignment's
// traceparent), and under it worker.InputFetch, worker.Execute and
// worker.OutputUpload for the stages that ran. Spans need tracing on and
// a traceparent.
func (w *Worker) traceLease(a *workerpb.Assignment, md *repb.ExecutedActionMetadata) {
	w.observeStages(md)
	if a.Traceparent == "" || !tracing.Enabled() {
		return
	}
	ctx := tracing.WithTraceParent(context.Background(), a.Traceparent)
	ctx, span := tracing.Tracer().Start(ctx, "worker.Action", trace.WithTimestamp(ts(md.WorkerStartTimestamp)),
		trace.WithAttributes(attribute.String("gantry.worker", w.cfg.ID), attribute.String("gantry.lease", a.LeaseId),
			attribute.String("gantry.instance", a.InstanceName)))
	tracing.Stage(ctx, "worker.InputFetch", ts(md.InputFetchStartTimestamp), ts(md.InputFetchCompletedTimestamp))
	tracing.Stage(ctx, "worker.Execute", ts(md.ExecutionStartTimestamp), ts(md.ExecutionCompletedTimestamp))
	tracing.Stage(ctx, "worker.OutputUpload", ts(md.OutputUploadStartTimestamp), ts(md.OutputUploadCompletedTimestamp))
	span.End()
}

func ts(t *timestamppb.Timestamp) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.AsTime()
}
