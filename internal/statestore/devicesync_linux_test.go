//go:build linux

package statestore

import (
	"os"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// BenchmarkDeviceSync measures what a commit of the embedded store costs
// the device: b.N commits of 2 KiB, each a write into a preallocated,
// synced file (as the state log writes) and an fdatasync, one at a time
// ("one", the state log today) or with two syncs in flight ("two": the
// writes in order, each sync started without waiting for the previous
// one, which the state log does not do). It reports the latency of a
// commit (p50, p90, p99, µs) and commits/s. The temporary directory is on
// the disk TMPDIR names: point it at the data directory's file system.
//
//	go test -run '^$' -bench DeviceSync -benchtime 1000x -count 3 ./internal/statestore/
func BenchmarkDeviceSync(b *testing.B) {
	for _, inFlight := range []struct {
		name string
		n    int
	}{{"one", 1}, {"two", 2}} {
		b.Run(inFlight.name, func(b *testing.B) { benchDeviceSync(b, inFlight.n) })
	}
}

func benchDeviceSync(b *testing.B, inFlight int) {
	const size = 2 << 10
	f, err := os.OpenFile(filepath.Join(b.TempDir(), "log"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	zeros := make([]byte, 1<<20)
	for off := int64(0); off < int64(b.N)*size+int64(len(zeros)); off += int64(len(zeros)) {
		if _, err := f.WriteAt(zeros, off); err != nil {
			b.Fatal(err)
		}
	}
	if err := f.Sync(); err != nil {
		b.Fatal(err)
	}
	rec := make([]byte, size)
	for i := range rec {
		rec[i] = byte(i)
	}
	lat := make([]time.Duration, b.N)
	var mu sync.Mutex // orders the writes, as one log's appends are
	next := 0
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for range inFlight {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				i := next
				if i >= b.N {
					mu.Unlock()
					return
				}
				next++
				t := time.Now()
				_, err := f.WriteAt(rec, int64(i)*size)
				mu.Unlock()
				if err == nil {
					err = unix.Fdatasync(int(f.Fd()))
				}
				if err != nil {
					b.Error(err)
					return
				}
				lat[i] = time.Since(t)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	us := func(q float64) float64 { return float64(lat[int(q*float64(len(lat)-1))]) / 1e3 }
	b.ReportMetric(us(0.5), "p50-µs")
	b.ReportMetric(us(0.9), "p90-µs")
	b.ReportMetric(us(0.99), "p99-µs")
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "commits/s")
}
