//go:build linux

package frontend

import (
	"context"
	"testing"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gantry-build/gantry/internal/blobstore"
	"github.com/gantry-build/gantry/internal/digest"
)

// TestWrongBytesNeverStored sends, through every RPC that stores blobs
// (ByteStream Write, plain and zstd, and BatchUpdateBlobs), bytes that
// are not the blob their digest names, to every storage backend the
// frontend is deployed on. The service edge hashes each blob once and the
// stores below it trust what it hands them: each upload must be refused
// with INVALID_ARGUMENT, and neither the blob's digest nor that of the
// bytes sent may then be held by the store, nor by either side of a tier.
// The large blob goes to a bucket as a multipart upload (more than the
// 16 MiB default part_size), and to the disk as a file of its own.
func TestWrongBytesNeverStored(t *testing.T) {
	type backend struct {
		name   string
		open   func(t *testing.T) blobstore.Store
		stores func(s blobstore.Store) []blobstore.Store // what must not hold the blob
	}
	disk := func(t *testing.T) *blobstore.Disk {
		s, err := blobstore.NewDisk(t.TempDir(), blobstore.DiskOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	var remote, cache blobstore.Store
	tierStores := func(s blobstore.Store) []blobstore.Store { return []blobstore.Store{s, remote, cache} }
	one := func(s blobstore.Store) []blobstore.Store { return []blobstore.Store{s} }
	backends := []backend{
		{"memory", func(t *testing.T) blobstore.Store { return blobstore.NewMemory(0) }, one},
		{"disk", func(t *testing.T) blobstore.Store { return disk(t) }, one},
		{"tiered-disk-over-memory", func(t *testing.T) blobstore.Store {
			remote, cache = blobstore.NewMemory(0), disk(t)
			return blobstore.NewTiered(remote, cache, blobstore.NoTierObserver{})
		}, tierStores},
		{"s3", func(t *testing.T) blobstore.Store { return startS3Bench(t).open(t, -1).CAS() }, one},
		{"tiered-disk-over-s3", func(t *testing.T) blobstore.Store {
			remote, cache = startS3Bench(t).open(t, -1).CAS(), disk(t)
			return blobstore.NewTiered(remote, cache, blobstore.NoTierObserver{})
		}, tierStores},
	}
	// wrong returns bytes that are not data: one flipped, or one short.
	type wrongFn struct {
		name string
		f    func(data []byte) []byte
	}
	wrongs := []wrongFn{
		{"flipped", func(data []byte) []byte {
			b := append([]byte(nil), data...)
			b[len(b)/2] ^= 1
			return b
		}},
		{"short", func(data []byte) []byte { return data[:len(data)-1] }},
		{"long", func(data []byte) []byte { return append(append([]byte(nil), data...), 0) }},
	}
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			store := be.open(t)
			e := newEnv(t, store, defaultOptions())
			notHeld := func(t *testing.T, ds ...digest.Digest) {
				t.Helper()
				for i, s := range be.stores(store) {
					missing, err := s.FindMissing(context.Background(), ds)
					if err != nil {
						t.Fatal(err)
					}
					if len(missing) != len(ds) {
						t.Fatalf("store %d holds %d of %v after an upload of the wrong bytes", i, len(ds)-len(missing), ds)
					}
				}
			}
			for _, size := range []int{2 << 10, 17 << 20} {
				data := randomBlob(be.name, size)
				d := digest.Compute(digest.SHA256, data)
				for _, w := range wrongs {
					bad := w.f(data)
					badD := digest.Compute(digest.SHA256, bad)
					t.Run(w.name+"/bytestream", func(t *testing.T) {
						_, err := e.upload(t, "uploads/u/blobs/"+d.ResourceSegment(), bad, 1<<20)
						wantCode(t, err, codes.InvalidArgument, "")
						notHeld(t, d, badD)
					})
					t.Run(w.name+"/bytestream-zstd", func(t *testing.T) {
						_, err := e.upload(t, "uploads/u/compressed-blobs/zstd/"+d.ResourceSegment(), zstdCompress(t, bad), 1<<20)
						wantCode(t, err, codes.InvalidArgument, "")
						notHeld(t, d, badD)
					})
					if size > 1<<20 {
						continue // beyond a batch's bound
					}
					t.Run(w.name+"/batch", func(t *testing.T) {
						resp, err := e.cas.BatchUpdateBlobs(testCtx(t), &repb.BatchUpdateBlobsRequest{Requests: []*repb.BatchUpdateBlobsRequest_Request{
							{Digest: d.Proto(), Data: bad},
							{Digest: d.Proto(), Data: zstdCompress(t, bad), Compressor: repb.Compressor_ZSTD},
						}})
						if err != nil {
							t.Fatal(err)
						}
						for i, r := range resp.Responses {
							if c := codes.Code(r.Status.GetCode()); c != codes.InvalidArgument {
								t.Fatalf("response %d: %v (%s), want InvalidArgument", i, c, status.FromProto(r.Status).Message())
							}
						}
						notHeld(t, d, badD)
					})
				}
				// The right bytes are still taken, once, after all that.
				if _, err := e.upload(t, "uploads/u/blobs/"+d.ResourceSegment(), data, 1<<20); err != nil {
					t.Fatal(err)
				}
				for i, s := range be.stores(store) {
					if got, err := blobstore.Get(context.Background(), s, d); err != nil || string(got) != string(data) {
						t.Fatalf("store %d does not hold %s after the right bytes were uploaded: %v", i, d, err)
					}
				}
			}
		})
	}
}
