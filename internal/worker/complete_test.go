package worker

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	workerpb "github.com/gantry-build/gantry/api/worker/v1"
)

// TestOneCompletionPerLease: however a lease ends (a result, a failure
// before any stage ran, a failing stage), the scheduler is told exactly
// once and the worker then holds nothing for it: no slot of any stage,
// no cores, no lease, no task.
func TestOneCompletionPerLease(t *testing.T) {
	w, store, sched := stageWorker(t)
	bad := assignment(t, store, "bad", actionSpec{script: "true"})
	bad.Action = []byte("not an Action")
	for _, c := range []struct {
		name string
		spec actionSpec
		want codes.Code
	}{
		{name: "result", spec: actionSpec{script: "echo hi"}, want: codes.OK},
		{name: "input missing", spec: actionSpec{script: "true", absent: []string{"x"}}, want: codes.FailedPrecondition},
		{name: "does not start", spec: actionSpec{args: []string{"./missing"}}, want: codes.InvalidArgument},
		{name: "output a fifo", spec: actionSpec{script: "mkfifo o", outputs: []string{"o"}}, want: codes.FailedPrecondition},
	} {
		reqs := run(t, w, sched, assignment(t, store, c.name, c.spec))
		if len(reqs) != 1 || codes.Code(reqs[0].StatusCode) != c.want {
			t.Errorf("%s: reported %v, want once with %v", c.name, reqs, c.want)
		}
		checkReleased(t, w)
	}
	if reqs := run(t, w, sched, bad); len(reqs) != 1 || codes.Code(reqs[0].StatusCode) != codes.InvalidArgument {
		t.Errorf("unparsable action: reported %v, want once with INVALID_ARGUMENT", reqs)
	}
	checkReleased(t, w)
}

// TestCancelledLeaseCompletesSilently: a lease cancelled while its action
// runs, or while it waits for cores, tells the scheduler nothing (it
// cancelled it) but still leaves through the completion path: the action
// is killed and the worker holds nothing for it after.
func TestCancelledLeaseCompletesSilently(t *testing.T) {
	t.Run("executing", func(t *testing.T) {
		w, store, sched := stageWorker(t)
		a := assignment(t, store, "l1", actionSpec{script: "exec sleep 60"})
		l, ctx := lease(t, w, a)
		done := make(chan struct{})
		go func() { defer close(done); w.runStages(ctx, l, a) }()
		waitUntil(t, "the action to start", func() bool {
			w.mu.Lock()
			defer w.mu.Unlock()
			return l.disk.kill != nil
		})
		l.cancel()
		waitUntil(t, "the cancelled action to end", func() bool { return closed(done) })
		if reqs := sched.completed(); len(reqs) != 0 {
			t.Errorf("a cancelled lease reported %v", reqs)
		}
		checkReleased(t, w)
	})
	t.Run("waiting for cores", func(t *testing.T) {
		w, store, sched := stageWorker(t)
		if !w.exec.TryAcquire(testSlots) { // another action holds every core
			t.Fatal("cores busy")
		}
		a := assignment(t, store, "l1", actionSpec{script: "true", inputs: map[string]string{"in": "x"}})
		l, ctx := lease(t, w, a)
		done := make(chan struct{})
		go func() { defer close(done); w.runStages(ctx, l, a) }()
		waitUntil(t, "the inputs to be fetched", func() bool {
			_, err := os.Stat(filepath.Join(w.roots.dir, "1", "in"))
			return err == nil
		})
		l.cancel()
		waitUntil(t, "the cancelled lease to leave", func() bool { return closed(done) })
		w.exec.Release(testSlots)
		if reqs := sched.completed(); len(reqs) != 0 {
			t.Errorf("a cancelled lease reported %v", reqs)
		}
		checkReleased(t, w)
	})
}

func closed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// gatedSink is a scheduler whose first two Complete calls (as many as
// a worker has on their way) wait for a gate, and that records each
// call; old answers as a scheduler of an earlier release does (no
// completions_accepted).
type gatedSink struct {
	mu    sync.Mutex
	calls []*workerpb.CompleteRequest
	gate  chan struct{}
	old   bool
}

func (s *gatedSink) Complete(ctx context.Context, req *workerpb.CompleteRequest, _ ...grpc.CallOption) (*workerpb.CompleteResponse, error) {
	s.mu.Lock()
	gated := len(s.calls) < maxReportsInFlight
	s.calls = append(s.calls, req)
	s.mu.Unlock()
	if gated {
		<-s.gate
	}
	resp := &workerpb.CompleteResponse{Accepted: req.LeaseId != ""}
	if !s.old {
		for range req.Completions {
			resp.CompletionsAccepted = append(resp.CompletionsAccepted, true)
		}
	}
	return resp, nil
}

func (s *gatedSink) recorded() []*workerpb.CompleteRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*workerpb.CompleteRequest(nil), s.calls...)
}

// Outcomes that become ready while two reports are on their way go
// together in later Complete calls, each reported once and accepted;
// against a scheduler of an earlier release (no completions_accepted)
// a batch's outcomes are sent again, each alone.
func TestCompleterBatchesOutcomesReadyTogether(t *testing.T) {
	for _, old := range []bool{false, true} {
		sink := &gatedSink{gate: make(chan struct{}), old: old}
		c := newCompleter(sink, "w1", nil, false, 64, slog.New(slog.NewTextHandler(io.Discard, nil)))
		results := make(chan bool, 5)
		deliver := func(lease string) {
			go func() { ok, _ := c.deliver(&workerpb.CompleteRequest{WorkerId: "w1", LeaseId: lease}); results <- ok }()
		}
		deliver("l0")
		deliver("l1")
		waitUntil(t, "two reports to be on their way", func() bool { return len(sink.recorded()) == 2 })
		for _, l := range []string{"l2", "l3", "l4"} {
			deliver(l)
		}
		waitUntil(t, "three outcomes to wait", func() bool {
			c.mu.Lock()
			defer c.mu.Unlock()
			return len(c.pending) == 3
		})
		close(sink.gate)
		for range 5 {
			if !receive(t, results) {
				t.Errorf("old=%v: an outcome was not accepted", old)
			}
		}
		reported := map[string]int{}
		batched := 0
		for _, call := range sink.recorded() {
			if call.LeaseId != "" {
				reported[call.LeaseId]++
			}
			if len(call.Completions) > 1 {
				batched++
			}
			for _, r := range call.Completions {
				if !old {
					reported[r.LeaseId]++
				}
			}
		}
		if batched == 0 {
			t.Errorf("old=%v: no call carried a batch: %v", old, sink.recorded())
		}
		for _, l := range []string{"l0", "l1", "l2", "l3", "l4"} {
			if reported[l] != 1 {
				t.Errorf("old=%v: %s reported %d times, want once", old, l, reported[l])
			}
		}
	}
}

func receive(t *testing.T, ch <-chan bool) bool {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatal("an outcome was never reported")
		return false
	}
}

// laterSink accepts every outcome to store it later, and never says it
// stored one.
type laterSink struct{}

func (laterSink) Complete(_ context.Context, req *workerpb.CompleteRequest, _ ...grpc.CallOption) (*workerpb.CompleteResponse, error) {
	resp := &workerpb.CompleteResponse{Accepted: req.LeaseId != "", StoredLater: true}
	for range req.Completions {
		resp.CompletionsAccepted = append(resp.CompletionsAccepted, true)
	}
	return resp, nil
}

type noLeaseBook struct{}

func (noLeaseBook) completing(*activeLease) {}

// Past the bound of results kept unstored, a finishing lease keeps its
// slots (new work waits) until a kept result is stored.
func TestKeptResultsBoundHoldsSlots(t *testing.T) {
	c := newCompleter(laterSink{}, "w1", noLeaseBook{}, true, 1, slog.New(slog.NewTextHandler(io.Discard, nil)))
	finish := func(id string) chan struct{} {
		released := make(chan struct{})
		j := &job{lease: &activeLease{id: id}}
		j.hold(func() { close(released) })
		go c.Finish(j, &outcome{req: &workerpb.CompleteRequest{}})
		return released
	}
	first := finish("l1")
	waitUntil(t, "the first lease's slots to be let go of", func() bool { return closed(first) })
	second := finish("l2")
	time.Sleep(100 * time.Millisecond)
	if closed(second) {
		t.Fatal("a second result was kept past the bound of 1: its slots were let go of")
	}
	c.kept.stored([]string{"l1"}) // the scheduler says it stored l1
	waitUntil(t, "the second lease's slots to be let go of", func() bool { return closed(second) })
	if got := c.kept.leases(); len(got) != 1 || got[0] != "l2" {
		t.Errorf("kept %v, want [l2]", got)
	}
}

// storedAtOnceSink stores every outcome before it answers, and lists it
// as stored in the same reply (a scheduler whose state is in memory).
type storedAtOnceSink struct{}

func (storedAtOnceSink) Complete(_ context.Context, req *workerpb.CompleteRequest, _ ...grpc.CallOption) (*workerpb.CompleteResponse, error) {
	resp := &workerpb.CompleteResponse{Accepted: req.LeaseId != "", StoredLater: true}
	if req.LeaseId != "" {
		resp.StoredCompletions = append(resp.StoredCompletions, req.LeaseId)
	}
	for _, c := range req.Completions {
		resp.CompletionsAccepted = append(resp.CompletionsAccepted, true)
		resp.StoredCompletions = append(resp.StoredCompletions, c.LeaseId)
	}
	return resp, nil
}

// A result listed as stored in the very reply that accepts it (or a
// concurrent one) is not kept: it would hold its place for good.
func TestResultStoredInItsOwnReplyIsNotKept(t *testing.T) {
	c := newCompleter(storedAtOnceSink{}, "w1", noLeaseBook{}, true, 1, slog.New(slog.NewTextHandler(io.Discard, nil)))
	for _, id := range []string{"l1", "l2"} {
		j := &job{lease: &activeLease{id: id}}
		c.Finish(j, &outcome{req: &workerpb.CompleteRequest{}})
		if got := c.kept.leases(); len(got) != 0 {
			t.Fatalf("after %s: kept %v, want none (each was listed as stored)", id, got)
		}
	}
}
