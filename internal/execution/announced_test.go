package execution

import (
	"context"
	"testing"
	"time"

	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/gantry-build/gantry/internal/digest"
)

// gatedEnv is an env whose ActionCache lookups wait until release is
// closed: Execute has named its operation and not yet submitted it.
func gatedEnv(t *testing.T) (e *env, release chan struct{}) {
	release = make(chan struct{})
	e = newEnvWith(t, func(next ResultLookup) ResultLookup {
		return func(ctx context.Context, instance string, ad digest.Digest) (*repb.ActionResult, error) {
			<-release
			return next(ctx, instance, ad)
		}
	})
	return e, release
}

// waitWhileAnnounced starts Execute of ad in a gatedEnv, reads its first
// message and starts a WaitExecution for the operation it names; it
// returns once that WaitExecution waits on the server (bounded).
func waitWhileAnnounced(ctx context.Context, t *testing.T, e *env, ad digest.Digest) (first *longrunningpb.Operation, stream, wait grpc.ServerStreamingClient[longrunningpb.Operation]) {
	t.Helper()
	stream, err := e.exec.Execute(ctx, &repb.ExecuteRequest{ActionDigest: ad.Proto()})
	if err != nil {
		t.Fatal(err)
	}
	if first, err = stream.Recv(); err != nil {
		t.Fatal(err)
	}
	if wait, err = e.exec.WaitExecution(ctx, &repb.WaitExecutionRequest{Name: first.Name}); err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		e.svc.pending.mu.Lock()
		n := e.svc.pending.names[first.Name]
		waiting := n != nil && n.waiting > 0
		e.svc.pending.mu.Unlock()
		if waiting {
			return first, stream, wait
		}
		if i == 3000 {
			t.Fatal("WaitExecution did not wait for the announced operation within 3s")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestCancelBeforeSubmit: Execute names the operation in its first message,
// before the ActionCache lookup and the submit; a CancelOperation in that
// window succeeds, and the operation ends CANCELLED without running.
func TestCancelBeforeSubmit(t *testing.T) {
	e, release := gatedEnv(t)
	ctx := context.Background()
	ad := e.action(emptyRoot(), simpleCmd("sleep", "100"))
	stream, err := e.exec.Execute(ctx, &repb.ExecuteRequest{ActionDigest: ad.Proto()})
	if err != nil {
		t.Fatal(err)
	}
	first, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.ops.CancelOperation(ctx, &longrunningpb.CancelOperationRequest{Name: first.Name}); err != nil {
		t.Fatalf("CancelOperation of an operation Execute named: %v", err)
	}
	close(release)
	last := lastOperation(stream)
	if last == nil || !last.Done {
		t.Fatalf("the stream ended without a done operation: %v", last)
	}
	if resp := responseOf(t, last); codes.Code(resp.Status.Code) != codes.Canceled {
		t.Fatalf("status %v, want CANCELLED", resp.Status)
	}
	if _, _, err := e.sched.Watch(first.Name); err == nil {
		t.Errorf("the cancelled operation reached the scheduler")
	}
}

// TestWaitBeforeSubmit: a WaitExecution for a name Execute has sent but not
// yet submitted (it is still checking the ActionCache) waits for the submit
// and then follows the operation, instead of answering NOT_FOUND.
func TestWaitBeforeSubmit(t *testing.T) {
	e, release := gatedEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ad := e.action(emptyRoot(), simpleCmd("sleep", "100"))
	// The wait must be waiting on the server before the submit.
	first, _, wait := waitWhileAnnounced(ctx, t, e, ad)
	close(release)
	op, err := wait.Recv()
	if err != nil {
		t.Fatalf("WaitExecution of an operation Execute named, before its submit: %v", err)
	}
	if op.Name != first.Name || op.Done {
		t.Fatalf("WaitExecution's first message: %v, want the running operation %s", op, first.Name)
	}
	if _, err := e.ops.CancelOperation(ctx, &longrunningpb.CancelOperationRequest{Name: first.Name}); err != nil {
		t.Fatal(err)
	}
	last := lastOperation(wait)
	if last == nil || !last.Done {
		t.Fatalf("WaitExecution ended without a done operation: %v", last)
	}
	if resp := responseOf(t, last); codes.Code(resp.Status.Code) != codes.Canceled {
		t.Fatalf("status %v, want CANCELLED", resp.Status)
	}
}

// A WaitExecution whose caller gives up while the operation is still
// announced returns; remove releases the waiters; a name never announced
// is not waited for.
func TestAnnouncedWait(t *testing.T) {
	a := newAnnounced()
	if a.wait(context.Background(), "nope") {
		t.Fatal("wait reported an unknown name as announced")
	}
	a.add("op")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if !a.wait(ctx, "op") {
		t.Fatal("wait did not report an announced name")
	}
	gone := a.names["op"].gone
	a.cancel("op")
	if !a.remove("op") {
		t.Fatal("remove lost the cancel")
	}
	select {
	case <-gone:
	default:
		t.Fatal("remove did not release the waiters")
	}
	if a.remove("op") {
		t.Fatal("a second remove reported a cancel")
	}
}

// lastOperation reads stream to its end and returns its last message.
func lastOperation(stream interface {
	Recv() (*longrunningpb.Operation, error)
}) *longrunningpb.Operation {
	var last *longrunningpb.Operation
	for {
		op, err := stream.Recv()
		if err != nil {
			return last
		}
		last = op
	}
}
