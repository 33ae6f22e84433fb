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

// BenchmarkTieredWrite256MiB uploads new 256 MiB blobs in 1 MiB writes
// through the disk tier, as `gantry serve` stores what ByteStream Write
// receives with storage.cas.backend: s3 (the tier writes the disk cache
// and the remote at once), without gRPC. The remote is a bucket on a real
// MinIO server on the same machine (remote=s3: a multipart upload of 16
// MiB parts, the default part_size; skipped without a minio binary, see
// miniotest) or, to see the tier's own cost without MinIO's noise, the
// memory store (remote=memory). cpu-ms/op is this process's CPU time
// (hashing, copying, the HTTP client), MinIO's left out.
func BenchmarkTieredWrite256MiB(b *testing.B) {
	const size = 256 << 20
	data := make([]byte, size)
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < size; i += 8 {
		binary.LittleEndian.PutUint64(data[i:], r.Uint64())
	}
	for _, c := range []struct {
		name   string
		remote func(b *testing.B) blobstore.Store
	}{
		{"remote=memory", func(b *testing.B) blobstore.Store { return blobstore.NewMemory(2 * size) }},
		{"remote=s3", func(b *testing.B) blobstore.Store { return openS3Parts(b, 16<<20).CAS() }},
	} {
		b.Run(c.name, func(b *testing.B) {
			cache, err := blobstore.NewDisk(b.TempDir(), blobstore.DiskOptions{MaxBytes: 4 * size})
			if err != nil {
				b.Fatal(err)
			}
			tier := blobstore.NewTiered(c.remote(b), cache, blobstore.NoTierObserver{})
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
		})
	}
}

// processCPU is the CPU time (user and system) the process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
