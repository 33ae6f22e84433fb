package blobstore_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/gantry-build/gantry/internal/blobstore"
	"github.com/gantry-build/gantry/internal/digest"
)

// tierBackends are the tiers a frontend deploys: the disk cache in front
// of a remote, in memory and in a bucket on a real MinIO server (5 MiB
// parts, so that 12 MiB go as a multipart upload). Each returns the
// tier, its remote and its cache.
var tierBackends = []struct {
	name string
	open func(t *testing.T) (tier *blobstore.Tiered, remote, cache blobstore.Store)
}{
	{"disk-over-memory", func(t *testing.T) (*blobstore.Tiered, blobstore.Store, blobstore.Store) {
		return newTier(t, blobstore.NewMemory(0))
	}},
	{"disk-over-s3", func(t *testing.T) (*blobstore.Tiered, blobstore.Store, blobstore.Store) {
		return newTier(t, openS3(t).CAS())
	}},
}

func newTier(t *testing.T, remote blobstore.Store) (*blobstore.Tiered, blobstore.Store, blobstore.Store) {
	cache, err := blobstore.NewDisk(t.TempDir(), blobstore.DiskOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return blobstore.NewTiered(remote, cache, blobstore.NoTierObserver{}), remote, cache
}

func seeded(seed byte, n int) []byte {
	b := make([]byte, n)
	x := uint32(seed) + 1
	for i := range b {
		x = x*1664525 + 1013904223
		b[i] = byte(x >> 24)
	}
	return b
}

// TestTierHashesEachBlobOnce checks that an upload through the tier, a
// stream and a batch, hashes each blob's bytes once (not once for the
// remote and again for the cache), and that both stores then hold it.
func TestTierHashesEachBlobOnce(t *testing.T) {
	ctx := context.Background()
	for _, tb := range tierBackends {
		t.Run(tb.name, func(t *testing.T) {
			tier, remote, cache := tb.open(t)
			hashed := blobstore.CountHashed(t)
			for _, size := range []int{1 << 10, 3 << 20, 12 << 20} {
				data := seeded(byte(size), size)
				d := digest.Compute(digest.SHA256, data)
				before := hashed.Load()
				w, err := tier.Create(ctx, d)
				if err != nil {
					t.Fatal(err)
				}
				for p := data; len(p) > 0; p = p[min(len(p), 1<<20):] {
					if _, err := w.Write(p[:min(len(p), 1<<20)]); err != nil {
						t.Fatal(err)
					}
				}
				if err := w.Commit(); err != nil {
					t.Fatal(err)
				}
				w.Close()
				if got := hashed.Load() - before; got != int64(size) {
					t.Errorf("streaming %d bytes through the tier hashed %d bytes, want %d (once)", size, got, size)
				}
				wantHeld(t, d, data, remote, cache)
			}
			var ds []digest.Digest
			var data [][]byte
			total := int64(0)
			for i := range 50 {
				b := seeded(byte(i), 100+i*997)
				if i == 49 {
					b = seeded(99, 2<<20)
				}
				ds = append(ds, digest.Compute(digest.SHA256, b))
				data = append(data, b)
				total += int64(len(b))
			}
			before := hashed.Load()
			for i, err := range blobstore.PutBatch(ctx, tier, ds, data) {
				if err != nil {
					t.Fatalf("blob %d: %v", i, err)
				}
			}
			if got := hashed.Load() - before; got != total {
				t.Errorf("a batch of %d bytes through the tier hashed %d bytes, want %d (once)", total, got, total)
			}
			for i := range ds {
				wantHeld(t, ds[i], data[i], remote, cache)
			}
		})
	}
}

// wantHeld fails unless every store holds d with data.
func wantHeld(t *testing.T, d digest.Digest, data []byte, stores ...blobstore.Store) {
	t.Helper()
	for i, s := range stores {
		got, err := blobstore.Get(context.Background(), s, d)
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("store %d of the tier does not hold %s: %v", i, d, err)
		}
	}
}

// TestTrustedWriterWantsItsProof checks that every store taking verified
// bytes commits them only with the proof of a verifier that hashed that
// very blob: none, one for another blob, or bytes of the wrong count
// store nothing.
func TestTrustedWriterWantsItsProof(t *testing.T) {
	ctx := context.Background()
	stores := []struct {
		name string
		open func(t *testing.T) blobstore.Trusting
	}{
		{"memory", func(t *testing.T) blobstore.Trusting { return blobstore.NewMemory(0) }},
		{"disk", func(t *testing.T) blobstore.Trusting {
			s, err := blobstore.NewDisk(t.TempDir(), blobstore.DiskOptions{})
			if err != nil {
				t.Fatal(err)
			}
			return s
		}},
		{"tiered", func(t *testing.T) blobstore.Trusting { tier, _, _ := newTier(t, blobstore.NewMemory(0)); return tier }},
		{"s3", func(t *testing.T) blobstore.Trusting { return openS3(t).CAS() }},
	}
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			s := st.open(t)
			for _, size := range []int{100, 2 << 20, 6 << 20} {
				data := seeded(byte(size>>10), size)
				d := digest.Compute(digest.SHA256, data)
				other, err := blobstore.Verify(digest.Compute(digest.SHA256, data[1:]), data[1:])
				if err != nil {
					t.Fatal(err)
				}
				v := blobstore.NewVerifier(d)
				if err := v.WriteAll(data); err != nil {
					t.Fatal(err)
				}
				right, err := v.Prove()
				if err != nil {
					t.Fatal(err)
				}
				for _, c := range []struct {
					name  string
					data  []byte
					proof blobstore.Proof
				}{
					{"no proof", data, blobstore.Proof{}},
					{"another blob's proof", data, other.Proof()},
					{"too few bytes", data[:size-1], right},
				} {
					w, err := s.CreateTrusted(ctx, d)
					if err != nil {
						t.Fatal(err)
					}
					if _, err := w.Write(c.data); err != nil {
						t.Fatal(err)
					}
					if err := w.CommitVerified(c.proof); err == nil {
						t.Fatalf("%d bytes, %s: committed", size, c.name)
					}
					w.Close()
					if ok, err := blobstore.Has(ctx, s, d); err != nil || ok {
						t.Fatalf("%d bytes, %s: the store holds the blob (%v)", size, c.name, err)
					}
				}
				w, err := s.CreateTrusted(ctx, d)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := w.Write(append(data, 0)); err == nil {
					t.Fatalf("%d bytes: a trusted writer took a byte beyond the blob's size", size)
				}
				w.Close()
				if err := blobstore.PutVerified(ctx, s, mustVerify(t, d, data)); err != nil {
					t.Fatal(err)
				}
				wantHeld(t, d, data, s)
			}
		})
	}
}

func mustVerify(t *testing.T, d digest.Digest, data []byte) blobstore.VerifiedBlob {
	t.Helper()
	b, err := blobstore.Verify(d, data)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
