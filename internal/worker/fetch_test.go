package worker

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/gantry-build/gantry/internal/digest"
)

// TestFetchMaterializesInputs: the InputFetch stage builds the exec root
// from the CAS, and the job holds the root until it leaves: then the root
// is emptied and goes back to the pool for the next action.
func TestFetchMaterializesInputs(t *testing.T) {
	w, store, _ := stageWorker(t)
	j := newJob(t, w, store, assignment(t, store, "l1", actionSpec{script: "true", inputs: map[string]string{"in.txt": "input data"}}))
	root, err := w.inputs.Fetch(context.Background(), j)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root.Dir, "in.txt"))
	if err != nil || string(b) != "input data" {
		t.Fatalf("input file in the exec root: %q, %v", b, err)
	}
	j.releaseAll()
	if _, err := os.Stat(filepath.Join(root.Dir, "in.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the exec root was not emptied when the job left: %v", err)
	}
	if got := w.roots.take().Dir; got != root.Dir {
		t.Errorf("the next action gets root %s, not the emptied %s", got, root.Dir)
	}
}

// TestFetchMissingInputIsFailedPrecondition: an input blob absent from
// the CAS fails the action with FAILED_PRECONDITION naming the blob as
// "blobs/{hash}/{size}" (the REAPI's PreconditionFailure subject, which
// the scheduler puts in the status details), both from the stage and as
// the scheduler is told; the lease then holds nothing.
func TestFetchMissingInputIsFailedPrecondition(t *testing.T) {
	w, store, sched := stageWorker(t)
	a := assignment(t, store, "l1", actionSpec{script: "true", inputs: map[string]string{"here": "x"}, absent: []string{"gone"}})
	gone := digest.Compute(digest.SHA256, []byte("gone"))
	want := "blobs/" + gone.Hash + "/4"

	_, err := w.inputs.Fetch(context.Background(), newJob(t, w, store, a))
	var se *statusError
	if !errors.As(err, &se) || se.code != codes.FailedPrecondition || len(se.missing) != 1 || se.missing[0] != want {
		t.Fatalf("Fetch: %#v, want FAILED_PRECONDITION missing [%s]", err, want)
	}

	reqs := run(t, w, sched, a)
	if len(reqs) != 1 {
		t.Fatalf("the scheduler was told %d times, want once", len(reqs))
	}
	r := reqs[0]
	if codes.Code(r.StatusCode) != codes.FailedPrecondition || len(r.MissingBlobs) != 1 || r.MissingBlobs[0] != want || r.ActionResult != nil {
		t.Errorf("reported %v, want FAILED_PRECONDITION with missing %s and no result", r, want)
	}
	if r.LeaseId != "l1" || r.WorkerId != "w1" {
		t.Errorf("reported for lease %q of worker %q", r.LeaseId, r.WorkerId)
	}
	checkReleased(t, w)
}
