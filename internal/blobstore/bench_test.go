package blobstore

import (
	"context"
	"encoding/binary"
	"fmt"
	"runtime"
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
				writeBlob(b, s, d, data, chunk)
				cpu += processCPU() - c0
			}
			b.ReportMetric(float64(cpu.Milliseconds())/float64(b.N), "cpu-ms/op")
		})
	}
}

// writeBlob streams data (whose digest is d) into s in writes of chunk
// bytes, and commits it.
func writeBlob(b *testing.B, s Store, d digest.Digest, data []byte, chunk int) {
	w, err := s.Create(context.Background(), d)
	if err != nil {
		b.Fatal(err)
	}
	for off := 0; off < len(data); off += chunk {
		if _, err := w.Write(data[off:min(off+chunk, len(data))]); err != nil {
			b.Fatal(err)
		}
	}
	if err := w.Commit(); err != nil {
		b.Fatal(err)
	}
	w.Close()
}

// BenchmarkDiskWriteBig stores new 256 MiB blobs (1 MiB writes) into a
// store that is full, so that each evicts the least recently used one (the
// steady state of a CAS in service), and into one that fills, with room
// for all of them. Without gRPC: what the store itself costs, hashing
// included. On a virtual machine that hands free memory back to its host
// the filling store pays for page cache on memory the machine has not
// used for a while (docs/PERFORMANCE-HISTORY.md, "session 15").
func BenchmarkDiskWriteBig(b *testing.B) {
	const size = 256 << 20
	data := blob("big", size)
	for _, c := range []struct {
		name string
		max  int64
	}{{"store=full", size * 17 / 2}, {"store=filling", 64 << 30}} {
		b.Run(c.name, func(b *testing.B) {
			s, err := NewDisk(b.TempDir(), DiskOptions{MaxBytes: c.max})
			if err != nil {
				b.Fatal(err)
			}
			// next makes data a new blob and returns its digest.
			next := func() digest.Digest {
				binary.LittleEndian.PutUint64(data, uint64(time.Now().UnixNano()))
				return digest.Compute(digest.SHA256, data)
			}
			put := func(d digest.Digest) { writeBlob(b, s, d, data, 1<<20) }
			if c.max < 64<<30 {
				// Eight blobs held: each timed one evicts one. The
				// ninth put's eviction leaves a spare file (an eighth
				// of the bound) for the first timed one.
				for range 9 {
					put(next())
				}
				s.settle()
				// The fill's writeback is not charged to the timed
				// writes (nor does it throttle them).
				syscall.Sync()
			}
			b.SetBytes(size)
			var cpu time.Duration
			b.ResetTimer() // the fill is not timed
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				d := next()
				b.StartTimer()
				c0 := processCPU()
				put(d)
				cpu += processCPU() - c0
			}
			b.StopTimer()
			s.settle()
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

// BenchmarkWriteBig stores new 256 MiB blobs in 1 MiB writes into the
// memory store and into the disk store side by side (each with room for
// every blob, so neither evicts), hashing included, without gRPC: the
// memory store should be at least as fast as the disk (issue 23). The
// memory store's bytes allocated per byte stored are reported too.
func BenchmarkWriteBig(b *testing.B) {
	const size = 256 << 20
	data := blob("big", size)
	for _, name := range []string{"store=memory", "store=disk"} {
		b.Run(name, func(b *testing.B) {
			var s Store = NewMemory(0)
			if name == "store=disk" {
				d, err := NewDisk(b.TempDir(), DiskOptions{MaxBytes: 64 << 30})
				if err != nil {
					b.Fatal(err)
				}
				s = d
			}
			next := func() digest.Digest {
				binary.LittleEndian.PutUint64(data, uint64(time.Now().UnixNano()))
				return digest.Compute(digest.SHA256, data)
			}
			b.SetBytes(size)
			var cpu time.Duration
			var alloc uint64
			var ms runtime.MemStats
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				d := next()
				runtime.ReadMemStats(&ms)
				a0 := ms.TotalAlloc
				b.StartTimer()
				c0 := processCPU()
				writeBlob(b, s, d, data, 1<<20)
				cpu += processCPU() - c0
				b.StopTimer()
				runtime.ReadMemStats(&ms)
				alloc += ms.TotalAlloc - a0
				b.StartTimer()
			}
			b.ReportMetric(float64(cpu.Milliseconds())/float64(b.N), "cpu-ms/op")
			b.ReportMetric(float64(alloc)/float64(b.N)/size, "alloc-bytes/byte")
		})
	}
}
