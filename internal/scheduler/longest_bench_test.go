package scheduler

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"testing"
	"time"

	"github.com/gantry-build/gantry/internal/platform"
	"github.com/gantry-build/gantry/internal/statestore"
)

// BenchmarkLongestFirstMakespan runs one synthetic invocation in
// virtual time (the fake clock, simulated single-slot workers that run
// each action for exactly its known duration) and reports its
// completion time with longest first and first come, against the lower
// bound max(total work / workers, longest action). The durations are
// skewed: 190 actions of 1-10s and 10 of 2-5 minutes, submitted in a
// seeded random order; the history knows every duration.
// go test -run '^$' -bench LongestFirstMakespan ./internal/scheduler
func BenchmarkLongestFirstMakespan(b *testing.B) {
	const workers = 16
	rng := rand.New(rand.NewPCG(42, 42))
	var durs []time.Duration
	for range 190 {
		durs = append(durs, time.Duration(1+rng.IntN(10))*time.Second)
	}
	for range 10 {
		durs = append(durs, time.Duration(120+rng.IntN(180))*time.Second)
	}
	rng.Shuffle(len(durs), func(i, j int) { durs[i], durs[j] = durs[j], durs[i] })
	var total, longest time.Duration
	for _, d := range durs {
		total += d
		longest = max(longest, d)
	}
	bound := max(total/workers, longest)
	for _, mode := range []LongestFirstMode{LongestFirstGantry, LongestFirstOff} {
		b.Run(string(mode), func(b *testing.B) {
			var span time.Duration
			for b.Loop() {
				span, _ = simulateInvocation(b, mode, durs, workers, 0)
			}
			b.ReportMetric(span.Seconds(), "makespan-s")
			b.ReportMetric(bound.Seconds(), "lowerbound-s")
			b.ReportMetric(span.Seconds()/bound.Seconds(), "x-bound")
		})
	}
	// The drain signal: the workers gantry_workers_needed asks for to
	// drain the invocation within 5 minutes, and how long that many
	// simulated workers actually take (longest first).
	b.Run("drain-5m", func(b *testing.B) {
		var needed int
		var took time.Duration
		for b.Loop() {
			_, needed = simulateInvocation(b, LongestFirstGantry, durs, 1, 5*time.Minute)
			took, _ = simulateInvocation(b, LongestFirstGantry, durs, needed, 0)
		}
		b.ReportMetric(float64(needed), "workers-needed")
		b.ReportMetric(took.Seconds(), "drain-s")
	})
}

// simulateInvocation runs durs as one invocation of gantry batch on
// workers single-slot workers and returns when the last one finished.
// With target > 0 it returns at once the workers the autoscaling signal
// asks for to drain the invocation within target instead.
func simulateInvocation(b *testing.B, mode LongestFirstMode, durs []time.Duration, workers int, target time.Duration) (time.Duration, int) {
	h, err := NewShapeHistory(context.Background(), statestore.NewMemory(), ShapeOptions{MaxShapes: len(durs) + 1}, nil)
	if err != nil {
		b.Fatal(err)
	}
	clk := &fakeClock{now: time.Unix(1_700_000_000, 0)}
	start := clk.Now()
	s := New(Config{Shapes: h, LongestFirst: mode, HeartbeatTimeout: time.Hour}, clk, nil)
	meta := toolMetadata("gantry", "")
	for i, d := range durs {
		cmd := commandBytes("job", fmt.Sprint(i))
		h.Record(deriveShape("main", linux, cmd, ""), "-", Sample{Wall: d}, start)
		if _, err := s.Submit(SubmitRequest{Instance: "main", ActionDigest: action(fmt.Sprint(i)), Platform: linux,
			CommandBytes: cmd, Metadata: meta, Invocation: []string{"batch"}}); err != nil {
			b.Fatal(err)
		}
	}
	if target > 0 {
		return 0, s.Demand(target)[0].Workers
	}
	var busy []simRun
	idle := make([]string, workers)
	for i := range idle {
		idle[i] = fmt.Sprintf("w%d", i)
		s.RegisterWorker(WorkerInfo{ID: idle[i], Platform: platform.Worker{Cores: 1, AllowUnmatched: true}, Slots: 1})
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	durOf := map[string]time.Duration{}
	for i, d := range durs {
		durOf[action(fmt.Sprint(i)).Hash] = d
	}
	for {
		for len(idle) > 0 {
			a, err := s.Poll(ctx, idle[0], Capacity{Cores: 1})
			if err != nil {
				b.Fatal(err)
			}
			if a == nil {
				break
			}
			busy = append(busy, simRun{end: clk.Now().Add(durOf[a.Task.ActionDigest.Hash]), worker: idle[0], lease: a.LeaseID})
			idle = idle[1:]
		}
		if len(busy) == 0 {
			return clk.Now().Sub(start), workers
		}
		var next string
		next, busy = finishFirst(b, s, clk, busy)
		idle = append(idle, next)
	}
}

// simRun is an action a simulated worker runs until end.
type simRun struct {
	end           time.Time
	worker, lease string
}

// finishFirst advances clk to the first of busy to end, completes it and
// returns its worker and the rest.
func finishFirst(b *testing.B, s *Scheduler, clk *fakeClock, busy []simRun) (string, []simRun) {
	sort.Slice(busy, func(i, j int) bool { return busy[i].end.Before(busy[j].end) })
	next := busy[0]
	clk.Advance(next.end.Sub(clk.Now()))
	ok, stored := s.Complete(context.Background(), next.worker, []Completion{{LeaseID: next.lease, Response: okResponse()}})
	stored()
	if !ok[0] {
		b.Fatal("a completion was refused")
	}
	return next.worker, busy[1:]
}
