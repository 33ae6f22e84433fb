package blobstore

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gantry-build/gantry/internal/digest"
)

// BenchmarkDiskWrite measures a 64 MiB blob streamed into the disk store
// in chunks of the sizes clients send (16 KiB: Bazel; 1 MiB: the Go SDK).
func BenchmarkDiskWrite(b *testing.B) {
	const size = 64 << 20
	data := blob("bench", size)
	for _, c := range []struct {
		chunk  int
		direct int64
	}{{16 << 10, 0}, {1 << 20, 0}, {16 << 10, 1}, {1 << 20, 1}} {
		chunk := c.chunk
		io := "buffered"
		if c.direct > 0 {
			io = "direct"
		}
		b.Run(fmt.Sprintf("chunk=%dKiB/io=%s", chunk>>10, io), func(b *testing.B) {
			s, err := NewDisk(b.TempDir(), DiskOptions{MaxBytes: 1 << 30, DirectIOThreshold: c.direct})
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(size)
			var cpu time.Duration
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				binary.LittleEndian.PutUint64(data, uint64(i))
				d := digest.Compute(digest.SHA256, data)
				syscall.Sync()
				b.StartTimer()
				c0 := processCPU()
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
				cpu += processCPU() - c0
			}
			b.ReportMetric(float64(cpu.Milliseconds())/float64(b.N), "cpu-ms/op")
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

// processCPU is the CPU time (user and system) the process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
