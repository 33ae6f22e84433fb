package worker

import (
	"context"
	"time"

	workerpb "github.com/gantry-build/gantry/api/worker/v1"
)

// confirmWait bounds one call asking which kept results are stored; the
// scheduler answers it once its next commit is done.
const confirmWait = 30 * time.Second

// start sets the context of the worker's run, which ends the waits for
// room among the kept results; call it before any lease runs.
func (c *completer) start(ctx context.Context) { c.ctx = ctx }

// confirmLoop asks the scheduler, one call at a time, which of the kept
// results are stored, until ctx ends. Each call waits for the commit of
// what the worker has waiting, so there is about one per commit.
func (c *completer) confirmLoop(ctx context.Context) {
	backoff := time.Duration(0)
	for {
		if c.kept.count() == 0 {
			select {
			case <-ctx.Done():
				return
			case <-c.kept.wake:
				continue
			}
		}
		if ctx.Err() != nil {
			return
		}
		cctx, cancel := context.WithTimeout(ctx, confirmWait)
		resp, err := c.sched.Complete(cctx, &workerpb.CompleteRequest{WorkerId: c.workerID, StoreCompletionsLater: true})
		cancel()
		if err == nil && c.kept.stored(resp.StoredCompletions) > 0 {
			backoff = 0
			continue
		}
		// Nothing stored: the scheduler is away, its store failing, or it
		// forgot them (a Register sends them again).
		if err != nil && ctx.Err() == nil {
			c.log.Warn("asking which results are stored failed; retrying", "err", err)
		}
		backoff = min(max(2*backoff, 20*time.Millisecond), time.Second)
		sleep(ctx, backoff)
	}
}

// registered sends the kept results again after a registration: a new
// scheduler (a restart, a fail-over) adopts their leases, reported in the
// Register, and takes them; one that had them already refuses them.
func (c *completer) registered() {
	if rs := c.kept.registered(); len(rs) > 0 {
		go c.resend(rs)
	}
}

// resend sends kept results again and forgets those refused (their lease
// is over: finished or requeued).
func (c *completer) resend(rs []*workerpb.CompleteRequest) {
	gen := c.kept.generation()
	batch := make([]*report, len(rs))
	for i, r := range rs {
		batch[i] = &report{req: r}
	}
	c.send(batch)
	var refused []string
	for _, r := range batch {
		if !r.answered || r.accepted && r.later {
			continue // kept: the next Register sends it again
		}
		// Refused, or stored before the answer (an earlier release).
		refused = append(refused, r.req.LeaseId)
	}
	c.kept.forget(refused, false)
	if gen != c.kept.generation() {
		c.registered()
	}
}

// settle waits, at most until ctx ends or for wait, until every kept
// result is stored: a worker that exits holding none leaves nothing a
// scheduler restart could lose.
func (c *completer) settle(ctx context.Context, wait time.Duration) {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	for c.kept.count() > 0 && ctx.Err() == nil {
		sleep(ctx, 10*time.Millisecond)
	}
	if n := c.kept.count(); n > 0 {
		c.log.Warn("exiting with results the scheduler accepted and has not said it stored", "results", n)
	}
}
