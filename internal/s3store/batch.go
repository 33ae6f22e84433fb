package s3store

import (
	"context"

	"golang.org/x/sync/errgroup"

	"github.com/gantry-build/gantry/internal/blobstore"
	"github.com/gantry-build/gantry/internal/digest"
)

var _ blobstore.BatchPutter = (*CAS)(nil)

// PutBatch implements blobstore.BatchPutter: the blobs of a
// BatchUpdateBlobs call are verified and sent HeadConcurrency at a time,
// rather than one round trip after another. A blob this process saw in
// the bucket recently is verified but not sent again.
func (c *CAS) PutBatch(ctx context.Context, ds []digest.Digest, data [][]byte, errs []error) {
	names := make([]string, len(ds))
	for i, d := range ds {
		names[i] = c.name(d)
	}
	present := make([]bool, len(ds))
	c.b.exist.lookup(names, c.b.freshSince(), present)
	var g errgroup.Group
	g.SetLimit(c.b.cfg.HeadConcurrency)
	for i := range ds {
		g.Go(func() error {
			if present[i] {
				errs[i] = blobstore.NewVerifier(ds[i]).WriteAll(data[i])
			} else {
				errs[i] = blobstore.Put(ctx, c, ds[i], data[i])
			}
			return nil
		})
	}
	g.Wait()
}
