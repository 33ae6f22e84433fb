package scheduler

import (
	"testing"
	"time"

	"github.com/gantry-build/gantry/internal/platform"
)

// choiceWaiter is the poll of worker id, free for one action.
func choiceWaiter(t *testing.T, s *Scheduler, id string) *waiter {
	t.Helper()
	w := s.workers[id]
	if w == nil {
		t.Fatalf("worker %s is not registered", id)
	}
	return &waiter{worker: w, free: Capacity{Cores: 1}}
}

func taskOf(t *testing.T, s *Scheduler, op string) *Task {
	t.Helper()
	o := s.ops[op]
	if o == nil {
		t.Fatalf("operation %s is not known", op)
	}
	return o.task
}

func inInvocation(inv string) func(*SubmitRequest) {
	return func(r *SubmitRequest) { r.Invocation = []string{inv} }
}

func TestFairnessStep(t *testing.T) {
	linuxOnly := platform.Worker{Cores: 1, Properties: p("OSFamily=linux")}
	for _, tc := range []struct {
		name string
		cfg  func(*Config)
		// setup submits the work and returns the operation wanted ("":
		// none).
		setup  func(t *testing.T, s *Scheduler) string
		urgent bool
	}{
		{name: "nothing queued", setup: func(t *testing.T, s *Scheduler) string {
			registerPlatform(s, "w", linuxOnly)
			return ""
		}},
		{name: "priority first", setup: func(t *testing.T, s *Scheduler) string {
			registerPlatform(s, "w", linuxOnly)
			submit(t, s, "low", func(r *SubmitRequest) { r.Priority = 5 })
			return submit(t, s, "high", func(r *SubmitRequest) { r.Priority = 1 })
		}},
		{name: "a bucket the worker cannot take is passed over", setup: func(t *testing.T, s *Scheduler) string {
			registerPlatform(s, "w", linuxOnly)
			submit(t, s, "gpu", withPlatform("gpu=1"))
			return submit(t, s, "cpu")
		}},
		{name: "the invocation running less goes first", setup: func(t *testing.T, s *Scheduler) string {
			registerPlatform(s, "other", platform.Worker{Cores: 1, AllowUnmatched: true})
			registerPlatform(s, "w", linuxOnly)
			submit(t, s, "a-1", inInvocation("a"))
			submit(t, s, "a-2", inInvocation("a"))
			b := submit(t, s, "b-1", inInvocation("b"))
			if a := pollNow(t, s, "other", 1); a == nil || a.Task.ActionDigest != action("a-1") {
				t.Fatalf("the first poll got %+v, want a-1", a)
			}
			return b
		}},
		{name: "across buckets the fairness order decides", setup: func(t *testing.T, s *Scheduler) string {
			registerPlatform(s, "other", platform.Worker{Cores: 1, AllowUnmatched: true})
			registerPlatform(s, "w", platform.Worker{Cores: 1, AllowUnmatched: true, Properties: p("OSFamily=linux")})
			submit(t, s, "a-1", inInvocation("a"))
			submit(t, s, "a-2", inInvocation("a"))
			b := submit(t, s, "b-1", inInvocation("b"), withPlatform("OSFamily=linux", "pool=big"))
			if a := pollNow(t, s, "other", 1); a == nil || a.Task.ActionDigest != action("a-1") {
				t.Fatalf("the first poll got %+v, want a-1", a)
			}
			return b
		}},
		{name: "an instance below its min quota is urgent", cfg: tenancyConfig, urgent: true, setup: func(t *testing.T, s *Scheduler) string {
			x86Worker(s, "w")
			if _, err := s.SetQuota(Quota{Instance: "starved", Cohort: "x86", Min: 1, Max: -1}); err != nil {
				t.Fatal(err)
			}
			submitIn(t, s, "main", "first")
			return submitIn(t, s, "starved", "later")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := newQueueTest(t, tc.cfg)
			wantOp := tc.setup(t, s)
			s.mu.Lock()
			defer s.mu.Unlock()
			var want *Task
			if wantOp != "" {
				want = taskOf(t, s, wantOp)
			}
			// The buckets are a map: ask often enough that every order
			// of them comes up.
			for range 16 {
				if got, urgent := (fairnessStep{s.queue}).choose(choiceWaiter(t, s, "w")); got != want || urgent != tc.urgent {
					t.Fatalf("choose = %v (urgent %v), want %v (urgent %v)", got, urgent, want, tc.urgent)
				}
			}
		})
	}
}

func TestStickinessStep(t *testing.T) {
	const cost = 5 * time.Second
	// setup queues one action in each of invocations a and b and returns
	// the fair choice and the other one.
	setup := func(t *testing.T, stickiness []time.Duration) (s *Scheduler, now time.Time, wt *waiter, fair, other *Task) {
		s, clk := newQueueTest(t, func(c *Config) { c.Stickiness = stickiness })
		registerPlatform(s, "w", platform.Worker{Cores: 1, AllowUnmatched: true})
		a, b := taskOf(t, s, submit(t, s, "a-1", inInvocation("a"))), taskOf(t, s, submit(t, s, "b-1", inInvocation("b")))
		wt = choiceWaiter(t, s, "w")
		fair, urgent := fairnessStep{s.queue}.choose(wt)
		if urgent || fair == nil {
			t.Fatalf("fair choice %v, urgent %v", fair, urgent)
		}
		other = a
		if fair == a {
			other = b
		}
		return s, clk.Now(), wt, fair, other
	}
	for _, tc := range []struct {
		name       string
		stickiness []time.Duration
		// from is the worker's last invocation; after how long since the
		// actions were queued it chooses; urgent marks the fair choice.
		from       func(fair, other *Task) *inode
		after      time.Duration
		urgent     bool
		wantSticky bool
	}{
		{name: "stays while the switch costs more than the wait", stickiness: []time.Duration{cost},
			from: func(_, other *Task) *inode { return other.inv }, wantSticky: true},
		{name: "switches once the fair choice waited the cost", stickiness: []time.Duration{cost},
			from: func(_, other *Task) *inode { return other.inv }, after: cost + time.Second},
		{name: "no stickiness configured", from: func(_, other *Task) *inode { return other.inv }},
		{name: "an urgent fair choice wins", stickiness: []time.Duration{cost}, urgent: true,
			from: func(_, other *Task) *inode { return other.inv }},
		{name: "a worker without earlier work", stickiness: []time.Duration{cost},
			from: func(_, _ *Task) *inode { return nil }},
		{name: "the fair choice is in the worker's own subtree", stickiness: []time.Duration{cost},
			from: func(fair, _ *Task) *inode { return fair.inv }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, now, wt, fair, other := setup(t, tc.stickiness)
			s.mu.Lock()
			defer s.mu.Unlock()
			want := fair
			if tc.wantSticky {
				want = other
			}
			if got := (stickinessStep{s.queue}).choose(tc.from(fair, other), now.Add(tc.after), wt, fair, tc.urgent); got != want {
				t.Fatalf("choose = %v, want %v (fair %v, other %v)", got, want, fair, other)
			}
		})
	}
}
