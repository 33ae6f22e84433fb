package worker

import (
	"context"
	"errors"
	"os"
	"strings"

	"google.golang.org/grpc/codes"

	"github.com/gantry-build/gantry/internal/digest"
	"github.com/gantry-build/gantry/internal/worker/dircache"
	"github.com/gantry-build/gantry/internal/worker/execroot"
	"github.com/gantry-build/gantry/internal/worker/filecache"
)

// inputFetcher is the InputFetch stage: it materializes an action's input
// root in an exec root, its files hardlinked from the file cache and, for
// a sandboxed action, its big input directories bound whole from the tree
// cache (trees, nil when worker.link_input_directories is off or there is
// no sandbox).
type inputFetcher struct {
	cache *filecache.Cache
	trees *dircache.Cache
	wrap  wrapping
	roots *rootPool
}

func newInputFetcher(cache *filecache.Cache, trees *dircache.Cache, wrap wrapping, roots *rootPool) *inputFetcher {
	return &inputFetcher{cache: cache, trees: trees, wrap: wrap, roots: roots}
}

// Fetch builds j's exec root; j holds it until it leaves the worker. A
// failure is a *statusError: FAILED_PRECONDITION naming every missing
// blob, INVALID_ARGUMENT for a malformed tree, RESOURCE_EXHAUSTED for a
// full disk, INTERNAL otherwise.
func (f *inputFetcher) Fetch(ctx context.Context, j *job) (*execroot.Root, error) {
	rootDigest, err := digest.FromProto(j.ad.Function, j.action.InputRootDigest)
	if err != nil {
		return nil, failf(codes.InvalidArgument, "action %s: input_root_digest: %v", j.ad, err)
	}
	link := execroot.Linking{Chroot: f.wrap.chroot}
	if f.trees != nil && f.wrap.sandboxes(j.action, j.cmd) {
		// Only the sandbox can bind a tree read-only into the exec root.
		link.Trees = f.trees
	}
	rec := f.roots.take()
	root, err := rec.Build(ctx, f.cache, j.cas, j.ad.Function, rootDigest, j.cmd, link)
	if err != nil {
		os.RemoveAll(rec.Dir)
		return nil, inputFailure(j.ad, err)
	}
	j.hold(func() { f.roots.give(root) })
	return root, nil
}

// inputFailure maps an input materialization error to a status.
func inputFailure(ad digest.Digest, err error) error {
	var missing *execroot.MissingError
	var invalid *execroot.InvalidError
	switch {
	case errors.As(err, &missing):
		se := failf(codes.FailedPrecondition, "%d input blob(s) of action %s are missing from the CAS; upload them and retry", len(missing.Digests), ad)
		for _, d := range missing.Digests {
			se.missing = append(se.missing, "blobs/"+d.ResourceSegment())
		}
		return se
	case errors.As(err, &invalid):
		return failf(codes.InvalidArgument, "action %s: %v", ad, err)
	}
	if strings.Contains(err.Error(), "no space left") {
		return failf(codes.ResourceExhausted, "worker ran out of disk space preparing action %s: %v", ad, err)
	}
	return failf(codes.Internal, "preparing the inputs of action %s failed: %v", ad, err)
}
