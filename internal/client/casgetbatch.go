package client

import (
	"cmp"
	"context"
	"errors"
	"sync"

	"github.com/gantry-build/gantry/internal/blobstore"
	"github.com/gantry-build/gantry/internal/digest"
)

var _ blobstore.BatchGetter = (*CAS)(nil)

// GetBatch implements blobstore.BatchGetter: blobs that fit a batch are
// read with BatchReadBlobs, as few calls as the batch limit allows, larger
// ones with ByteStream Read; every blob is checked against its digest.
// Unlike GetMany, each blob has its own outcome, so a caller reading many
// blobs learns which are missing (errs[i] wraps blobstore.ErrNotFound).
// A worker reading the Directory messages of an input tree pays one round
// trip per level of the tree instead of one per directory.
func (c *CAS) GetBatch(ctx context.Context, ds []digest.Digest, data [][]byte, errs []error) {
	at := make(map[digest.Digest][]int, len(ds))
	var want []digest.Digest
	for i, d := range ds {
		switch err := c.check(d); {
		case err != nil:
			errs[i] = err
		case d.IsEmpty():
			data[i] = []byte{}
		default:
			if _, dup := at[d]; !dup {
				want = append(want, d)
			}
			at[d] = append(at[d], i)
		}
	}
	if len(want) == 0 {
		return // nothing to read (an empty input root has only the empty blob)
	}
	set := func(d digest.Digest, b []byte, err error) {
		for _, i := range at[d] {
			data[i], errs[i] = b, err
		}
	}
	batches, large := packBatches(want, c.maxBatch)
	var mu sync.Mutex
	// runParallel's error is the first call's that failed outright; each
	// call sets its blobs' outcomes, so no blob is left without one.
	_ = runParallel(ctx, len(batches)+len(large), func(ctx context.Context, i int) error {
		if i >= len(batches) {
			d := large[i-len(batches)]
			b, err := blobstore.Get(ctx, c, d)
			mu.Lock()
			set(d, b, err)
			mu.Unlock()
			return nil
		}
		got, failed, err := c.batchReadEach(ctx, batches[i])
		mu.Lock()
		defer mu.Unlock()
		for _, d := range batches[i] {
			if err != nil {
				set(d, nil, err)
			} else if b, ok := got[d]; ok {
				set(d, b, nil)
			} else {
				set(d, nil, failed[d])
			}
		}
		return nil
	})
	// A call runParallel never started (the context ended) leaves its
	// blobs without an outcome.
	for i := range ds {
		if data[i] == nil && errs[i] == nil {
			errs[i] = cmp.Or(ctx.Err(), errors.New("it was not read"))
		}
	}
}
