//go:build linux

package frontend

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	bspb "google.golang.org/genproto/googleapis/bytestream"

	"github.com/gantry-build/gantry/internal/blobstore"
	"github.com/gantry-build/gantry/internal/config"
	"github.com/gantry-build/gantry/internal/digest"
	"github.com/gantry-build/gantry/internal/s3store"
	"github.com/gantry-build/gantry/internal/testutil/miniotest"
)

// The S3 benchmarks put the object store backend (internal/s3store on a
// MinIO server: a separate process on the same machine, as
// miniotest starts it) beside the disk store in one run, each through
// the real gRPC frontend as the disk benchmarks above are. Their
// sub-benchmarks are named by store:
//
//	disk       the disk store, as the benchmarks above configure it
//	s3-tiered  the bucket behind the disk tier, as `gantry serve`
//	           deploys storage.cas.backend: s3 (cache.max_size > 0)
//	s3         the bucket alone (reads and existence checks that miss
//	           the tier)
//
// They skip when there is no minio binary (see miniotest), and are not
// run by CI beyond compiling. docs/PERFORMANCE.md records the figures.

// s3Bench is a MinIO server shared by the sub-benchmarks of one
// benchmark, with the credentials in the environment as s3store reads
// them.
type s3Bench struct{ srv *miniotest.Server }

// minioCPU is the CPU time (user and system) the MinIO server of s has
// used so far, found in /proc by its data directory: its share of a
// benchmark's cost, which the benchmark's own cpu-ms/op leaves out.
func (s *s3Bench) minioCPU(b *testing.B) time.Duration {
	b.Helper()
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		cmdline, err := os.ReadFile(p)
		if err != nil || !bytes.Contains(cmdline, []byte("\x00"+s.srv.Dir+"\x00")) || !bytes.Contains(cmdline, []byte("minio")) {
			continue
		}
		stat, err := os.ReadFile(filepath.Join(filepath.Dir(p), "stat"))
		if err != nil {
			continue
		}
		// The fields after the command name, which is in parentheses:
		// utime and stime are the 14th and 15th of the whole line.
		f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		utime, _ := strconv.ParseInt(f[11], 10, 64)
		stime, _ := strconv.ParseInt(f[12], 10, 64)
		return time.Duration(utime+stime) * (time.Second / clockTicks)
	}
	b.Fatalf("no minio process serving %s in /proc", s.srv.Dir)
	return 0
}

// clockTicks is USER_HZ, the unit of /proc/PID/stat's times: 100 on
// every Linux architecture Go supports.
const clockTicks = 100

// measure runs f (a benchmark loop of b.N operations) and reports the
// MinIO server's CPU time per operation as minio-cpu-ms/op.
func (s *s3Bench) measure(b *testing.B, f func()) {
	before := s.minioCPU(b)
	f()
	// Reading /proc is not part of the operation.
	b.StopTimer()
	b.ReportMetric(float64(s.minioCPU(b)-before)/float64(b.N)/1e6, "minio-cpu-ms/op")
}

func startS3Bench(b testing.TB) *s3Bench {
	b.Helper()
	srv := miniotest.Start(b)
	b.Setenv("AWS_ACCESS_KEY_ID", srv.AccessKey)
	b.Setenv("AWS_SECRET_ACCESS_KEY", srv.SecretKey)
	return &s3Bench{srv: srv}
}

// open opens a fresh bucket with the configuration `gantry serve` uses
// by default (config.Default().Storage.S3: head_concurrency 64,
// part_size 16 MiB, refresh_after 24h, existence_cache_entries 1Mi),
// with existenceEntries in place of the last when it is not negative.
func (s *s3Bench) open(b testing.TB, existenceEntries int) *s3store.Bucket {
	b.Helper()
	return s.openBucket(b, s.srv.Bucket(b), existenceEntries)
}

// openBucket opens the named, existing bucket as open does: a second
// frontend process on the same bucket, with its own existence cache.
func (s *s3Bench) openBucket(b testing.TB, name string, existenceEntries int) *s3store.Bucket {
	b.Helper()
	c := config.Default().Storage.S3
	cfg := s3store.Config{
		Endpoint:              s.srv.Endpoint,
		Bucket:                name,
		PathStyle:             true,
		RefreshAfter:          c.RefreshAfter.D(),
		HeadConcurrency:       c.HeadConcurrency,
		ExistenceCacheEntries: c.ExistenceCacheEntries,
		PartSize:              int64(c.PartSize),
	}
	if existenceEntries >= 0 {
		cfg.ExistenceCacheEntries = existenceEntries
	}
	bucket, err := s3store.Open(context.Background(), cfg, s3store.Unobserved{}, slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(bucket.Close)
	return bucket
}

// BenchmarkS3ByteStreamWrite256MiB is BenchmarkByteStreamWrite256MiB
// (1 MiB requests) on the disk store and on the bucket behind the disk
// tier, which writes the blob to the bucket (a multipart upload of
// part_size parts) and to its disk cache at once. The tier's cache is
// full as the disk store is (see fullDisk): each upload evicts a blob.
func BenchmarkS3ByteStreamWrite256MiB(b *testing.B) {
	s := startS3Bench(b)
	threshold := int64(config.Default().Storage.CAS.DirectIOThreshold)
	b.Run("store=disk", func(b *testing.B) {
		benchWrite(b, benchFullEnv(b, threshold), 1<<20)
	})
	b.Run("store=s3-tiered", func(b *testing.B) {
		tier := blobstore.NewTiered(s.open(b, -1).CAS(), fullDisk(b, threshold), blobstore.NoTierObserver{})
		e := newEnv(b, tier, defaultOptions())
		s.measure(b, func() { benchWrite(b, e, 1<<20) })
	})
}

// BenchmarkS3ByteStreamRead256MiB is BenchmarkByteStreamRead256MiB on
// the disk store, on the tier with the blob in its cache (a warm read:
// the bytes come from the cache, and the tier asks the bucket whether
// it holds the blob, which its existence cache answers), and on the
// bucket alone (a cold read: every byte from MinIO). The disk store and
// the tier's cache are configured alike, without O_DIRECT, so that both
// read from the page cache.
func BenchmarkS3ByteStreamRead256MiB(b *testing.B) {
	s := startS3Bench(b)
	data := randomBlob("read", bigBlob)
	b.Run("store=disk", func(b *testing.B) {
		e := benchEnvDirect(b, 0)
		benchRead(b, e, e.put(b, digest.SHA256, data))
	})
	b.Run("store=s3-tiered", func(b *testing.B) {
		syscall.Sync()
		cache, err := blobstore.NewDisk(b.TempDir(), blobstore.DiskOptions{MaxBytes: 2 << 30})
		if err != nil {
			b.Fatal(err)
		}
		tier := blobstore.NewTiered(s.open(b, -1).CAS(), cache, blobstore.NoTierObserver{})
		e := newEnv(b, tier, defaultOptions())
		// Written through the tier, so the blob is in its cache.
		d := e.put(b, digest.SHA256, data)
		if ok, err := blobstore.Has(context.Background(), cache, d); err != nil || !ok {
			b.Fatalf("the blob is not in the tier's cache after a write through it: %v, %v", ok, err)
		}
		syscall.Sync()
		s.measure(b, func() { benchRead(b, e, d) })
	})
	b.Run("store=s3", func(b *testing.B) {
		e := newEnv(b, s.open(b, -1).CAS(), defaultOptions())
		d := e.put(b, digest.SHA256, data)
		s.measure(b, func() { benchRead(b, e, d) })
	})
}

// benchRead reads blob d through e's ByteStream once per iteration.
func benchRead(b *testing.B, e *env, d digest.Digest) {
	req := &bspb.ReadRequest{ResourceName: "blobs/" + d.ResourceSegment()}
	b.SetBytes(d.Size)
	var cpu cpuMeter
	b.ResetTimer()
	cpu.start()
	for i := 0; i < b.N; i++ {
		stream, err := e.bs.Read(context.Background(), req)
		if err != nil {
			b.Fatal(err)
		}
		var n int64
		for {
			resp, err := stream.Recv()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				b.Fatal(err)
			}
			n += int64(len(resp.Data))
		}
		if n != d.Size {
			b.Fatalf("read %d bytes, want %d", n, d.Size)
		}
	}
	cpu.stop()
	cpu.report(b)
}

// BenchmarkS3FindMissingBlobs10k asks about 10,000 digests per call, all
// of them present, one call at a time, and reports digests/s:
//
//	store=disk           the disk store
//	store=s3/cache=warm  the bucket, every digest in the existence cache
//	                     (the frontend saw them uploaded or present)
//	store=s3-tiered/cache=warm  the same through the tier, as deployed:
//	                     the tier also marks the blobs used in its cache
//	store=s3/cache=cold  a second frontend on the bucket with the
//	                     existence cache off (existence_cache_entries 0):
//	                     every digest is a HEAD request to MinIO,
//	                     head_concurrency of them in flight
func BenchmarkS3FindMissingBlobs10k(b *testing.B) {
	const n = 10000
	s := startS3Bench(b)
	blobs := make([][]byte, n)
	req := &repb.FindMissingBlobsRequest{}
	for j := range blobs {
		blobs[j] = randomBlob(fmt.Sprint("find", j), 100)
		stamp(blobs[j], j)
		req.BlobDigests = append(req.BlobDigests, digest.Compute(digest.SHA256, blobs[j]).Proto())
	}
	run := func(b *testing.B, e *env) {
		call := func() {
			resp, err := e.cas.FindMissingBlobs(context.Background(), req)
			if err != nil {
				b.Fatal(err)
			}
			if len(resp.MissingBlobDigests) != 0 {
				b.Fatalf("%d of %d present blobs reported missing", len(resp.MissingBlobDigests), n)
			}
		}
		var cpu cpuMeter
		b.ResetTimer()
		cpu.start()
		for i := 0; i < b.N; i++ {
			call()
		}
		cpu.stop()
		b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "digests/s")
		cpu.report(b)
	}
	b.Run("store=disk", func(b *testing.B) {
		store, err := blobstore.NewDisk(b.TempDir(), blobstore.DiskOptions{MaxBytes: 2 << 30})
		if err != nil {
			b.Fatal(err)
		}
		putAll(b, store, blobs)
		run(b, newEnv(b, store, defaultOptions()))
	})
	// One bucket holds the blobs for the S3 sub-benchmarks; each opens it
	// afresh. The uploads put every blob in the uploader's existence
	// cache.
	name := s.srv.Bucket(b)
	putAll(b, s.openBucket(b, name, -1).CAS(), blobs)
	b.Run("store=s3/cache=warm", func(b *testing.B) {
		bucket := s.openBucket(b, name, -1)
		e := newEnv(b, bucket.CAS(), defaultOptions())
		// One call fills the existence cache; the timed ones find it full.
		if _, err := e.cas.FindMissingBlobs(context.Background(), req); err != nil {
			b.Fatal(err)
		}
		s.measure(b, func() { run(b, e) })
	})
	b.Run("store=s3-tiered/cache=warm", func(b *testing.B) {
		cache, err := blobstore.NewDisk(b.TempDir(), blobstore.DiskOptions{MaxBytes: 2 << 30})
		if err != nil {
			b.Fatal(err)
		}
		putAll(b, cache, blobs)
		e := newEnv(b, blobstore.NewTiered(s.openBucket(b, name, -1).CAS(), cache, blobstore.NoTierObserver{}), defaultOptions())
		if _, err := e.cas.FindMissingBlobs(context.Background(), req); err != nil {
			b.Fatal(err)
		}
		s.measure(b, func() { run(b, e) })
	})
	b.Run("store=s3/cache=cold", func(b *testing.B) {
		e := newEnv(b, s.openBucket(b, name, 0).CAS(), defaultOptions())
		s.measure(b, func() { run(b, e) })
	})
}

// putAll stores blobs in store, 32 at a time (a bucket's PUTs are round
// trips).
func putAll(b *testing.B, store blobstore.Store, blobs [][]byte) {
	b.Helper()
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	errs := make(chan error, 1)
	for _, data := range blobs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := blobstore.Put(context.Background(), store, digest.Compute(digest.SHA256, data), data); err != nil {
				select {
				case errs <- err:
				default:
				}
			}
		}()
	}
	wg.Wait()
	select {
	case err := <-errs:
		b.Fatal(err)
	default:
	}
}
