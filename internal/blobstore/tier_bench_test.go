package blobstore_test

import (
	"context"
	"encoding/binary"
	"math/rand/v2"
	"syscall"
	"testing"
	"time"

	"github.com/gantry-build/gantry/internal/blobstore"
	"github.com/gantry-build/gantry/internal/digest"
)

// BenchmarkTieredS3Write256MiB uploads new 256 MiB blobs in 1 MiB writes
// through the disk tier in front of a bucket (a real MinIO server on the
// same machine, as miniotest starts it), as `gantry serve` stores what
// ByteStream Write receives with storage.cas.backend: s3: the tier writes
// the disk cache and a multipart upload (16 MiB parts, the default
// part_size) at once. Without gRPC. cpu-ms/op is this process's CPU time
// (hashing, copying, the HTTP client), MinIO's left out. It skips without
// a minio binary (see miniotest).
func BenchmarkTieredS3Write256MiB(b *testing.B) {
	const size = 256 << 20
	data := make([]byte, size)
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < size; i += 8 {
		binary.LittleEndian.PutUint64(data[i:], r.Uint64())
	}
	cache, err := blobstore.NewDisk(b.TempDir(), blobstore.DiskOptions{MaxBytes: 4 * size})
	if err != nil {
		b.Fatal(err)
	}
	tier := blobstore.NewTiered(openS3Parts(b, 16<<20).CAS(), cache, blobstore.NoTierObserver{})
	ctx := context.Background()
	b.SetBytes(size)
	var cpu time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		binary.LittleEndian.PutUint64(data, uint64(time.Now().UnixNano()))
		d := digest.Compute(digest.SHA256, data)
		syscall.Sync()
		b.StartTimer()
		c0 := processCPU()
		w, err := tier.Create(ctx, d)
		if err != nil {
			b.Fatal(err)
		}
		for off := 0; off < size; off += 1 << 20 {
			if _, err := w.Write(data[off : off+1<<20]); err != nil {
				b.Fatal(err)
			}
		}
		if err := w.Commit(); err != nil {
			b.Fatal(err)
		}
		w.Close()
		cpu += processCPU() - c0
	}
	b.ReportMetric(float64(cpu.Milliseconds())/float64(b.N), "cpu-ms/op")
}

// processCPU is the CPU time (user and system) the process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
