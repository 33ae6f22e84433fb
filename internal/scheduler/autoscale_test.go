package scheduler

import (
	"fmt"
	"testing"
	"time"

	"github.com/gantry-build/gantry/internal/platform"
)

// TestDemandCountsExpectedWorkLeft: ten queued "sleep 30" (30s each by
// the history) and one running for 10s of its 30s leave 9x30 + 20 =
// 290s; with 4 slots per worker and a 60s target that is
// ceil(290 / 240) = 2 workers. Actions with no history count a minute.
func TestDemandCountsExpectedWorkLeft(t *testing.T) {
	s, clk := longestFirstTest(t, LongestFirstOff)
	register(s, "w") // 4 slots
	for i := range 10 {
		submitSleep(t, s, fmt.Sprintf("a%d", i), "build", "bazel", 30)
	}
	pollNow(t, s, "w", 1)
	clk.Advance(10 * time.Second)
	d := s.Demand(time.Minute)
	if len(d) != 1 || d[0].Queued != 9 || d[0].Running != 1 || d[0].Work != 290 || d[0].Workers != 2 {
		t.Fatalf("demand %+v, want 9 queued, 1 running, 290s, 2 workers", d)
	}
	submitSleep(t, s, "new", "build", "bazel", -1)
	if d := s.Demand(time.Minute); d[0].Work != 290+UnknownDuration.Seconds() {
		t.Errorf("an action with no history adds %vs, want %v", d[0].Work-290, UnknownDuration.Seconds())
	}
	if m := s.MetricsSnapshot(); len(m.Demand) != 1 || m.Demand[0].Workers != 1 {
		t.Errorf("the metrics' demand at the default target (10m) is %+v, want 1 worker", m.Demand)
	}
}

// TestDemandSizesByExecuteCores: a Gantry worker registers three slots
// per core (input fetch, execute, upload), but executes one one-core
// action per core at once. Four queued "sleep 30" on 2-core workers
// (6 slots) for a 30s target need ceil(120 / (30 x 2)) = 2 workers; an
// action never seen that asks for min-cores=2 adds 2 x 60 core-seconds,
// which two more workers drain.
func TestDemandSizesByExecuteCores(t *testing.T) {
	s, _ := longestFirstTest(t, LongestFirstOff)
	s.RegisterWorker(WorkerInfo{ID: "w", Platform: platform.Worker{AllowUnmatched: true, Cores: 2}, Slots: 6})
	for i := range 4 {
		submitSleep(t, s, fmt.Sprintf("a%d", i), "build", "bazel", 30)
	}
	if d := s.Demand(30 * time.Second); len(d) != 1 || d[0].Work != 120 || d[0].Workers != 2 {
		t.Fatalf("demand %+v, want 120s of work and 2 workers (by cores, not slots)", d)
	}
	submit(t, s, "wide", func(r *SubmitRequest) {
		r.CommandBytes = commandBytes("unseen", "wide")
		r.Platform = append(r.Platform, platform.Property{Name: platform.MinCores, Value: "2"})
	})
	if d := s.Demand(30 * time.Second); d[0].Work != 180 || d[0].Workers != 4 {
		t.Errorf("demand %+v, want 180s of work and 4 workers (the 2-core action counts twice)", d)
	}
}

// TestDemandReportsIdleCohorts: every configured cohort, and "", has a
// row when nothing is queued or running, 0 workers, so that an
// autoscaler reading the metric scales down to its minimum.
func TestDemandReportsIdleCohorts(t *testing.T) {
	s := New(Config{Cohorts: []Cohort{{Name: "big", Labels: []string{"big"}}, {Name: "small", Labels: []string{"small"}}}}, &fakeClock{now: time.Unix(1_700_000_000, 0)}, nil)
	got := fmt.Sprint(s.Demand(time.Minute))
	if want := "[{ 0 0 0 0} {big 0 0 0 0} {small 0 0 0 0}]"; got != want {
		t.Errorf("idle demand %s, want %s", got, want)
	}
}

// TestDemandCountsActionsLongerThanHalfTheTarget: five queued "sleep 20"
// are 100s of work, 4 workers for a 30s target by the work alone; but two
// of them one after the other take 40s, so each needs a core of its own:
// 5 workers. Six "sleep 10" pack (up to three to a core): 60s, 2 workers.
func TestDemandCountsActionsLongerThanHalfTheTarget(t *testing.T) {
	for _, c := range []struct {
		sleep, n, workers int
	}{{20, 5, 5}, {10, 6, 2}} {
		s, _ := longestFirstTest(t, LongestFirstOff)
		s.RegisterWorker(WorkerInfo{ID: "w", Platform: platform.Worker{AllowUnmatched: true, Cores: 1}, Slots: 3})
		for i := range c.n {
			submitSleep(t, s, fmt.Sprintf("a%d", i), "build", "bazel", c.sleep)
		}
		if d := s.Demand(30 * time.Second); len(d) != 1 || d[0].Work != float64(c.sleep*c.n) || d[0].Workers != c.workers {
			t.Errorf("%d x sleep %d: demand %+v, want %ds of work and %d workers", c.n, c.sleep, d, c.sleep*c.n, c.workers)
		}
	}
}
