package scheduler

import (
	"context"
	"fmt"
	"strings"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"

	"github.com/gantry-build/gantry/internal/digest"
)

// ActionCacheWriter is where the scheduler writes the results of leases
// that ask to be cached (the ActionCache of the lease's instance).
//
// The scheduler writes them itself, rather than hand the lease's
// instance and action digest to whoever delivers the result, because it
// alone knows them for certain: the entry goes under the lease's own
// instance and digest (never what a worker claims), only for a lease
// still valid when Complete checks it, and before the operation finishes
// (before any client hears of the result). Its errors are plain
// messages for the operation's ExecuteResponse.message.
type ActionCacheWriter interface {
	WriteActionResult(ctx context.Context, instance string, action digest.Digest, ar *repb.ActionResult) error
}

// Completion is one lease's outcome, as a worker reports it.
type Completion struct {
	LeaseID  string
	Response *repb.ExecuteResponse
	// CacheResult asks for Response.Result to be written to the
	// ActionCache. It is written only for a successful result (status OK,
	// exit code 0) of a cacheable task whose lease is still valid.
	CacheResult bool
}

// Complete is the one way a lease ends with a result: it ends several
// of a worker's leases, in order, and reports which were still valid
// (a result for any other is ignored). The results that ask for it are
// written to the ActionCache first (ctx bounds the writes), outside the
// scheduler's lock.
//
// It does not wait for storing: the caller must call stored (which
// starts storing and waits, bounded) before telling the worker. A Poll
// that carried the completions calls it after leasing, so that its new
// leases go into the same flush and commit.
//
// A lease the scheduler has no record of, of a task a restore holds
// back, is adopted first (reconcile.go): its result is taken, not lost.
func (s *Scheduler) Complete(ctx context.Context, workerID string, cs []Completion) (accepted []bool, stored func()) {
	accepted, ticket := s.CompleteLater(ctx, workerID, cs)
	return accepted, func() {
		s.jr.kickFlush()
		s.waitDurable(ticket)
	}
}

// cacheResults writes the results of cs that ask for it to the
// ActionCache, under their leases' instance and action digest, for the
// leases still workerID's now. A failed write is tried again a few
// times (cacheRetryPauses, bounded by ctx); one that still fails is
// noted in the result's message: the result still reaches the callers.
func (s *Scheduler) cacheResults(ctx context.Context, workerID string, cs []Completion) {
	if s.cache == nil {
		return
	}
	type entry struct {
		c        *Completion
		instance string
		action   digest.Digest
	}
	var es []entry
	for i := range cs {
		if c := &cs[i]; c.wantsCaching() {
			es = append(es, entry{c: c})
		}
	}
	if len(es) == 0 {
		return
	}
	s.mu.Lock()
	n := 0
	for _, e := range es {
		l, ok := s.leases[e.c.LeaseID]
		if !ok {
			l = s.adoptLocked(s.workers[workerID], e.c.LeaseID)
			ok = l != nil
		}
		if !ok || l.worker.info.ID != workerID || !l.task.Cacheable {
			continue
		}
		e.instance, e.action = l.task.Instance, l.task.ActionDigest
		es[n] = e
		n++
	}
	s.mu.Unlock()
	failing := es[:n]
	errs := make([]error, len(failing))
	for try := 0; ; try++ {
		m := 0
		for i, e := range failing {
			if errs[i] = s.cache.WriteActionResult(ctx, e.instance, e.action, e.c.Response.Result); errs[i] != nil {
				failing[m], errs[m] = e, errs[i]
				m++
			}
		}
		failing, errs = failing[:m], errs[:m]
		if m == 0 || try == len(cacheRetryPauses) || !pause(ctx, cacheRetryPauses[try]) {
			break
		}
	}
	for i, e := range failing {
		r := e.c.Response
		r.Message = strings.TrimSpace(r.Message + " (the result could not be cached: " + errs[i].Error() + ")")
	}
}

// cacheRetryPauses are the pauses between the tries of a failed
// ActionCache write (the store restarting, a frontend behind the
// balancer killed): about 3s in all, while the operation waits, before
// its result is delivered with the note.
var cacheRetryPauses = []time.Duration{100 * time.Millisecond, 300 * time.Millisecond, time.Second, 1600 * time.Millisecond}

// pause waits d, or less if ctx ends first (false).
func pause(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// wantsCaching reports whether c asks for caching and its result may be
// cached: a successful run.
func (c *Completion) wantsCaching() bool {
	r := c.Response
	return c.CacheResult && r != nil && r.Result != nil && r.Status.GetCode() == 0 && r.Result.ExitCode == 0
}

// completeLocked ends workerID's lease leaseID with resp; it reports
// false, ignoring resp, when the lease is no longer valid. s.mu must be
// held.
func (s *Scheduler) completeLocked(workerID, leaseID string, resp *repb.ExecuteResponse) bool {
	if w, ok := s.workers[workerID]; ok {
		w.lastSeen = s.clock.Now()
		if _, was := w.cancelled[leaseID]; was {
			s.releaseCancelledLocked(w, leaseID)
			s.offerLocked(w)
		}
	}
	l, ok := s.leases[leaseID]
	if !ok {
		l = s.adoptLocked(s.workers[workerID], leaseID)
		ok = l != nil
	}
	if !ok || l.worker.info.ID != workerID {
		s.emit(Event{Kind: EventLateReport, Worker: workerID, Reason: "lease " + leaseID + " is not held"})
		return false
	}
	t := l.task
	if s.sizeFallbackLocked(t, l, workerID, resp) {
		return true
	}
	if fired := s.learnedTimeoutFiredLocked(t, resp); fired > 0 {
		s.dropLeaseLocked(l)
		s.noteRetryLocked(t, workerID, RetryLearnedTimeout, fmt.Sprintf("the learned timeout of %v fired; running again with the client's timeout", fired))
		s.requeueFrontLocked(t)
		s.emit(Event{Kind: EventCompleted, Task: t.ID, Worker: workerID, Reason: "learned timeout fired; queued again with the client's timeout"})
		return true
	}
	s.learnLocked(t, l, resp)
	s.noteTimeoutLocked(t, resp)
	s.dropLeaseLocked(l)
	s.completeTaskLocked(t, resp)
	s.emit(Event{Kind: EventCompleted, Task: t.ID, Worker: workerID})
	if len(t.Req.Resources) > 0 {
		s.offerLocked(l.worker)
	}
	return true
}
