package server

import (
	"context"
	"strings"
	"testing"

	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	rapb "github.com/bazelbuild/remote-apis/build/bazel/remote/asset/v1"
	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/genproto/googleapis/bytestream"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	adminpb "github.com/gantry-build/gantry/api/admin/v1"
	"github.com/gantry-build/gantry/internal/config"
	"github.com/gantry-build/gantry/internal/digest"
)

// TestLongNamesRefusedBeforeAuthorization: a 100 KB instance name that
// the policy pattern team-a/* would allow, or an operation name as long,
// is refused with INVALID_ARGUMENT naming the limit, on every kind of
// RPC that carries one, before authorization (which would have quoted it
// in a denial, or let it through); the message quotes only its start. A
// name at the limit passes the check.
func TestLongNamesRefusedBeforeAuthorization(t *testing.T) {
	f := startSecureFarm(t, func(c *config.Config) { c.Worker.Enabled = false })
	ctx := ctxT(t)
	alice := f.as("alice")
	long := "team-a/" + strings.Repeat("x", 100<<10)
	d := digest.Compute(digest.SHA256, []byte("z"))
	calls := map[string]func(ctx context.Context, c *grpc.ClientConn, inst string) error{
		"GetCapabilities": func(ctx context.Context, c *grpc.ClientConn, inst string) error {
			_, err := repb.NewCapabilitiesClient(c).GetCapabilities(ctx, &repb.GetCapabilitiesRequest{InstanceName: inst})
			return err
		},
		"FindMissingBlobs": func(ctx context.Context, c *grpc.ClientConn, inst string) error {
			_, err := repb.NewContentAddressableStorageClient(c).FindMissingBlobs(ctx, &repb.FindMissingBlobsRequest{InstanceName: inst, BlobDigests: []*repb.Digest{d.Proto()}})
			return err
		},
		"GetActionResult": func(ctx context.Context, c *grpc.ClientConn, inst string) error {
			_, err := repb.NewActionCacheClient(c).GetActionResult(ctx, &repb.GetActionResultRequest{InstanceName: inst, ActionDigest: d.Proto()})
			if status.Code(err) == codes.NotFound {
				return nil
			}
			return err
		},
		"ByteStream.Read": func(ctx context.Context, c *grpc.ClientConn, inst string) error {
			s, err := bytestream.NewByteStreamClient(c).Read(ctx, &bytestream.ReadRequest{ResourceName: inst + "/blobs/" + d.Hash + "/1"})
			if err != nil {
				return err
			}
			_, err = s.Recv()
			if status.Code(err) == codes.NotFound {
				return nil
			}
			return err
		},
		"ByteStream.Write": func(ctx context.Context, c *grpc.ClientConn, inst string) error {
			return uploadBlob(ctx, c, inst, []byte("z"))
		},
		"Execute": func(ctx context.Context, c *grpc.ClientConn, inst string) error {
			s, err := repb.NewExecutionClient(c).Execute(ctx, &repb.ExecuteRequest{InstanceName: inst, ActionDigest: d.Proto()})
			if err != nil {
				return err
			}
			_, err = s.Recv()
			if status.Code(err) == codes.FailedPrecondition { // the action is missing
				return nil
			}
			return err
		},
		"FetchBlob": func(ctx context.Context, c *grpc.ClientConn, inst string) error {
			_, err := rapb.NewFetchClient(c).FetchBlob(ctx, &rapb.FetchBlobRequest{InstanceName: inst, Uris: []string{"https://example.com/x"}})
			if status.Code(err) == codes.PermissionDenied { // alice may not fetch
				return nil
			}
			return err
		},
		"Admin.ListOperationDetails": func(ctx context.Context, c *grpc.ClientConn, inst string) error {
			_, err := adminpb.NewAdminClient(c).ListOperationDetails(ctx, &adminpb.ListOperationDetailsRequest{InstanceName: inst})
			return err
		},
		"Admin.GetQuota": func(ctx context.Context, c *grpc.ClientConn, inst string) error {
			_, err := adminpb.NewAdminClient(c).GetQuota(ctx, &adminpb.GetQuotaRequest{InstanceName: inst})
			if status.Code(err) == codes.PermissionDenied { // alice is no admin
				return nil
			}
			return err
		},
	}
	atLimit := "team-a/" + strings.Repeat("y", digest.MaxInstanceNameLength-len("team-a/"))
	for name, call := range calls {
		err := call(ctx, alice, long)
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "longer than the limit of 256 bytes") || len(err.Error()) > 400 {
			t.Errorf("%s with a %d-byte instance name: %.300v; want a short INVALID_ARGUMENT naming the limit", name, len(long), err)
		}
		if err := call(ctx, alice, atLimit); err != nil {
			t.Errorf("%s with a %d-byte instance name: %v", name, len(atLimit), err)
		}
	}

	// Operation names: WaitExecution, the Operations service and the
	// admin's KillOperation, which a non-admin would be denied (and the
	// denial logged) if the name got that far.
	op := strings.Repeat("o", 100<<10)
	opCalls := map[string]func() error{
		"WaitExecution": func() error {
			s, err := repb.NewExecutionClient(alice).WaitExecution(ctx, &repb.WaitExecutionRequest{Name: op})
			if err != nil {
				return err
			}
			_, err = s.Recv()
			return err
		},
		"GetOperation": func() error {
			_, err := longrunningpb.NewOperationsClient(alice).GetOperation(ctx, &longrunningpb.GetOperationRequest{Name: op})
			return err
		},
		"KillOperation": func() error {
			_, err := adminpb.NewAdminClient(alice).KillOperation(ctx, &adminpb.KillOperationRequest{Name: op})
			return err
		},
	}
	for name, call := range opCalls {
		if err := call(); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "operation name") || len(err.Error()) > 400 {
			t.Errorf("%s with a %d-byte operation name: %.300v; want a short INVALID_ARGUMENT naming the limit", name, len(op), err)
		}
	}
}
