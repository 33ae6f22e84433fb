package statestore

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gantry-build/gantry/internal/statestore/pgtest"
)

// benchApply measures Apply throughput: appliers goroutines each apply
// batches of 3 mutations of ~300 bytes (the shape of a scheduler change:
// an operation, its task, a queue entry) over a working set of 10,000
// keys, until b.N batches are durable. It reports commits/s (group
// commits: fsyncs or transactions) and mutations/s.
//
//	go test -run '^$' -bench Apply -benchtime 5s -count 5 ./internal/statestore/
func benchApply(b *testing.B, s Store, appliers int) {
	value := []byte(strings.Repeat("v", 280))
	c, _ := s.(committer)
	var before uint64
	if c != nil {
		before = c.Commits()
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	cpu0 := cpuTime()
	start := time.Now()
	for g := 0; g < appliers; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(b.N) {
					return
				}
				k := fmt.Sprintf("%08d", i%10000)
				err := s.Apply(context.Background(), []Mutation{
					{Kind: "op", Key: "op/" + k, Value: value},
					{Kind: "task", Key: "task/" + k, Value: value},
					{Kind: "queue", Key: "q/" + k, Value: value},
				})
				if err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start).Seconds()
	b.StopTimer()
	if c != nil {
		b.ReportMetric(float64(c.Commits()-before)/elapsed, "commits/s")
	}
	b.ReportMetric(float64(3*b.N)/elapsed, "mutations/s")
	b.ReportMetric(float64(b.N)/elapsed, "applies/s")
	b.ReportMetric((cpuTime()-cpu0).Seconds()*1e6/float64(b.N), "cpu-us/apply")
}

var benchAppliers = []int{1, 16, 64}

func BenchmarkApplyEmbedded(b *testing.B) {
	for _, n := range benchAppliers {
		b.Run(fmt.Sprintf("appliers=%d", n), func(b *testing.B) {
			s, err := OpenEmbedded(b.TempDir())
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			benchApply(b, s, n)
		})
	}
}

// BenchmarkApplyPostgres runs against a local server with fsync on.
func BenchmarkApplyPostgres(b *testing.B) {
	dsn := pgtest.StartWith(b, pgtest.Options{Durable: true})
	for _, n := range benchAppliers {
		b.Run(fmt.Sprintf("appliers=%d", n), func(b *testing.B) {
			s, err := OpenPostgres(context.Background(), pgtest.CreateDatabase(b, dsn))
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			benchApply(b, s, n)
		})
	}
}
