package worker

import (
	"context"
	"errors"
	"log/slog"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	workerpb "github.com/gantry-build/gantry/api/worker/v1"
)

// outcome is how a lease ended, on its way to the scheduler. A nil
// *outcome means the lease was cancelled (or the worker is shutting
// down): nobody wants its result, and nothing is reported.
type outcome struct {
	// req carries the status, message, missing blobs and the ActionCache
	// decision; the completion path adds the ids and the result.
	req *workerpb.CompleteRequest
	// result, when there is one, goes with req (with its metadata).
	result *repb.ActionResult
}

// outcomeOf is the outcome of a stage that failed with err.
func outcomeOf(ctx context.Context, err error) *outcome {
	if ctx.Err() != nil {
		return nil // cancelled: the scheduler already knows
	}
	var se *statusError
	if !errors.As(err, &se) {
		se = failf(codes.Internal, "worker: %v", err)
	}
	return &outcome{req: se.request()}
}

// resultSink is where results go: the scheduler's Workers service.
type resultSink interface {
	Complete(ctx context.Context, in *workerpb.CompleteRequest, opts ...grpc.CallOption) (*workerpb.CompleteResponse, error)
}

// leaseBook is the worker's record of its leases.
type leaseBook interface {
	// completing marks l's result as on its way: a CANCEL then only means
	// that the scheduler has already processed it.
	completing(l *activeLease)
}

// completer is the one completion path of a lease: it reports the
// outcome to the scheduler and then lets go of everything the lease held.
type completer struct {
	sched    resultSink
	workerID string
	leases   leaseBook
	log      *slog.Logger
}

func newCompleter(sched resultSink, workerID string, leases leaseBook, log *slog.Logger) *completer {
	return &completer{sched: sched, workerID: workerID, leases: leases, log: log}
}

// Finish reports o (nothing when it is nil: cancelled) and releases j's
// slots, exec root and the rest, in that order: the client hears of the
// result before the worker tidies up.
func (c *completer) Finish(j *job, o *outcome) {
	defer j.releaseAll()
	if o == nil {
		return
	}
	req := o.req
	req.WorkerId, req.LeaseId = c.workerID, j.lease.id
	if o.result != nil {
		b, _ := proto.Marshal(o.result)
		req.ActionResult = b
	}
	c.leases.completing(j.lease)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for attempt := 0; attempt < 5; attempt++ {
		resp, err := c.sched.Complete(ctx, req)
		if err == nil {
			if !resp.Accepted {
				c.log.Info("scheduler ignored the result of a lease it no longer holds", "lease", j.lease.id)
			}
			return
		}
		c.log.Warn("reporting a result failed; retrying", "lease", j.lease.id, "err", err)
		sleep(ctx, time.Duration(attempt+1)*200*time.Millisecond)
	}
}
