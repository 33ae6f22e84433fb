package actioncache

import (
	"context"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"

	"github.com/gantry-build/gantry/internal/blobstore"
	"github.com/gantry-build/gantry/internal/digest"
)

// Inlining says which blobs of a result to carry inline.
type Inlining struct {
	Stdout, Stderr bool
	// Files says which output files (by path) to inline; nil: none.
	Files func(path string) bool
	// Budget bounds the bytes inlined in all.
	Budget int64
}

// Inline fills ar's stdout, stderr and output files' contents from cas as
// what says, in that order, while the budget lasts: GetActionResult's
// inline_* fields, and the outputs Gantry's Execute sends its own client.
// A blob that cannot be read is left out (the client fetches it). It
// changes ar: pass a copy of a result that is shared.
func Inline(ctx context.Context, cas blobstore.Store, fn digest.Function, ar *repb.ActionResult, what Inlining) {
	budget := what.Budget
	fetch := func(pd *repb.Digest) []byte {
		if pd == nil || pd.SizeBytes == 0 || pd.SizeBytes > budget {
			return nil
		}
		d, err := digest.FromProto(fn, pd)
		if err != nil {
			return nil
		}
		data, err := blobstore.Get(ctx, cas, d)
		if err != nil {
			return nil
		}
		budget -= int64(len(data))
		return data
	}
	if what.Stdout && len(ar.StdoutRaw) == 0 {
		ar.StdoutRaw = fetch(ar.StdoutDigest)
	}
	if what.Stderr && len(ar.StderrRaw) == 0 {
		ar.StderrRaw = fetch(ar.StderrDigest)
	}
	if what.Files == nil {
		return
	}
	for _, f := range ar.OutputFiles {
		if len(f.Contents) == 0 && what.Files(f.Path) {
			f.Contents = fetch(f.Digest)
		}
	}
}
