package scheduler

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/gantry-build/gantry/internal/platform"
	"github.com/gantry-build/gantry/internal/statestore"
)

// A queued action placed on the small class is on it again after a
// restart (the class is not stored: the history chooses it again), so a
// large worker does not take it while a small one can; one whose run
// failed on small for want of size goes to large after the restart too.
func TestRestoredTasksKeepTheirSizeClass(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind.name, func(t *testing.T) {
			ctx := context.Background()
			store, reopen := kind.open(t)
			clk := &fakeClock{now: time.Unix(1_700_000_000, 0)}
			start := func(store statestore.Store) (*Scheduler, *ShapeHistory, func()) {
				h, err := NewShapeHistory(ctx, store, ShapeOptions{MaxShapes: 100}, nil)
				if err != nil {
					t.Fatal(err)
				}
				sc, err := NewSizeClasses(testClasses, SizeClassOptions{MaxSlowdown: 1.5}, rand.New(rand.NewPCG(1, 1)))
				if err != nil {
					t.Fatal(err)
				}
				s := New(Config{Shapes: h, SizeClasses: sc, HeartbeatTimeout: time.Hour, CallerGrace: time.Hour}, clk, nil)
				sctx, cancel := context.WithCancel(ctx)
				if err := s.Attach(sctx, store); err != nil {
					t.Fatal(err)
				}
				return s, h, func() { cancel(); <-s.Stopped() }
			}
			s, h, stop := start(store)
			learn(h, 1, "large", 10*time.Second, 0, clk.Now())
			learn(h, 1, "small", 12*time.Second, 0, clk.Now())
			learn(h, 5, "large", 10*time.Second, 0, clk.Now())
			learn(h, 5, "small", 11*time.Second, 0, clk.Now())
			clk.Advance(time.Second)
			h.RecordFailure(deriveShape("main", linux, sleepCmd(5), ""), sizeHistoryPrefix+"small", clk.Now())
			submitShape(t, s, "fits-small", 1)
			submitShape(t, s, "failed-small", 5)
			if err := h.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			if err := s.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			stop()

			s2, _, stop2 := start(reopen(store))
			defer stop2()
			registerPlatform(s2, "large", platform.Worker{Cores: 16, MemoryBytes: 64 << 30, AllowUnmatched: true})
			registerPlatform(s2, "small", platform.Worker{Cores: 4, MemoryBytes: 8 << 30, AllowUnmatched: true})
			a := pollNow(t, s2, "large", 16)
			if a == nil || a.Task.ActionDigest != action("failed-small") {
				t.Fatalf("the large worker took %v, want failed-small (only it is on the large class)", a)
			}
			if pollNow(t, s2, "large", 16) != nil {
				t.Fatal("the large worker took the action placed on the small class")
			}
			if a := pollNow(t, s2, "small", 4); a == nil || a.Task.ActionDigest != action("fits-small") {
				t.Fatalf("the small worker took %v, want fits-small", a)
			}
		})
	}
}

// An action placed on a class is expected to take that class's time: its
// learned timeout is a multiple of it, not of the mean over the classes.
func TestLearnedTimeoutFollowsTheSizeClass(t *testing.T) {
	h, err := NewShapeHistory(context.Background(), statestore.NewMemory(), ShapeOptions{MaxShapes: 100}, nil)
	if err != nil {
		t.Fatal(err)
	}
	sc, err := NewSizeClasses(testClasses, SizeClassOptions{MaxSlowdown: 1.5}, rand.New(rand.NewPCG(1, 1)))
	if err != nil {
		t.Fatal(err)
	}
	clk := &fakeClock{now: time.Unix(1_700_000_000, 0)}
	s := New(Config{Shapes: h, SizeClasses: sc, HeartbeatTimeout: time.Hour,
		LearnedTimeouts: LearnedTimeouts{Multiple: 3, Floor: time.Second, MinSamples: 3}}, clk, nil)
	registerPlatform(s, "small", platform.Worker{Cores: 4, MemoryBytes: 8 << 30, AllowUnmatched: true})
	registerPlatform(s, "large", platform.Worker{Cores: 16, MemoryBytes: 64 << 30, AllowUnmatched: true})
	for range 3 {
		learn(h, 1, "large", 10*time.Second, 0, clk.Now())
		learn(h, 1, "small", 14*time.Second, 0, clk.Now())
	}
	submitShape(t, s, "a", 1)
	class, a := classOfNext(t, s)
	if class != "small" {
		t.Fatalf("ran on %q, want small (14s is within 1.5x of 10s)", class)
	}
	if want := 42 * time.Second; a.Timeout != want {
		t.Errorf("learned timeout %v, want %v (3 x small's 14s, not 3 x the mean)", a.Timeout, want)
	}
}
