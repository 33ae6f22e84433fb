package server

import (
	"bytes"
	"context"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"github.com/minio/minio-go/v7"
	bspb "google.golang.org/genproto/googleapis/bytestream"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gantry-build/gantry/internal/blobstore"
	"github.com/gantry-build/gantry/internal/config"
	"github.com/gantry-build/gantry/internal/digest"
	"github.com/gantry-build/gantry/internal/testutil/miniotest"
)

// s3Storage returns a config modifier that puts the CAS and action
// cache in bucket of s, with the disk tier when cache.
func s3Storage(t *testing.T, s *miniotest.Server, bucket string, cache bool) func(*config.Config) {
	s.Setenv(t)
	return func(c *config.Config) {
		c.Storage.CAS.Backend = "s3"
		c.Storage.ActionCache.Backend = "s3"
		c.Storage.S3.Endpoint = s.Endpoint
		c.Storage.S3.Bucket = bucket
		c.Storage.S3.PathStyle = true
		c.Storage.S3.PartSize = 5 << 20
		c.Storage.CAS.Cache.MaxSize = 0
		if cache {
			c.Storage.CAS.Cache.MaxSize = 1 << 30
		}
	}
}

func randomBytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, 1))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// TestS3TwoFrontendsShareStorage: two servers on one bucket serve the
// same blobs and action results: what one stored, the other reads, and
// an action run through one is a cache hit through the other.
func TestS3TwoFrontendsShareStorage(t *testing.T) {
	s := miniotest.Start(t)
	bucket := s.Bucket(t)
	a := startFarm(t, s3Storage(t, s, bucket, true))
	b := startFarm(t, s3Storage(t, s, bucket, false))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	small, large := randomBytes(1, 1000), randomBytes(2, 12<<20)
	for _, data := range [][]byte{small, large} {
		d := a.putBytes(data)
		got, err := blobstore.Get(ctx, b.cas, d)
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("blob of %d bytes written through A read through B: %d bytes, %v", len(data), len(got), err)
		}
	}
	// B's blob is read by A twice: from the bucket, then from its tier.
	d := b.putBytes(randomBytes(3, 3<<20))
	for range 2 {
		if got, err := blobstore.Get(ctx, a.cas, d); err != nil || int64(len(got)) != d.Size {
			t.Fatalf("read through A: %d bytes, %v", len(got), err)
		}
	}

	root := a.put(&repb.Directory{})
	cmd := shCmd("echo shared > out", "out")
	first := a.run(ctx, root, cmd)
	if first.Result.GetExitCode() != 0 || first.CachedResult {
		t.Fatalf("first run through A: %v", first)
	}
	second := b.run(ctx, root, cmd)
	if !second.CachedResult || b.read(second.Result.OutputFiles[0].Digest) != "shared\n" {
		t.Fatalf("the same action through B is not a cache hit with A's output: %v", second)
	}
}

// TestS3BucketDownIsUnavailable: with the object store down, a client's
// upload fails with UNAVAILABLE naming the endpoint (never INTERNAL), no
// partial blob appears, and the retry succeeds once the store is back.
func TestS3BucketDownIsUnavailable(t *testing.T) {
	s := miniotest.Start(t)
	bucket := s.Bucket(t)
	f := startFarm(t, func(c *config.Config) {
		s3Storage(t, s, bucket, true)(c)
		c.Storage.S3.ExistenceCacheEntries = 0
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	data := randomBytes(4, 11<<20)
	d := digest.Compute(digest.SHA256, data)
	w, err := f.cas.Create(ctx, d)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(data[:6<<20]); err != nil {
		t.Fatal(err)
	}
	s.Stop()
	_, err = w.Write(data[6<<20:])
	if err == nil {
		err = w.Commit()
	}
	w.Close()
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), strings.TrimPrefix(s.Endpoint, "http://")) {
		t.Fatalf("upload with the store down: %v, want UNAVAILABLE naming the endpoint", err)
	}
	if _, err := f.cas.FindMissing(ctx, []digest.Digest{d}); status.Code(err) != codes.Unavailable {
		t.Fatalf("FindMissingBlobs with the store down: %v, want UNAVAILABLE", err)
	}
	s.Restart()
	if _, err := s.Client().StatObject(ctx, bucket, "cas/sha256/"+d.Hash+"-"+strconv.FormatInt(d.Size, 10), minio.StatObjectOptions{}); err == nil {
		t.Fatal("the cut upload left an object in the bucket")
	}
	if err := blobstore.Put(ctx, f.cas, d, data); err != nil {
		t.Fatalf("retry after the store is back: %v", err)
	}
	if got, err := blobstore.Get(ctx, f.cas, d); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read after the retry: %d bytes, %v", len(got), err)
	}
}

// TestS3StartErrorsNameTheKey: gantry serve does not start on a bucket
// it cannot use, and says which key to fix.
func TestS3StartErrorsNameTheKey(t *testing.T) {
	s := miniotest.Start(t)
	mod := s3Storage(t, s, "missing-bucket", false)
	cfg := config.Default()
	cfg.Listen, cfg.HTTPListen, cfg.DataDir = "127.0.0.1:0", "", t.TempDir()
	mod(&cfg)
	_, err := New(cfg, quietLogger())
	if err == nil || !strings.Contains(err.Error(), "storage.s3.bucket") {
		t.Fatalf("start on a missing bucket: %v, want an error naming storage.s3.bucket", err)
	}
	cfg.Storage.S3.CreateBucket = true
	srv, err := New(cfg, quietLogger())
	if err != nil {
		t.Fatalf("start with create_bucket: %v", err)
	}
	runNode(t, srv)
	t.Setenv("AWS_SECRET_ACCESS_KEY", "wrong")
	cfg.DataDir = t.TempDir()
	if _, err := New(cfg, quietLogger()); err == nil || !strings.Contains(err.Error(), "credentials") {
		t.Fatalf("start with wrong credentials: %v, want an error about them", err)
	}
}

// TestS3ResumedUpload: a ByteStream upload cut midway (its stream's
// context ended after a part went to the bucket) is resumed on a new
// stream from QueryWriteStatus's offset and completes: the kept writer's
// requests do not die with the first stream.
func TestS3ResumedUpload(t *testing.T) {
	s := miniotest.Start(t)
	f := startFarm(t, s3Storage(t, s, s.Bucket(t), true))
	data := randomBytes(6, 12<<20)
	d := digest.Compute(digest.SHA256, data)
	name := "uploads/6f1d3c1e-0000-4000-8000-000000000001/blobs/" + d.Hash + "/" + strconv.FormatInt(d.Size, 10)
	bs := bspb.NewByteStreamClient(f.conn)

	first, cancelFirst := context.WithCancel(context.Background())
	stream, err := bs.Write(first)
	if err != nil {
		t.Fatal(err)
	}
	const cut = 7 << 20 // past the first 5 MiB part
	for off := 0; off < cut; off += 1 << 20 {
		if err := stream.Send(&bspb.WriteRequest{ResourceName: name, WriteOffset: int64(off), Data: data[off : off+1<<20]}); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var committed int64
	for committed < cut { // the server has taken what was sent
		st, err := bs.QueryWriteStatus(ctx, &bspb.QueryWriteStatusRequest{ResourceName: name})
		if status.Code(err) == codes.NotFound && ctx.Err() == nil {
			// The server has not read the stream's first message yet
			// (bounded by ctx: an upload that was dropped fails below).
			time.Sleep(10 * time.Millisecond)
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		committed = st.CommittedSize
		if ctx.Err() != nil {
			t.Fatalf("the server took %d of %d bytes", committed, cut)
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancelFirst()

	second, err := bs.Write(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for off := int(committed); off < len(data); off += 1 << 20 {
		end := min(off+1<<20, len(data))
		if err := second.Send(&bspb.WriteRequest{ResourceName: name, WriteOffset: int64(off), Data: data[off:end], FinishWrite: end == len(data)}); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := second.CloseAndRecv()
	if err != nil || resp.CommittedSize != d.Size {
		t.Fatalf("resumed upload: %v, %v", resp, err)
	}
	other := startFarm(t, s3Storage(t, s, f.srv.cfg.Storage.S3.Bucket, false))
	if got, err := blobstore.Get(ctx, other.cas, d); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("the resumed blob reads %d bytes, %v", len(got), err)
	}
}
