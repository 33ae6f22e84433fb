package worker

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
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
// Outcomes ready while a report is on its way go together in the next
// one (one Complete call, one wait for storing them): no outcome waits
// for another to be ready.
type completer struct {
	sched    resultSink
	workerID string
	leases   leaseBook
	log      *slog.Logger

	mu sync.Mutex
	// pending are the outcomes for the next report; sending is set while
	// a report is on its way (its sender then sends the next batch, or
	// hands that on to the first pending outcome's caller).
	pending []*report
	sending bool
	// single is set once the scheduler showed it knows no batches (an
	// earlier release): every outcome then goes in a call of its own.
	single atomic.Bool
}

// report is one outcome on its way, and what became of it.
type report struct {
	req  *workerpb.CompleteRequest
	wake chan struct{}
	// sent and accepted are set before wake is signalled.
	sent, accepted bool
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
	if !c.deliver(req) {
		c.log.Info("scheduler ignored the result of a lease it no longer holds", "lease", j.lease.id)
	}
}

// deliver reports req with whatever else is pending, and reports
// whether the scheduler accepted it.
func (c *completer) deliver(req *workerpb.CompleteRequest) bool {
	r := &report{req: req, wake: make(chan struct{}, 1)}
	c.mu.Lock()
	c.pending = append(c.pending, r)
	lead := !c.sending
	c.sending = true
	c.mu.Unlock()
	if !lead {
		<-r.wake
		if r.sent {
			return r.accepted
		}
		// The last sender handed the next batch to this call.
	}
	c.mu.Lock()
	batch := c.pending
	c.pending = nil
	c.mu.Unlock()
	c.send(batch)
	c.mu.Lock()
	if len(c.pending) > 0 {
		c.pending[0].wake <- struct{}{}
	} else {
		c.sending = false
	}
	c.mu.Unlock()
	for _, b := range batch {
		if b != r {
			b.wake <- struct{}{}
		}
	}
	return r.accepted
}

// send reports batch in one Complete call (one outcome in the request's
// own fields, as every release of the scheduler takes it), retrying a
// failed call, and sets each report's outcome.
func (c *completer) send(batch []*report) {
	defer func() {
		for _, r := range batch {
			r.sent = true
		}
	}()
	if len(batch) > 1 && c.single.Load() {
		for _, r := range batch {
			c.send([]*report{r})
		}
		return
	}
	req := batch[0].req
	if len(batch) > 1 {
		req = &workerpb.CompleteRequest{WorkerId: c.workerID, Completions: make([]*workerpb.CompleteRequest, len(batch))}
		for i, r := range batch {
			req.Completions[i] = r.req
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for attempt := 0; attempt < 5; attempt++ {
		resp, err := c.sched.Complete(ctx, req)
		if err != nil {
			c.log.Warn("reporting results failed; retrying", "results", len(batch), "err", err)
			sleep(ctx, time.Duration(attempt+1)*200*time.Millisecond)
			continue
		}
		if len(batch) == 1 {
			batch[0].accepted = resp.Accepted
			return
		}
		if len(resp.CompletionsAccepted) != len(batch) {
			// A scheduler of an earlier release: it took the request as
			// one outcome of no lease and ignored the rest.
			c.single.Store(true)
			for _, r := range batch {
				c.send([]*report{r})
			}
			return
		}
		for i, r := range batch {
			r.accepted = resp.CompletionsAccepted[i]
		}
		return
	}
}
