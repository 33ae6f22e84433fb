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
// It reports with store_completions_later: the slots are let go of once
// the scheduler accepted the result, and the result stays in kept until
// the scheduler says it is stored (unstored.go, confirm.go).
// Up to maxReportsInFlight reports are on their way at once, each on its
// own; outcomes that become ready while that many are go together in the
// next one (one Complete call, one wait for storing them). No outcome
// waits for another to be ready, and a scheduler that stores two commits
// at once (the embedded store does) is kept as busy as before.
type completer struct {
	sched    resultSink
	workerID string
	leases   leaseBook
	log      *slog.Logger

	mu sync.Mutex
	// pending are the outcomes waiting for a report to carry them;
	// inFlight counts the reports on their way. A sender that finds
	// outcomes pending when its report is done hands its place to the
	// first of them, which carries them all.
	pending  []*report
	inFlight int
	// single is set once the scheduler showed it knows no batches (an
	// earlier release): every outcome then goes in a call of its own.
	single atomic.Bool
	// kept are the results accepted and not yet stored; ctx (the
	// worker's run) bounds the wait for room among them.
	kept *unstored
	ctx  context.Context
	// later: report with store_completions_later (worker.store_results_later).
	later bool
}

// report is one outcome on its way, and what became of it.
type report struct {
	req  *workerpb.CompleteRequest
	wake chan struct{}
	// accepted, or lead (send the pending outcomes with this one), is set
	// before wake is signalled; it is signalled once. later: the
	// scheduler has yet to store it (store_completions_later);
	// answered: the scheduler answered at all.
	accepted, lead, later, answered bool
}

// maxReportsInFlight is how many reports a worker has on their way at
// once: two, as many commits as the embedded store has in flight.
const maxReportsInFlight = 2

// newCompleter returns the completion path of workerID's leases; with
// later, it keeps up to maxKept results accepted and not yet stored (else
// a lease's slots wait for its result's commit, as before).
func newCompleter(sched resultSink, workerID string, leases leaseBook, later bool, maxKept int, log *slog.Logger) *completer {
	return &completer{sched: sched, workerID: workerID, leases: leases, log: log, later: later, kept: newUnstored(maxKept), ctx: context.Background()}
}

// Finish reports o (nothing when it is nil: cancelled) and releases j's
// slots, exec root and the rest, in that order: the scheduler has
// accepted the result before the worker tidies up (and the client hears
// of it once it is stored).
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
	if !c.later {
		if accepted, _ := c.deliver(req); !accepted {
			c.log.Info("scheduler ignored the result of a lease it no longer holds", "lease", j.lease.id)
		}
		return
	}
	// Past the bound of results kept unstored, the slots stay held
	// until there is room: new work waits for the commits.
	reserved := c.kept.reserve(c.ctx)
	gen := c.kept.generation()
	accepted, later := c.deliver(req)
	if !accepted {
		c.kept.unreserve(reserved)
		c.log.Info("scheduler ignored the result of a lease it no longer holds", "lease", j.lease.id)
		return
	}
	if !later { // a scheduler of an earlier release: stored already
		c.kept.unreserve(reserved)
		return
	}
	if c.kept.keep(req, reserved, gen) {
		// A registration came while it was on its way: the scheduler
		// may have forgotten it.
		go c.resend([]*workerpb.CompleteRequest{req})
	}
}

// deliver reports req, with whatever else is pending when its report
// starts, and reports whether the scheduler accepted it and whether it
// has yet to store it.
func (c *completer) deliver(req *workerpb.CompleteRequest) (accepted, later bool) {
	r := &report{req: req, wake: make(chan struct{}, 1)}
	c.mu.Lock()
	if c.inFlight < maxReportsInFlight {
		c.inFlight++
	} else {
		c.pending = append(c.pending, r)
		c.mu.Unlock()
		<-r.wake
		if !r.lead {
			return r.accepted, r.later // another call carried it
		}
		c.mu.Lock() // the place of a report just done, handed over
	}
	batch := append([]*report{r}, c.pending...)
	c.pending = nil
	c.mu.Unlock()
	c.send(batch)
	c.mu.Lock()
	if len(c.pending) > 0 {
		next := c.pending[0]
		c.pending = c.pending[1:]
		next.lead = true
		next.wake <- struct{}{}
	} else {
		c.inFlight--
	}
	c.mu.Unlock()
	for _, b := range batch[1:] {
		b.wake <- struct{}{}
	}
	return r.accepted, r.later
}

// send reports batch in one Complete call (one outcome in the request's
// own fields, as every release of the scheduler takes it), retrying a
// failed call, and sets each report's outcome.
func (c *completer) send(batch []*report) {
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
	req.StoreCompletionsLater = c.later
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for attempt := 0; attempt < 5; attempt++ {
		resp, err := c.sched.Complete(ctx, req)
		if err != nil {
			c.log.Warn("reporting results failed; retrying", "results", len(batch), "err", err)
			sleep(ctx, time.Duration(attempt+1)*200*time.Millisecond)
			continue
		}
		c.kept.stored(resp.StoredCompletions)
		for _, r := range batch {
			r.later, r.answered = resp.StoredLater, true
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
