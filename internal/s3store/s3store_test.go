package s3store

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"github.com/minio/minio-go/v7"

	"github.com/gantry-build/gantry/internal/actioncache"
	"github.com/gantry-build/gantry/internal/blobstore"
	"github.com/gantry-build/gantry/internal/digest"
	"github.com/gantry-build/gantry/internal/testutil/miniotest"
)

// testConfig is a bucket configuration for s, with small parts so that
// multipart uploads happen at test sizes.
func testConfig(s *miniotest.Server, bucket string) Config {
	return Config{
		Endpoint:              s.Endpoint,
		Bucket:                bucket,
		PathStyle:             true,
		RefreshAfter:          time.Hour,
		HeadConcurrency:       16,
		ExistenceCacheEntries: 1000,
		PartSize:              minPartSize,
		MaxRetries:            1,
	}
}

func quietLog() *slog.Logger { return slog.New(slog.DiscardHandler) }

// openBucket opens a fresh bucket of s with the server's credentials.
func openBucket(t *testing.T, s *miniotest.Server, mod func(*Config)) *Bucket {
	t.Helper()
	s.Setenv(t)
	cfg := testConfig(s, s.Bucket(t))
	if mod != nil {
		mod(&cfg)
	}
	b, err := Open(context.Background(), cfg, Unobserved{}, quietLog())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b
}

func randomBlob(seed uint64, n int) ([]byte, digest.Digest) {
	r := rand.New(rand.NewPCG(seed, uint64(n)))
	data := make([]byte, n)
	for i := range data {
		data[i] = byte(r.Uint32())
	}
	return data, digest.Compute(digest.SHA256, data)
}

func TestOpenExplainsWhatToFix(t *testing.T) {
	s := miniotest.Start(t)
	s.Setenv(t)
	open := func(cfg Config) error {
		b, err := Open(context.Background(), cfg, Unobserved{}, quietLog())
		if err == nil {
			b.Close()
		}
		return err
	}
	t.Run("missing bucket", func(t *testing.T) {
		err := open(testConfig(s, "no-such-bucket"))
		if err == nil || !strings.Contains(err.Error(), "storage.s3.bucket") || !strings.Contains(err.Error(), "create_bucket") {
			t.Fatalf("error %v, want it to name storage.s3.bucket and create_bucket", err)
		}
	})
	t.Run("create bucket", func(t *testing.T) {
		cfg := testConfig(s, "made-by-gantry")
		cfg.CreateBucket = true
		if err := open(cfg); err != nil {
			t.Fatal(err)
		}
		if ok, err := s.Client().BucketExists(context.Background(), "made-by-gantry"); err != nil || !ok {
			t.Fatalf("bucket not created: %v %v", ok, err)
		}
	})
	t.Run("wrong credentials", func(t *testing.T) {
		bucket := s.Bucket(t)
		t.Setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
		err := open(testConfig(s, bucket))
		if err == nil || !strings.Contains(err.Error(), "credentials") || !strings.Contains(err.Error(), "AWS_SECRET_ACCESS_KEY") {
			t.Fatalf("error %v, want it to say the credentials were refused and how to set them", err)
		}
	})
	t.Run("unreachable", func(t *testing.T) {
		cfg := testConfig(s, "x")
		cfg.Endpoint = "http://127.0.0.1:1"
		err := open(cfg)
		if err == nil || !strings.Contains(err.Error(), "storage.s3.endpoint") || !strings.Contains(err.Error(), "127.0.0.1:1") {
			t.Fatalf("error %v, want it to name storage.s3.endpoint and the address", err)
		}
	})
	t.Run("bad endpoint", func(t *testing.T) {
		cfg := testConfig(s, "x")
		cfg.Endpoint = "127.0.0.1:9000"
		if err := open(cfg); err == nil || !strings.Contains(err.Error(), "http://host:port") {
			t.Fatalf("error %v, want it to show the endpoint's form", err)
		}
	})
}

// TestMultipartVisibleOnlyWhenVerified: a blob larger than a part goes up
// in parts; while it is being written, and after an upload whose bytes do
// not match its digest, no object exists under its name and no upload is
// left behind; a matching one reads back whole and by ranges.
func TestMultipartVisibleOnlyWhenVerified(t *testing.T) {
	s := miniotest.Start(t)
	b := openBucket(t, s, nil)
	cas := b.CAS()
	ctx := context.Background()
	data, d := randomBlob(1, 3*minPartSize+12345)

	exists := func() bool {
		_, err := s.Client().StatObject(ctx, b.cfg.Bucket, cas.name(d), minio.StatObjectOptions{})
		return err == nil
	}
	bad := bytes.Clone(data)
	bad[len(bad)-1] ^= 1
	w, err := cas.Create(ctx, d)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(bad[:2*minPartSize+1]); err != nil {
		t.Fatal(err)
	}
	if exists() {
		t.Fatal("an object is visible before the upload completed")
	}
	if _, err := w.Write(bad[2*minPartSize+1:]); err != nil {
		t.Fatal(err)
	}
	var me *blobstore.MismatchError
	if err := w.Commit(); !errors.As(err, &me) {
		t.Fatalf("Commit of damaged bytes: %v, want a MismatchError", err)
	}
	w.Close()
	if exists() {
		t.Fatal("the damaged blob became visible")
	}
	for u := range s.Client().ListIncompleteUploads(ctx, b.cfg.Bucket, "", true) {
		t.Errorf("an aborted upload was left behind: %+v", u)
	}

	if err := blobstore.Put(ctx, cas, d, data); err != nil {
		t.Fatal(err)
	}
	got, err := blobstore.Get(ctx, cas, d)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read back %d bytes, err %v", len(got), err)
	}
	for _, r := range []struct{ off, limit int64 }{{0, 1}, {5, 0}, {minPartSize - 3, 7}, {d.Size - 1, 0}, {d.Size - 10, 100}, {d.Size, 0}} {
		rc, err := cas.OpenRange(ctx, d, r.off, r.limit)
		if err != nil {
			t.Fatalf("OpenRange(%d, %d): %v", r.off, r.limit, err)
		}
		part, err := io.ReadAll(rc)
		rc.Close()
		end := d.Size
		if r.limit > 0 {
			end = min(end, r.off+r.limit)
		}
		if err != nil || !bytes.Equal(part, data[r.off:end]) {
			t.Fatalf("OpenRange(%d, %d) = %d bytes, err %v; want bytes %d-%d", r.off, r.limit, len(part), err, r.off, end)
		}
	}
}

// TestLargeUploadMemoryBounded: an upload of many parts allocates about
// two parts' worth, not the blob.
func TestLargeUploadMemoryBounded(t *testing.T) {
	s := miniotest.Start(t)
	b := openBucket(t, s, nil)
	const size = 128 << 20
	chunk := make([]byte, 1<<20)
	h := digest.NewHasher(digest.SHA256)
	for i := range size / len(chunk) {
		chunk[0] = byte(i)
		h.Write(chunk)
	}
	d := digest.Digest{Function: digest.SHA256, Hash: digest.HexOf(h.Sum(nil)), Size: size}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	w, err := b.CAS().Create(context.Background(), d)
	if err != nil {
		t.Fatal(err)
	}
	for i := range size / len(chunk) {
		chunk[0] = byte(i)
		if _, err := w.Write(chunk); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Commit(); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	allocated := after.TotalAlloc - before.TotalAlloc
	t.Logf("a %d MiB upload in %d MiB parts allocated %.1f MiB", size>>20, minPartSize>>20, float64(allocated)/(1<<20))
	if allocated > 8*minPartSize {
		t.Fatalf("a %d MiB upload allocated %d MiB; it should hold about two %d MiB parts", size>>20, allocated>>20, minPartSize>>20)
	}
}

// TestDeletedBehindItsBack: an object deleted by someone else reads as
// NOT_FOUND, is then reported missing, and an action result that needs
// it is not served by a frontend; bytes are never wrong.
func TestDeletedBehindItsBack(t *testing.T) {
	s := miniotest.Start(t)
	b := openBucket(t, s, nil)
	ctx := context.Background()
	cas := b.CAS()
	data, d := randomBlob(2, 1000)
	if err := blobstore.Put(ctx, cas, d, data); err != nil {
		t.Fatal(err)
	}
	if missing, err := cas.FindMissing(ctx, []digest.Digest{d}); err != nil || len(missing) != 0 {
		t.Fatalf("FindMissing after Put = %v, %v", missing, err)
	}
	if err := s.Client().RemoveObject(ctx, b.cfg.Bucket, cas.name(d), minio.RemoveObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := blobstore.Get(ctx, cas, d); !errors.Is(err, blobstore.ErrNotFound) {
		t.Fatalf("read of a deleted object: %v, want ErrNotFound", err)
	}
	if missing, err := cas.FindMissing(ctx, []digest.Digest{d}); err != nil || len(missing) != 1 {
		t.Fatalf("FindMissing after the read found it gone = %v, %v; want it missing", missing, err)
	}
	// Another frontend, which never saw it, does not report it present.
	other, err := Open(ctx, b.cfg, Unobserved{}, quietLog())
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if missing, err := other.CAS().FindMissing(ctx, []digest.Digest{d}); err != nil || len(missing) != 1 {
		t.Fatalf("a second bucket's FindMissing = %v, %v; want it missing", missing, err)
	}
	// An object of the wrong size under the name is not the blob.
	if _, err := s.Client().PutObject(ctx, b.cfg.Bucket, cas.name(d), bytes.NewReader(data[:10]), 10, minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := blobstore.Get(ctx, other.CAS(), d); !errors.Is(err, blobstore.ErrNotFound) {
		t.Fatalf("read of a short object: %v, want ErrNotFound", err)
	}
}

func TestActionCache(t *testing.T) {
	s := miniotest.Start(t)
	b := openBucket(t, s, nil)
	ctx := context.Background()
	ac := b.ActionCache()
	_, d := randomBlob(3, 10)
	if _, err := ac.Get(ctx, "a", d); !errors.Is(err, actioncache.ErrNotFound) {
		t.Fatalf("Get of nothing: %v", err)
	}
	want := &repb.ActionResult{ExitCode: 3, StdoutRaw: []byte("out")}
	if err := ac.Put(ctx, "a", d, want); err != nil {
		t.Fatal(err)
	}
	got, err := ac.Get(ctx, "a", d)
	if err != nil || got.ExitCode != 3 || string(got.StdoutRaw) != "out" {
		t.Fatalf("Get = %v, %v", got, err)
	}
	if _, err := ac.Get(ctx, "b", d); !errors.Is(err, actioncache.ErrNotFound) {
		t.Fatalf("another instance sees the entry: %v", err)
	}
	// Garbage under the name reads as a miss, not an error.
	if _, err := s.Client().PutObject(ctx, b.cfg.Bucket, ac.name("a", d), strings.NewReader("\xff\xff"), 2, minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := ac.Get(ctx, "a", d); !errors.Is(err, actioncache.ErrNotFound) {
		t.Fatalf("Get of garbage: %v, want a miss", err)
	}
}

// TestRefreshResetsAge: an object older than RefreshAfter that is used
// (FindMissing, a read, an action cache hit) is copied onto itself, so
// its modification time, which the bucket's expiry counts from, moves.
func TestRefreshResetsAge(t *testing.T) {
	s := miniotest.Start(t)
	b := openBucket(t, s, func(c *Config) { c.RefreshAfter = 1500 * time.Millisecond })
	ctx := context.Background()
	cas, ac := b.CAS(), b.ActionCache()
	data, d := randomBlob(4, 100)
	if err := blobstore.Put(ctx, cas, d, data); err != nil {
		t.Fatal(err)
	}
	if err := ac.Put(ctx, "", d, &repb.ActionResult{}); err != nil {
		t.Fatal(err)
	}
	modified := func(name string) time.Time {
		info, err := s.Client().StatObject(ctx, b.cfg.Bucket, name, minio.StatObjectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return info.LastModified
	}
	blobAt, entryAt := modified(cas.name(d)), modified(ac.name("", d))
	// Used while young: nothing is copied.
	if _, err := cas.FindMissing(ctx, []digest.Digest{d}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second) // let the objects age past RefreshAfter
	if m := modified(cas.name(d)); !m.Equal(blobAt) {
		t.Fatalf("a young object was rewritten (%v -> %v)", blobAt, m)
	}
	if _, err := cas.FindMissing(ctx, []digest.Digest{d}); err != nil {
		t.Fatal(err)
	}
	if _, err := ac.Get(ctx, "", d); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for modified(cas.name(d)).Equal(blobAt) || modified(ac.name("", d)).Equal(entryAt) {
		if time.Now().After(deadline) {
			t.Fatal("old objects that were used were not refreshed within 30s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if got, err := blobstore.Get(ctx, cas, d); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("after the refresh the blob reads %d bytes, %v", len(got), err)
	}
}

// TestStoppedStoreIsUnavailable: with the object store down, uploads
// and reads fail with an UnavailableError naming it (never a partial
// object), and the same upload succeeds once it is back.
func TestStoppedStoreIsUnavailable(t *testing.T) {
	s := miniotest.Start(t)
	b := openBucket(t, s, nil)
	ctx := context.Background()
	cas := b.CAS()
	data, d := randomBlob(5, 2*minPartSize+100)
	w, err := cas.Create(ctx, d)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(data[:minPartSize+1]); err != nil { // one part sent
		t.Fatal(err)
	}
	s.Stop()
	_, err = w.Write(data[minPartSize+1:])
	if err == nil {
		err = w.Commit()
	}
	w.Close()
	var ue *blobstore.UnavailableError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), s.Endpoint[len("http://"):]) {
		t.Fatalf("upload with the store down: %v, want an UnavailableError naming the endpoint", err)
	}
	if _, err := cas.FindMissing(ctx, []digest.Digest{d}); !errors.As(err, &ue) {
		t.Fatalf("FindMissing with the store down: %v, want an UnavailableError", err)
	}
	s.Restart()
	if missing, err := cas.FindMissing(ctx, []digest.Digest{d}); err != nil || len(missing) != 1 {
		t.Fatalf("after the failed upload FindMissing = %v, %v; want the blob missing", missing, err)
	}
	if err := blobstore.Put(ctx, cas, d, data); err != nil {
		t.Fatalf("retried upload: %v", err)
	}
	if got, err := blobstore.Get(ctx, cas, d); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read after the retry: %d bytes, %v", len(got), err)
	}
}

// TestOpenWaitsForTheBucket: a process that starts while its object store
// is down (both restarting after an outage) waits for it, up to
// StartWait, instead of exiting; past StartWait it gives up with the
// error that names the endpoint.
func TestOpenWaitsForTheBucket(t *testing.T) {
	s := miniotest.Start(t)
	s.Setenv(t)
	bucket := s.Bucket(t)
	s.Stop()

	cfg := testConfig(s, bucket)
	cfg.StartWait = 500 * time.Millisecond
	if _, err := Open(context.Background(), cfg, Unobserved{}, quietLog()); err == nil || !strings.Contains(err.Error(), "storage.s3.endpoint") {
		t.Fatalf("Open with the store down past StartWait: %v, want the endpoint's error", err)
	}

	cfg.StartWait = time.Minute
	type result struct {
		b   *Bucket
		err error
	}
	done := make(chan result, 1)
	go func() {
		b, err := Open(context.Background(), cfg, Unobserved{}, quietLog())
		done <- result{b, err}
	}()
	select {
	case r := <-done:
		t.Fatalf("Open returned while the store was down: %v", r.err)
	case <-time.After(time.Second):
	}
	s.Restart()
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatalf("Open after the store came back: %v", r.err)
		}
		r.b.Close()
	case <-time.After(30 * time.Second):
		t.Fatal("Open still waiting 30s after the store came back")
	}
}
