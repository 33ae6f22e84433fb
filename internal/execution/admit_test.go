package execution

import (
	"context"
	"io"
	"testing"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/grpc/codes"

	"github.com/gantry-build/gantry/internal/blobstore"
	"github.com/gantry-build/gantry/internal/digest"
)

// remoteCAS is a CAS across the network, as a scheduler node reads the
// frontend's: each read takes a while and fails once its context ends.
type remoteCAS struct{ blobstore.Store }

func (c remoteCAS) Open(ctx context.Context, d digest.Digest, offset int64) (io.ReadCloser, error) {
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(100 * time.Millisecond):
	}
	return c.Store.Open(ctx, d, offset)
}

// A client that leaves as soon as Execute named the operation (to follow
// it later with WaitExecution, as REAPI allows) still has it run: the
// rest of the admission (reading the action from the CAS, the queueing)
// does not end with its call. It used to fail the operation ("the
// Execute call that named this operation failed before running it"),
// and on a scheduler node, kept only in memory, it was unknown after a
// fail-over (issue 38, bench scale --drop with --kill-after).
func TestOperationNamedToAClientThatLeftStillRuns(t *testing.T) {
	e := newEnvCAS(t, nil, nil, func(s blobstore.Store) blobstore.Store { return remoteCAS{s} })
	w := e.worker("w1")
	ctx := context.Background()
	ad := e.action(emptyRoot(), simpleCmd("/bin/true"))
	sctx, cancel := context.WithCancel(ctx)
	stream, err := e.exec.Execute(sctx, &repb.ExecuteRequest{ActionDigest: ad.Proto(), SkipCacheLookup: true})
	if err != nil {
		t.Fatal(err)
	}
	first, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	cancel() // gone before the action was read from the CAS
	time.Sleep(300 * time.Millisecond)

	ws, err := e.exec.WaitExecution(ctx, &repb.WaitExecutionRequest{Name: first.Name})
	if err != nil {
		t.Fatal(err)
	}
	op, err := ws.Recv()
	if err != nil {
		t.Fatalf("WaitExecution(%s): %v", first.Name, err)
	}
	if op.Done {
		t.Fatalf("the operation whose client left ended at once: %v, want it queued", responseOf(t, op).Status)
	}
	a := w.poll()
	if a == nil {
		t.Fatal("no assignment: the operation was not queued")
	}
	w.complete(a, &repb.ActionResult{}, codes.OK, "")
	for !op.Done {
		if op, err = ws.Recv(); err != nil {
			t.Fatalf("WaitExecution(%s): %v", first.Name, err)
		}
	}
	if st := responseOf(t, op).Status; st.GetCode() != int32(codes.OK) {
		t.Errorf("the operation ended with %v, want OK", st)
	}
}
