package blobstore

import (
	"context"
	"fmt"
	"io"

	"github.com/gantry-build/gantry/internal/digest"
)

// RangeOpener is a Store that can read a bounded range of a blob. A
// backend that pays per request and per byte (an S3 ranged GET) then
// fetches only the bytes asked for, where Open would fetch the rest of
// the blob only for the caller to stop reading early.
type RangeOpener interface {
	// OpenRange returns a reader of at most limit bytes of blob d from
	// byte offset on; limit 0 reads to the end. It returns ErrNotFound
	// when the blob is absent.
	OpenRange(ctx context.Context, d digest.Digest, offset, limit int64) (io.ReadCloser, error)
}

// OpenRange reads at most limit bytes of blob d from byte offset on (limit
// 0: to the end), with s's own OpenRange if it is a RangeOpener, else with
// Open and a reader that stops after limit bytes.
func OpenRange(ctx context.Context, s Store, d digest.Digest, offset, limit int64) (io.ReadCloser, error) {
	if limit < 0 {
		return nil, negativeLimit(d, limit)
	}
	if ro, ok := s.(RangeOpener); ok {
		return ro.OpenRange(ctx, d, offset, limit)
	}
	r, err := s.Open(ctx, d, offset)
	if err != nil || limit == 0 {
		return r, err
	}
	return limitReadCloser(r, limit), nil
}

// limitReadCloser reads at most n bytes of r; closing it closes r.
func limitReadCloser(r io.ReadCloser, n int64) io.ReadCloser {
	return struct {
		io.Reader
		io.Closer
	}{io.LimitReader(r, n), r}
}

func negativeLimit(d digest.Digest, limit int64) error {
	return fmt.Errorf("reading blob %s: limit %d is negative; use 0 to read to the end", d, limit)
}
