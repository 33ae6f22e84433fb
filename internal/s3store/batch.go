package s3store

import (
	"context"

	"golang.org/x/sync/errgroup"

	"github.com/gantry-build/gantry/internal/blobstore"
	"github.com/gantry-build/gantry/internal/digest"
)

var (
	_ blobstore.BatchPutter        = (*CAS)(nil)
	_ blobstore.TrustedBatchPutter = (*CAS)(nil)
)

// PutBatch implements blobstore.BatchPutter: every blob is verified, then
// stored as PutVerified does.
func (c *CAS) PutBatch(ctx context.Context, ds []digest.Digest, data [][]byte, errs []error) {
	blobstore.VerifyThenPut(ctx, c, ds, data, errs)
}

// PutVerified implements blobstore.TrustedBatchPutter: the blobs of a
// BatchUpdateBlobs call are sent HeadConcurrency at a time, rather than
// one round trip after another. A blob this process saw in the bucket
// recently is not sent again.
func (c *CAS) PutVerified(ctx context.Context, blobs []blobstore.VerifiedBlob, errs []error) {
	names := make([]string, len(blobs))
	for i, b := range blobs {
		names[i] = c.name(b.Digest())
	}
	present := make([]bool, len(blobs))
	c.b.exist.lookup(names, c.b.freshSince(), present)
	var g errgroup.Group
	g.SetLimit(c.b.cfg.HeadConcurrency)
	for i := range blobs {
		if present[i] {
			continue
		}
		g.Go(func() error {
			errs[i] = blobstore.PutVerified(ctx, c, blobs[i])
			return nil
		})
	}
	g.Wait()
}
