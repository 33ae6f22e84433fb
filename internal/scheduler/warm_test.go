package scheduler

import (
	"context"
	"testing"
	"time"

	"github.com/gantry-build/gantry/internal/platform"
)

func withKey(key string) func(*SubmitRequest) {
	return withPlatform("OSFamily=linux", platform.PersistentWorkerKey+"="+key)
}

func TestWarmKeys(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	var wk warmKeys
	wk.note("", now)
	if len(wk.keys) != 0 || wk.has("", now) {
		t.Fatal("an action without a key made the worker warm")
	}
	for i := range maxWarmKeys + 1 {
		wk.note(string(rune('a'+i)), now.Add(time.Duration(i)*time.Second))
	}
	if len(wk.keys) != maxWarmKeys || wk.has("a", now.Add(10*time.Second)) || !wk.has("b", now.Add(10*time.Second)) {
		t.Fatalf("after %d keys: %+v; want the oldest (a) forgotten", maxWarmKeys+1, wk.keys)
	}
	if wk.has("b", now.Add(time.Second+warmFor)) {
		t.Error("a key is warm longer than warmFor")
	}
}

// TestWarmStep: a worker warm for key k takes k's next action instead of
// the fair choice while that has waited less than the bound.
func TestWarmStep(t *testing.T) {
	const bound = 10 * time.Second
	for _, tc := range []struct {
		name     string
		bound    time.Duration
		warm     string
		after    time.Duration
		urgent   bool
		wantWarm bool
	}{
		{name: "warm work first within the bound", bound: bound, warm: "k", wantWarm: true},
		{name: "the fair choice once it waited the bound", bound: bound, warm: "k", after: bound},
		{name: "a worker warm for another key", bound: bound, warm: "other"},
		{name: "a cold worker", bound: bound},
		{name: "preference off", warm: "k"},
		{name: "an urgent fair choice wins", bound: bound, warm: "k", urgent: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, clk := newQueueTest(t, func(c *Config) { c.PersistentWorkerStickiness = tc.bound })
			registerPlatform(s, "w", platform.Worker{Cores: 1, AllowUnmatched: true})
			fair := taskOf(t, s, submit(t, s, "fair", inInvocation("a")))
			clk.Advance(time.Second)
			warm := taskOf(t, s, submit(t, s, "warm", inInvocation("b"), withKey("k")))
			wt := choiceWaiter(t, s, "w")
			s.mu.Lock()
			defer s.mu.Unlock()
			wt.worker.warm.note(tc.warm, clk.Now())
			if got, _ := (fairnessStep{s.queue}).choose(wt); got != fair {
				t.Fatalf("the fair choice is %v, want %v", got, fair)
			}
			want := fair
			if tc.wantWarm {
				want = warm
			}
			if got := (warmStep{s.queue, tc.bound}).choose(wt, clk.Now().Add(tc.after), fair, tc.urgent); got != want {
				t.Fatalf("choose = %v, want %v", got, want)
			}
		})
	}
}

// TestWarmWorkerGetsTheAction: of two idle workers, a new action goes to
// the one that ran its key, though the other waited longer; the key is
// no requirement: the cold worker takes the next one.
func TestWarmWorkerGetsTheAction(t *testing.T) {
	s, _ := newQueueTest(t, func(c *Config) { c.PersistentWorkerStickiness = 10 * time.Second })
	for _, id := range []string{"cold", "warm"} {
		registerPlatform(s, id, platform.Worker{Cores: 1, AllowUnmatched: true})
	}
	submit(t, s, "first", withKey("k"))
	if a := pollNow(t, s, "warm", 1); a == nil {
		t.Fatal("the warm worker got no work")
	}
	got := map[string]chan *Assignment{"cold": make(chan *Assignment, 1), "warm": make(chan *Assignment, 1)}
	for i, id := range []string{"cold", "warm"} {
		go func() {
			a, _ := s.Poll(context.Background(), id, Capacity{Cores: 1})
			got[id] <- a
		}()
		waitForWaiters(t, s, i+1)
	}
	submit(t, s, "second", withKey("k"))
	if a := receive(t, "the warm worker's assignment", got["warm"]); a == nil || a.Task.ActionDigest != action("second") {
		t.Fatalf("the warm worker got %+v", a)
	}
	submit(t, s, "third", withKey("k"))
	if a := receive(t, "the cold worker's assignment", got["cold"]); a == nil || a.Task.ActionDigest != action("third") {
		t.Fatalf("the cold worker got %+v", a)
	}
}
