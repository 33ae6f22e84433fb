package blobstore_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/gantry-build/gantry/internal/blobstore"
	"github.com/gantry-build/gantry/internal/s3store"
	"github.com/gantry-build/gantry/internal/testutil/miniotest"
)

// The object store backend passes the same conformance tests as the
// disk and memory stores, against a real MinIO server (one per test, a
// fresh bucket each), with and without the disk tier in front.
func init() {
	blobstore.AddConformanceBackend("s3", func(t *testing.T, _ int64) blobstore.Store { return openS3(t).CAS() })
	blobstore.AddConformanceBackend("s3-tiered", func(t *testing.T, maxBytes int64) blobstore.Store {
		cache, err := blobstore.NewDisk(t.TempDir(), blobstore.DiskOptions{MaxBytes: maxBytes})
		if err != nil {
			t.Fatal(err)
		}
		return blobstore.NewTiered(openS3(t).CAS(), cache, blobstore.NoTierObserver{})
	})
}

func openS3(t testing.TB) *s3store.Bucket {
	return openS3Parts(t, 5<<20)
}

// openS3Parts opens a fresh bucket on a MinIO server of its own, sending
// blobs larger than partSize as multipart uploads of such parts.
func openS3Parts(t testing.TB, partSize int64) *s3store.Bucket {
	s := miniotest.Start(t)
	cfg := s3store.Config{
		Endpoint:              s.Endpoint,
		Bucket:                s.Bucket(t),
		PathStyle:             true,
		RefreshAfter:          time.Hour,
		HeadConcurrency:       8,
		ExistenceCacheEntries: 1000,
		PartSize:              partSize,
	}
	s.Setenv(t)
	b, err := s3store.Open(context.Background(), cfg, s3store.Unobserved{}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b
}
