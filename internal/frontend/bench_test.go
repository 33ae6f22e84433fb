package frontend

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	bspb "google.golang.org/genproto/googleapis/bytestream"

	"github.com/gantry-build/gantry/internal/actioncache"
	"github.com/gantry-build/gantry/internal/blobstore"
	"github.com/gantry-build/gantry/internal/config"
	"github.com/gantry-build/gantry/internal/digest"
)

// The benchmarks run the real gRPC server (with the production options,
// see serverOptions) on a loopback port over the disk store, the default
// backend. The client is a plain grpc-go client with default settings;
// it behaves as a REAPI client would and is not tuned for the benchmark.
// docs/PERFORMANCE.md records the figures and how to run them.

const bigBlob = 256 << 20

// benchEnv serves a disk store in a temporary directory. The bound keeps
// the disk use of long runs in check; eviction is part of the cost.
// The store is configured as `gantry serve` configures it by default.
func benchEnv(b *testing.B) *env {
	return benchEnvDirect(b, int64(config.Default().Storage.CAS.DirectIOThreshold))
}

// benchEnvDirect is benchEnv with the given direct_io_threshold (0: off).
func benchEnvDirect(b *testing.B, directIOThreshold int64) *env {
	b.Helper()
	// Flush what earlier benchmarks left dirty, so that their writeback
	// is not charged to this one.
	syscall.Sync()
	store, err := blobstore.NewDisk(b.TempDir(), blobstore.DiskOptions{MaxBytes: 2 << 30, DirectIOThreshold: directIOThreshold})
	if err != nil {
		b.Fatal(err)
	}
	return newEnv(b, store, defaultOptions())
}

// cpuMeter counts the CPU time (user and system, client and server: the
// whole process) spent while a benchmark's timer runs. On a shared
// machine it is a steadier measure of cost than wall time.
type cpuMeter struct{ spent, started int64 }

func cpuNow() int64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru.Utime.Nano() + ru.Stime.Nano()
}

func (m *cpuMeter) start() { m.started = cpuNow() }
func (m *cpuMeter) stop()  { m.spent += cpuNow() - m.started }

// report adds cpu-ms/op to the benchmark's output.
func (m *cpuMeter) report(b *testing.B) {
	b.ReportMetric(float64(m.spent)/float64(b.N)/1e6, "cpu-ms/op")
}

// runID makes the blobs of each benchmark run distinct, so that no
// iteration finds its blobs already stored.
var runID = uint64(time.Now().UnixNano())

// stamp makes data a new blob: its first 16 bytes become the run and
// iteration numbers.
func stamp(data []byte, i int) {
	binary.LittleEndian.PutUint64(data[0:], runID)
	binary.LittleEndian.PutUint64(data[8:], uint64(i))
}

// BenchmarkByteStreamWrite256MiB uploads a new 256 MiB blob per iteration
// in one Write stream. chunk is the size of each WriteRequest: 16 KiB is
// what Bazel sends (its Chunker's default); 1 MiB stands for clients that
// send larger requests.
//
// The store is full, as a farm's CAS in service is (see benchFullEnv):
// every upload evicts the least recently used blob, and the page cache
// the new blob goes into is memory that an older one gave back, not
// memory the machine has not touched for a while. The latter costs far
// more on a virtual machine that hands free memory back to its host (the
// test machines do: virtio-balloon free page reporting), and would
// measure the host rather than Gantry; docs/PERFORMANCE-HISTORY.md
// ("session 15") has figures for both.
func BenchmarkByteStreamWrite256MiB(b *testing.B) {
	for _, chunk := range []int{16 << 10, 1 << 20} {
		b.Run(fmt.Sprintf("chunk=%dKiB", chunk>>10), func(b *testing.B) {
			benchWrite(b, benchFullEnv(b, int64(config.Default().Storage.CAS.DirectIOThreshold)), chunk)
		})
	}
	// The same with O_DIRECT (direct_io_threshold: 32MiB), for
	// comparison in the same run.
	b.Run("chunk=1024KiB/io=direct", func(b *testing.B) {
		benchWrite(b, benchFullEnv(b, 32<<20), 1<<20)
	})
}

// benchFullEnv serves a disk store bounded at eight and a half 256 MiB
// blobs and holding eight, so that each upload evicts one. Nine are
// stored: the last one's eviction leaves a file for the first upload to
// reuse, as a full store in service has (internal/blobstore/spare.go). A
// store keeps such a file only if it is at most an eighth of its bound,
// hence eight, not two: a CAS in service is far larger than its blobs.
func benchFullEnv(b *testing.B, directIOThreshold int64) *env {
	b.Helper()
	return newEnv(b, fullDisk(b, directIOThreshold), defaultOptions())
}

// fullDisk is the disk store of benchFullEnv, filled, for benchFullEnv
// and for the disk tier in front of a bucket (s3bench_test.go).
func fullDisk(b *testing.B, directIOThreshold int64) *blobstore.Disk {
	b.Helper()
	syscall.Sync()
	store, err := blobstore.NewDisk(b.TempDir(), blobstore.DiskOptions{MaxBytes: bigBlob * 17 / 2, DirectIOThreshold: directIOThreshold})
	if err != nil {
		b.Fatal(err)
	}
	data := randomBlob("fill", bigBlob)
	for i := range 9 {
		stamp(data, -1-i)
		if err := blobstore.Put(context.Background(), store, digest.Compute(digest.SHA256, data), data); err != nil {
			b.Fatal(err)
		}
	}
	// The fill's writeback is not charged to the benchmark.
	syscall.Sync()
	return store
}

func benchWrite(b *testing.B, e *env, chunk int) {
	data := randomBlob("write", bigBlob)
	b.SetBytes(bigBlob)
	var cpu cpuMeter
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		stamp(data, i)
		// The client knows the digest before it uploads.
		d := digest.Compute(digest.SHA256, data)
		name := fmt.Sprintf("uploads/%d-%d/blobs/%s", runID, i, d.ResourceSegment())
		b.StartTimer()
		cpu.start()
		w := e.newWriter(b, context.Background(), name, 0)
		if err := w.send(data, chunk, true); err != nil {
			b.Fatal(err)
		}
		resp, err := w.close()
		if err != nil || resp.CommittedSize != bigBlob {
			b.Fatalf("write: %v, %v", resp, err)
		}
		cpu.stop()
	}
	cpu.report(b)
}

// BenchmarkByteStreamRead256MiB downloads a 256 MiB blob per iteration in
// one Read stream (chunks of the default read_chunk_size, 1 MiB). It
// measures warm reads (the blob in the page cache, as one read again and
// again is), so the blob is written through the page cache; a cold read
// of a blob written with O_DIRECT goes at the disk's speed.
func BenchmarkByteStreamRead256MiB(b *testing.B) {
	e := benchEnvDirect(b, 0)
	data := randomBlob("read", bigBlob)
	d := e.put(b, digest.SHA256, data)
	req := &bspb.ReadRequest{ResourceName: "blobs/" + d.ResourceSegment()}
	b.SetBytes(bigBlob)
	var cpu cpuMeter
	b.ResetTimer()
	cpu.start()
	for i := 0; i < b.N; i++ {
		stream, err := e.bs.Read(context.Background(), req)
		if err != nil {
			b.Fatal(err)
		}
		n := 0
		for {
			resp, err := stream.Recv()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				b.Fatal(err)
			}
			n += len(resp.Data)
		}
		if n != bigBlob {
			b.Fatalf("read %d bytes, want %d", n, bigBlob)
		}
	}
	cpu.stop()
	cpu.report(b)
}

// batches splits blobs into BatchUpdateBlobs requests of at most limit
// bytes, counting each entry's framing as a client must.
func batches(blobs [][]byte, ds []digest.Digest, limit int) []*repb.BatchUpdateBlobsRequest {
	var out []*repb.BatchUpdateBlobsRequest
	cur := &repb.BatchUpdateBlobsRequest{}
	size := 0
	for i, data := range blobs {
		r := &repb.BatchUpdateBlobsRequest_Request{Digest: ds[i].Proto(), Data: data}
		n := len(data) + 100 // digest, tags and lengths
		if size+n > limit && len(cur.Requests) > 0 {
			out = append(out, cur)
			cur, size = &repb.BatchUpdateBlobsRequest{}, 0
		}
		cur.Requests = append(cur.Requests, r)
		size += n
	}
	if len(cur.Requests) > 0 {
		out = append(out, cur)
	}
	return out
}

// BenchmarkBatchUpdateBlobs10k1KiB uploads 10,000 new 1 KiB blobs per
// iteration, in batches of at most max_batch_total_size_bytes (4 MiB) sent
// concurrently, and reports blobs/s.
func BenchmarkBatchUpdateBlobs10k1KiB(b *testing.B) {
	const n, size = 10000, 1 << 10
	e := benchEnv(b)
	limit := int(defaultOptions().MaxBatchSize)
	blobs := make([][]byte, n)
	for j := range blobs {
		blobs[j] = randomBlob(fmt.Sprint("batch", j), size)
	}
	ds := make([]digest.Digest, n)
	var cpu cpuMeter
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		for j, data := range blobs {
			stamp(data, i)
			ds[j] = digest.Compute(digest.SHA256, data)
		}
		reqs := batches(blobs, ds, limit)
		b.StartTimer()
		cpu.start()
		var wg sync.WaitGroup
		for _, req := range reqs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				resp, err := e.cas.BatchUpdateBlobs(context.Background(), req)
				if err != nil {
					b.Error(err)
					return
				}
				for _, r := range resp.Responses {
					if r.Status.GetCode() != 0 {
						b.Errorf("blob %v: %v", r.Digest, r.Status)
						return
					}
				}
			}()
		}
		wg.Wait()
		cpu.stop()
	}
	b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "blobs/s")
	cpu.report(b)
}

// BenchmarkBatchReadBlobs10k1KiB reads 10,000 stored 1 KiB blobs per
// iteration, 1,000 per BatchReadBlobs call, one call at a time (as the
// outside figures of issue 23 were taken), and reports blobs/s.
func BenchmarkBatchReadBlobs10k1KiB(b *testing.B) {
	const n, size, perCall = 10000, 1 << 10, 1000
	e := benchEnv(b)
	blobs := make([][]byte, n)
	ds := make([]digest.Digest, n)
	for j := range blobs {
		blobs[j] = randomBlob(fmt.Sprint("batchread", j), size)
		ds[j] = digest.Compute(digest.SHA256, blobs[j])
	}
	for _, req := range batches(blobs, ds, int(defaultOptions().MaxBatchSize)) {
		if _, err := e.cas.BatchUpdateBlobs(context.Background(), req); err != nil {
			b.Fatal(err)
		}
	}
	var reqs []*repb.BatchReadBlobsRequest
	for j := 0; j < n; j += perCall {
		reqs = append(reqs, &repb.BatchReadBlobsRequest{Digests: protos(ds[j : j+perCall]...)})
	}
	var cpu cpuMeter
	b.ResetTimer()
	cpu.start()
	for i := 0; i < b.N; i++ {
		for _, req := range reqs {
			resp, err := e.cas.BatchReadBlobs(context.Background(), req)
			if err != nil {
				b.Fatal(err)
			}
			for _, r := range resp.Responses {
				if r.Status.GetCode() != 0 || len(r.Data) != size {
					b.Fatalf("blob %v: %v, %d bytes", r.Digest, r.Status, len(r.Data))
				}
			}
		}
	}
	cpu.stop()
	b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "blobs/s")
	cpu.report(b)
}

// BenchmarkFindMissingBlobs10k asks about 10,000 digests per call, half of
// them present, and reports digests/s: one call at a time, and with as
// many calls in flight as there are cores, as a build client issuing them
// for concurrent actions would.
func BenchmarkFindMissingBlobs10k(b *testing.B) {
	const n = 10000
	e := benchEnv(b)
	req := &repb.FindMissingBlobsRequest{}
	for j := range n {
		data := randomBlob(fmt.Sprint("find", j), 100)
		stamp(data, j)
		d := digest.Compute(digest.SHA256, data)
		if j%2 == 0 {
			e.put(b, digest.SHA256, data)
		}
		req.BlobDigests = append(req.BlobDigests, d.Proto())
	}
	call := func(b *testing.B) {
		resp, err := e.cas.FindMissingBlobs(context.Background(), req)
		if err != nil {
			b.Fatal(err)
		}
		if len(resp.MissingBlobDigests) != n/2 {
			b.Fatalf("%d missing, want %d", len(resp.MissingBlobDigests), n/2)
		}
	}
	b.Run("sequential", func(b *testing.B) {
		var cpu cpuMeter
		cpu.start()
		for i := 0; i < b.N; i++ {
			call(b)
		}
		cpu.stop()
		b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "digests/s")
		cpu.report(b)
	})
	b.Run("parallel", func(b *testing.B) {
		var cpu cpuMeter
		cpu.start()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				call(b)
			}
		})
		cpu.stop()
		b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "digests/s")
		cpu.report(b)
	})
}

// BenchmarkSHA256 is the baseline: Go's crypto/sha256 on one core over
// 256 MiB. ByteStream Write cannot beat it, since it hashes every byte.
func BenchmarkSHA256(b *testing.B) {
	data := randomBlob("sha", bigBlob)
	b.SetBytes(bigBlob)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		sha256.Sum256(data)
	}
}

// BenchmarkCacheHit is what a fully cached Bazel 4 build asks of the
// server per action: a GetActionResult (stdout and stderr not inlined,
// as Bazel's remote cache lookup asks), then a ByteStream Read of each
// output file (Bazel 4 reads every output by ByteStream, never with
// BatchReadBlobs, and ignores inlined contents). Each action has the
// outputs of a compile in testdata/bazel/scale: an object file and a
// dependency file of a few KiB. The stores are on disk, as `gantry serve`
// has them by default; calls run as many at a time as Bazel's --jobs=8.
// It reports hits/s and the CPU of client and server per hit.
func BenchmarkCacheHit(b *testing.B) {
	const actions, jobs = 400, 8
	syscall.Sync()
	store, err := blobstore.NewDisk(b.TempDir(), blobstore.DiskOptions{MaxBytes: 2 << 30})
	if err != nil {
		b.Fatal(err)
	}
	ac, err := actioncache.NewDisk(b.TempDir(), 0)
	if err != nil {
		b.Fatal(err)
	}
	defer ac.Close()
	e := newEnvAC(b, store, ac, defaultOptions())
	type hit struct {
		req   *repb.GetActionResultRequest
		reads []*bspb.ReadRequest
	}
	hits := make([]hit, actions)
	for j := range hits {
		ar := &repb.ActionResult{ExecutionMetadata: &repb.ExecutedActionMetadata{Worker: "bench"}}
		for k, size := range []int{6 << 10, 1 << 10} {
			data := randomBlob(fmt.Sprint("hit", j, k), size)
			d := e.put(b, digest.SHA256, data)
			ar.OutputFiles = append(ar.OutputFiles, &repb.OutputFile{Path: fmt.Sprintf("out/%d.%d", j, k), Digest: d.Proto()})
			hits[j].reads = append(hits[j].reads, &bspb.ReadRequest{ResourceName: fmt.Sprintf("blobs/%s/%d", d.Hash, d.Size)})
		}
		ad := digest.Compute(digest.SHA256, []byte(fmt.Sprint("action", j)))
		if err := ac.Put(context.Background(), "", ad, ar); err != nil {
			b.Fatal(err)
		}
		hits[j].req = &repb.GetActionResultRequest{ActionDigest: ad.Proto()}
	}
	one := func(b *testing.B, h hit) {
		ctx := context.Background()
		if _, err := e.acc.GetActionResult(ctx, h.req); err != nil {
			b.Fatal(err)
		}
		for _, r := range h.reads {
			stream, err := e.bs.Read(ctx, r)
			if err != nil {
				b.Fatal(err)
			}
			for {
				if _, err := stream.Recv(); errors.Is(err, io.EOF) {
					break
				} else if err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	var cpu cpuMeter
	var next sync.Mutex
	i := 0
	b.SetParallelism((jobs + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
	b.ResetTimer()
	cpu.start()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			next.Lock()
			h := hits[i%actions]
			i++
			next.Unlock()
			one(b, h)
		}
	})
	cpu.stop()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "hits/s")
	cpu.report(b)
}
