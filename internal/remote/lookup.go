package remote

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Lookup asks the ActionCache for a's result, with stdout and stderr
// inlined, and the output files that are missing locally too (the server
// inlines up to its limit): a hit then needs no second call to fetch
// them. Files present locally are not inlined, as Download usually finds
// them up to date. It reports a miss as (nil, false, nil) and skips the call (a
// miss) when the Spec says NoCache.
func (c *Client) Lookup(ctx context.Context, a *Action) (*repb.ActionResult, LookupStats, error) {
	start := time.Now()
	if a.spec.NoCache {
		return nil, LookupStats{}, nil
	}
	res, err := c.ac.GetActionResult(ctx, &repb.GetActionResultRequest{
		InstanceName:      c.instance,
		ActionDigest:      a.digest.Proto(),
		InlineStdout:      true,
		InlineStderr:      true,
		InlineOutputFiles: missingOutputs(a),
		DigestFunction:    c.fn,
	})
	stats := LookupStats{Duration: time.Since(start)}
	if status.Code(err) == codes.NotFound {
		return nil, stats, nil
	}
	// A hit needs no upload, and after an error the caller gives the
	// action up: either way the input bytes kept for the upload can go.
	a.dropKept()
	if err != nil {
		return nil, stats, fmt.Errorf("looking up action %s in the ActionCache: %w", a.digest, err)
	}
	stats.Hit = true
	return res, stats, nil
}

// missingOutputs are a's output files (as the Command names them,
// relative to the working directory) that do not exist locally.
func missingOutputs(a *Action) []string {
	base := a.localWorkDir()
	var missing []string
	for _, f := range a.command.OutputFiles {
		if _, err := os.Lstat(filepath.Join(base, filepath.FromSlash(f))); errors.Is(err, fs.ErrNotExist) {
			missing = append(missing, f)
		}
	}
	return missing
}
