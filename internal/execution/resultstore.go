package execution

import (
	"context"
	"errors"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/grpc/status"

	"github.com/gantry-build/gantry/internal/digest"
	"github.com/gantry-build/gantry/internal/scheduler"
)

// ResultStore writes a result to the action cache.
type ResultStore func(ctx context.Context, instance string, action digest.Digest, ar *repb.ActionResult) error

var _ scheduler.ActionCacheWriter = ResultStore(nil)

// WriteActionResult implements scheduler.ActionCacheWriter: the
// scheduler writes the results of completed leases through it. Its error
// is the store's message alone (a gRPC status's, without the code),
// what the operation's ExecuteResponse.message then quotes. A nil
// ResultStore caches nothing.
func (f ResultStore) WriteActionResult(ctx context.Context, instance string, action digest.Digest, ar *repb.ActionResult) error {
	if f == nil {
		return nil
	}
	if err := f(ctx, instance, action, ar); err != nil {
		return errors.New(status.Convert(err).Message())
	}
	return nil
}
