package execution

import (
	"context"
	"testing"

	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/grpc/codes"

	"github.com/gantry-build/gantry/internal/digest"
)

// TestCancelBeforeSubmit: Execute names the operation in its first message,
// before the ActionCache lookup and the submit; a CancelOperation in that
// window succeeds, and the operation ends CANCELLED without running.
func TestCancelBeforeSubmit(t *testing.T) {
	release := make(chan struct{})
	e := newEnvWith(t, func(next ResultLookup) ResultLookup {
		return func(ctx context.Context, instance string, ad digest.Digest) (*repb.ActionResult, error) {
			<-release
			return next(ctx, instance, ad)
		}
	})
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
	var last *longrunningpb.Operation
	for {
		op, err := stream.Recv()
		if err != nil {
			break
		}
		last = op
	}
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
