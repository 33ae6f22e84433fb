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

// classedAction is a synthetic action's known wall time on each class.
type classedAction struct{ large, small time.Duration }

// BenchmarkSizeClassesMakespan runs one synthetic invocation of gantry
// batch in virtual time (the fake clock, the real scheduler core,
// simulated single-slot workers) on 8 large and 16 small workers: 360
// small actions of 1-10s that take the same on both classes and big
// ones of 1-3 minutes that take three times as long on a small worker,
// 20 of them (balanced: the large class can take them all) or 40 (the
// large class is the bottleneck), submitted in a seeded random order,
// the history knowing every time on both classes. It reports the
// completion time of first come (no size classes, no longest first),
// longest first alone, and size classes with and without longest first
// (exploration 0.05, seeded), against the lower bound (the best
// fractional split of the work between the classes, and the longest
// action on its faster class), and the share of actions that ran on the
// small class.
// go test -run '^$' -bench SizeClassesMakespan ./internal/scheduler
func BenchmarkSizeClassesMakespan(b *testing.B) {
	const large, small = 8, 16
	for _, big := range []int{20, 40} {
		rng := rand.New(rand.NewPCG(42, 42))
		var acts []classedAction
		for range 360 {
			d := time.Duration(1+rng.IntN(10)) * time.Second
			acts = append(acts, classedAction{d, d})
		}
		for range big {
			d := time.Duration(60+rng.IntN(120)) * time.Second
			acts = append(acts, classedAction{d, 3 * d})
		}
		rng.Shuffle(len(acts), func(i, j int) { acts[i], acts[j] = acts[j], acts[i] })
		bound := classedLowerBound(acts, large, small)
		for _, tc := range []struct {
			name    string
			classes bool
			mode    LongestFirstMode
		}{
			{"first-come", false, LongestFirstOff},
			{"longest-first", false, LongestFirstGantry},
			{"size-classes", true, LongestFirstGantry},
			{"size-classes-first-come", true, LongestFirstOff},
		} {
			b.Run(fmt.Sprintf("big=%d/%s", big, tc.name), func(b *testing.B) {
				var span time.Duration
				var onSmall int
				for b.Loop() {
					span, onSmall = simulateClassed(b, tc.classes, tc.mode, acts, large, small)
				}
				b.ReportMetric(span.Seconds(), "makespan-s")
				b.ReportMetric(bound.Seconds(), "lowerbound-s")
				b.ReportMetric(span.Seconds()/bound.Seconds(), "x-bound")
				b.ReportMetric(float64(onSmall)/float64(len(acts)), "share-small")
			})
		}
	}
}

// classedLowerBound is the shortest completion time of acts on large
// and small single-slot workers if an action could be split between
// them: the work goes to the small class in the order of how little it
// loses there (the fractional knapsack), found by bisection; and no
// sooner than the longest action takes on its faster class.
func classedLowerBound(acts []classedAction, large, small int) time.Duration {
	byRatio := append([]classedAction(nil), acts...)
	sort.Slice(byRatio, func(i, j int) bool {
		return float64(byRatio[i].small)/float64(byRatio[i].large) < float64(byRatio[j].small)/float64(byRatio[j].large)
	})
	var longest, total time.Duration
	for _, a := range acts {
		longest = max(longest, min(a.large, a.small))
		total += a.large
	}
	fits := func(t time.Duration) bool {
		smallLeft := float64(t) * float64(small)
		var onLarge float64
		for _, a := range byRatio {
			share := 1.0
			if smallLeft > 0 {
				share = max(0, 1-smallLeft/float64(a.small))
				smallLeft -= float64(a.small) * (1 - share)
			}
			onLarge += share * float64(a.large)
		}
		return onLarge <= float64(t)*float64(large)
	}
	lo, hi := longest, max(longest, total)
	for hi-lo > time.Millisecond {
		mid := lo + (hi-lo)/2
		if fits(mid) {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi
}

// simulateClassed runs acts as one invocation of gantry batch on large
// and small single-slot workers (each action taking its time on the
// class of the worker that runs it) and returns when the last finished
// and how many ran on a small worker.
func simulateClassed(b *testing.B, classes bool, mode LongestFirstMode, acts []classedAction, large, small int) (time.Duration, int) {
	h, err := NewShapeHistory(context.Background(), statestore.NewMemory(), ShapeOptions{MaxShapes: len(acts) + 1}, nil)
	if err != nil {
		b.Fatal(err)
	}
	clk := &fakeClock{now: time.Unix(1_700_000_000, 0)}
	start := clk.Now()
	cfg := Config{Shapes: h, LongestFirst: mode, HeartbeatTimeout: time.Hour}
	if classes {
		if cfg.SizeClasses, err = NewSizeClasses([]SizeClass{{Name: "small", Cores: 4}, {Name: "large", Cores: 16}},
			SizeClassOptions{MaxSlowdown: DefaultMaxSlowdown, Exploration: DefaultExploration}, rand.New(rand.NewPCG(1, 2))); err != nil {
			b.Fatal(err)
		}
	}
	s := New(cfg, clk, nil)
	// Workers poll in a seeded random order of classes.
	var idle []string
	isSmall := map[string]bool{}
	for i := range large + small {
		id := fmt.Sprintf("w%d", i)
		cores := 16
		if i >= large {
			cores, isSmall[id] = 4, true
		}
		s.RegisterWorker(WorkerInfo{ID: id, Platform: platform.Worker{Cores: cores, AllowUnmatched: true}, Slots: 1})
		idle = append(idle, id)
	}
	rng := rand.New(rand.NewPCG(7, 7))
	rng.Shuffle(len(idle), func(i, j int) { idle[i], idle[j] = idle[j], idle[i] })
	meta := toolMetadata("gantry", "")
	durOf := map[string]classedAction{}
	for i, a := range acts {
		cmd := commandBytes("job", fmt.Sprint(i))
		k := deriveShape("main", linux, cmd, "")
		h.Record(k, sizeHistoryPrefix+"large", Sample{Wall: a.large}, start)
		h.Record(k, sizeHistoryPrefix+"small", Sample{Wall: a.small}, start)
		d := action(fmt.Sprint(i))
		durOf[d.Hash] = a
		if _, err := s.Submit(SubmitRequest{Instance: "main", ActionDigest: d, Platform: linux,
			CommandBytes: cmd, Metadata: meta, Invocation: []string{"batch"}}); err != nil {
			b.Fatal(err)
		}
	}
	var busy []simRun
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	onSmall := 0
	for {
		var still []string
		for _, w := range idle {
			a, err := s.Poll(ctx, w, Capacity{Cores: 1})
			if err != nil {
				b.Fatal(err)
			}
			if a == nil {
				still = append(still, w)
				continue
			}
			d := durOf[a.Task.ActionDigest.Hash].large
			if isSmall[w] {
				d = durOf[a.Task.ActionDigest.Hash].small
				onSmall++
			}
			busy = append(busy, simRun{end: clk.Now().Add(d), worker: w, lease: a.LeaseID})
		}
		idle = still
		if len(busy) == 0 {
			return clk.Now().Sub(start), onSmall
		}
		var next string
		next, busy = finishFirst(b, s, clk, busy)
		idle = append(idle, next)
	}
}
