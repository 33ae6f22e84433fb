package remote

import (
	"context"
	"fmt"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Lookup asks the ActionCache for a's result, with stdout and stderr
// inlined. It reports a miss as (nil, false, nil) and skips the call (a
// miss) when the Spec says NoCache.
func (c *Client) Lookup(ctx context.Context, a *Action) (*repb.ActionResult, LookupStats, error) {
	start := time.Now()
	if a.spec.NoCache {
		return nil, LookupStats{}, nil
	}
	res, err := c.ac.GetActionResult(ctx, &repb.GetActionResultRequest{
		InstanceName:   c.instance,
		ActionDigest:   a.digest.Proto(),
		InlineStdout:   true,
		InlineStderr:   true,
		DigestFunction: c.fn,
	})
	stats := LookupStats{Duration: time.Since(start)}
	if status.Code(err) == codes.NotFound {
		return nil, stats, nil
	}
	if err != nil {
		return nil, stats, fmt.Errorf("looking up action %s in the ActionCache: %w", a.digest, err)
	}
	stats.Hit = true
	return res, stats, nil
}
