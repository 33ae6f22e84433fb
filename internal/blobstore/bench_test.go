package blobstore

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/gantry-build/gantry/internal/digest"
)

// BenchmarkDiskWrite measures a 64 MiB blob streamed into the disk store
// in chunks of the sizes clients send (16 KiB: Bazel; 1 MiB: the Go SDK).
func BenchmarkDiskWrite(b *testing.B) {
	const size = 64 << 20
	data := blob("bench", size)
	for _, chunk := range []int{16 << 10, 1 << 20} {
		b.Run(fmt.Sprintf("chunk=%dKiB", chunk>>10), func(b *testing.B) {
			s, err := NewDisk(b.TempDir(), DiskOptions{MaxBytes: 1 << 30})
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(size)
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				binary.LittleEndian.PutUint64(data, uint64(i))
				d := digest.Compute(digest.SHA256, data)
				b.StartTimer()
				w, err := s.Create(context.Background(), d)
				if err != nil {
					b.Fatal(err)
				}
				for off := 0; off < size; off += chunk {
					if _, err := w.Write(data[off : off+chunk]); err != nil {
						b.Fatal(err)
					}
				}
				if err := w.Commit(); err != nil {
					b.Fatal(err)
				}
				w.Close()
			}
		})
	}
}

// BenchmarkDiskPut1KiB stores distinct 1 KiB blobs from several goroutines,
// as BatchUpdateBlobs does, and reports blobs/s: the cost of a file per
// blob, without gRPC.
func BenchmarkDiskPut1KiB(b *testing.B) {
	s, err := NewDisk(b.TempDir(), DiskOptions{})
	if err != nil {
		b.Fatal(err)
	}
	var next atomic.Uint64
	b.SetParallelism(4)
	b.RunParallel(func(pb *testing.PB) {
		data := make([]byte, 1<<10)
		for pb.Next() {
			binary.LittleEndian.PutUint64(data, next.Add(1))
			d := digest.Compute(digest.SHA256, data)
			if err := Put(context.Background(), s, d, data); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "blobs/s")
}
