package worker

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
)

// TestExecuteTimeoutIsDeadlineExceeded: an action past its timeout is
// killed by the Execute stage, and the Report stage makes that
// DEADLINE_EXCEEDED with the output so far in the result.
func TestExecuteTimeoutIsDeadlineExceeded(t *testing.T) {
	w, store, _ := stageWorker(t)
	ctx := context.Background()
	j := newJob(t, w, store, assignment(t, store, "l1", actionSpec{script: "echo started; exec sleep 60", timeout: 200 * time.Millisecond}))
	defer j.releaseAll()
	root, err := w.inputs.Fetch(ctx, j)
	if err != nil {
		t.Fatal(err)
	}
	ex, err := w.executor.Execute(ctx, j, root)
	if err != nil {
		t.Fatal(err)
	}
	if !ex.res.TimedOut {
		t.Fatalf("the action was not killed for its timeout: %+v", ex.res)
	}
	o, err := w.reporter.Report(ctx, j, root, ex)
	if err != nil {
		t.Fatal(err)
	}
	if codes.Code(o.req.StatusCode) != codes.DeadlineExceeded || o.req.UpdateActionCache {
		t.Errorf("reported %v, want DEADLINE_EXCEEDED, not cached", o.req)
	}
	if o.result == nil {
		t.Fatal("no result: the output so far is lost")
	}
	if got := blob(t, store, o.result.StdoutDigest); got != "started\n" {
		t.Errorf("stdout so far %q", got)
	}
}

// TestExecuteCommandThatCannotStart: a program that does not exist fails
// the action with INVALID_ARGUMENT, and the lease holds nothing after.
func TestExecuteCommandThatCannotStart(t *testing.T) {
	w, store, sched := stageWorker(t)
	a := assignment(t, store, "l1", actionSpec{args: []string{"/no/such/program"}})
	reqs := run(t, w, sched, a)
	if len(reqs) != 1 || codes.Code(reqs[0].StatusCode) != codes.InvalidArgument {
		t.Fatalf("reported %v, want one INVALID_ARGUMENT", reqs)
	}
	checkReleased(t, w)
}
