package scheduler

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gantry-build/gantry/internal/platform"
)

// stepCase is one question to a feasibility step: a polling worker (built
// by worker, from a 4-core worker of cohort "x86" that serves every
// instance and queue), a bucket of queue "default" and instance "main"
// asking for req, and the answer wanted.
type stepCase struct {
	name   string
	req    []string
	worker func(wt *waiter)
	want   infeasible
}

func stepWaiter(t *testing.T) *waiter {
	t.Helper()
	w := &worker{
		info:   WorkerInfo{ID: "w1", Platform: platform.Worker{Name: "w1", Cores: 4, AllowUnmatched: true, Properties: p("OSFamily=linux")}},
		leases: map[string]*lease{}, held: map[string]int64{}, cancelled: map[string]map[string]int64{}, matchCache: map[string]bool{},
		cohort: "x86", ten: newTenancy(Config{}),
	}
	return &waiter{worker: w, free: Capacity{Cores: 4}}
}

func runSteps(t *testing.T, step feasibilityStep, cases []stepCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			wt := stepWaiter(t)
			r := mustRequest(t, tc.req...)
			b := &bucket{key: "default/main", queue: "default", instance: "main", req: r}
			task := &Task{Queue: "default", Instance: "main", Req: r}
			if tc.worker != nil {
				tc.worker(wt)
			}
			got := step.check(wt, b, task)
			if got != tc.want {
				t.Fatalf("%T.check = %v, want %v", step, got, tc.want)
			}
			if es, ok := step.(explainingStep); ok && got != feasible {
				checkReasons(t, es.reasons(wt, b, task), stepKinds[got])
			}
		})
	}
}

// stepKinds are the reason kinds each refusal is worded with (the
// platform step's come from platform.Worker.Accepts, or the queue's).
var stepKinds = map[infeasible][]platform.ReasonKind{
	refusedControl:    {ReasonHeld},
	refusedPlatform:   {platform.ReasonMismatch, platform.ReasonUnmatched, platform.ReasonResource, platform.ReasonPinned, platform.ReasonQueue},
	refusedInstance:   {ReasonInstance},
	refusedQuota:      {ReasonQuota},
	refusedPreemption: {ReasonPreemption},
}

// checkReasons wants at least one reason, each of a kind in kinds and
// with a fix: what WhyQueued shows for a refusing step.
func checkReasons(t *testing.T, rs []platform.Reason, kinds []platform.ReasonKind) {
	t.Helper()
	if len(rs) == 0 {
		t.Fatal("a refusing step gives no reason")
	}
	for _, r := range rs {
		if !slices.Contains(kinds, r.Kind) || r.Fix == "" {
			t.Errorf("reason %q: want one of the kinds %q, with a fix", r, kinds)
		}
	}
}

// The control step says which control holds the worker and the command
// that lifts it.
func TestControlStepReasons(t *testing.T) {
	for _, tc := range []struct {
		ctl       WorkerControl
		have, fix string
	}{
		{WorkerControl{Drain: true}, "drained", "gantry workers undrain w1"},
		{WorkerControl{Pause: true}, "paused", "gantry workers resume w1"},
		{WorkerControl{Drain: true, Terminate: true}, "terminating", "exits once idle"},
	} {
		wt := stepWaiter(t)
		wt.worker.hold = true
		rs := controlStep{map[string]WorkerControl{"w1": tc.ctl}}.reasons(wt, nil, nil)
		if len(rs) != 1 || rs[0].Have != tc.have || !strings.Contains(rs[0].Fix, tc.fix) {
			t.Errorf("%+v: reasons %q, want %s and %q", tc.ctl, rs, tc.have, tc.fix)
		}
	}
}

func TestControlStep(t *testing.T) {
	runSteps(t, controlStep{}, []stepCase{
		{name: "active", want: feasible},
		{name: "held", worker: func(wt *waiter) { wt.worker.hold = true }, want: refusedControl},
	})
}

func TestPlatformStep(t *testing.T) {
	runSteps(t, platformStep{}, []stepCase{
		{name: "unmatched allowed", req: []string{"OSFamily=linux", "gpu=1"}, want: feasible},
		{name: "label differs", req: []string{"OSFamily=windows"}, want: refusedPlatform},
		{name: "unmatched refused", req: []string{"gpu=1"}, worker: func(wt *waiter) { wt.worker.info.Platform.AllowUnmatched = false }, want: refusedPlatform},
		{name: "more cores than it has", req: []string{"min-cores=8"}, want: refusedPlatform},
		{name: "pinned elsewhere", req: []string{"Worker=w2"}, want: refusedPlatform},
		{name: "other queue", worker: func(wt *waiter) { wt.worker.info.Platform.Queues = []string{"gpu"} }, want: refusedPlatform},
		{name: "its queue", worker: func(wt *waiter) { wt.worker.info.Platform.Queues = []string{"gpu", "default"} }, want: feasible},
	})
}

func TestInstanceStep(t *testing.T) {
	runSteps(t, instanceStep{}, []stepCase{
		{name: "every instance", want: feasible},
		{name: "star", worker: func(wt *waiter) { wt.worker.info.Instances = []string{"*"} }, want: feasible},
		{name: "listed", worker: func(wt *waiter) { wt.worker.info.Instances = []string{"other", "main"} }, want: feasible},
		{name: "not listed", worker: func(wt *waiter) { wt.worker.info.Instances = []string{"other"} }, want: refusedInstance},
	})
}

func TestCapacityStep(t *testing.T) {
	runSteps(t, capacityStep{}, []stepCase{
		{name: "fits", req: []string{"min-cores=4"}, want: feasible},
		{name: "cores not free", req: []string{"min-cores=2"}, worker: func(wt *waiter) { wt.free.Cores = 1 }, want: refusedCapacity},
		{name: "one core always fits a poll", worker: func(wt *waiter) { wt.free.Cores = 0 }, want: feasible},
		{name: "resource free", req: []string{"resource:gpu=1"}, worker: func(wt *waiter) {
			wt.worker.info.Platform.Resources = map[string]int64{"gpu": 2}
			wt.worker.held["gpu"] = 1
		}, want: feasible},
		{name: "resource held", req: []string{"resource:gpu=1"}, worker: func(wt *waiter) {
			wt.worker.info.Platform.Resources = map[string]int64{"gpu": 1}
			wt.worker.held["gpu"] = 1
		}, want: refusedCapacity},
	})
}

func TestQuotaStep(t *testing.T) {
	quota := func(max, usage int) func(*waiter) {
		return func(wt *waiter) {
			k := quotaKey{"main", "x86"}
			wt.worker.ten.quotas[k] = Quota{Instance: "main", Cohort: "x86", Max: max}
			wt.worker.ten.usage[k] = usage
		}
	}
	runSteps(t, quotaStep{}, []stepCase{
		{name: "no quota", want: feasible},
		{name: "below max", worker: quota(2, 1), want: feasible},
		{name: "at max", worker: quota(2, 2), want: refusedQuota},
		{name: "unlimited", worker: quota(-1, 100), want: feasible},
		{name: "no cohort", worker: func(wt *waiter) { quota(1, 1)(wt); wt.worker.cohort = "" }, want: feasible},
	})
}

func TestPreemptionStep(t *testing.T) {
	// suspended gives the worker a running lease of cores cores that was
	// suspended for pre-emption.
	suspended := func(cores int) func(*waiter) {
		return func(wt *waiter) {
			l := &lease{id: "l1", worker: wt.worker, cohort: "x86", task: &Task{Instance: "other", Req: platform.Request{Cores: cores}}}
			wt.worker.leases[l.id] = l
			wt.worker.ten.suspended[l] = time.Unix(0, 0)
		}
	}
	runSteps(t, preemptionStep{}, []stepCase{
		{name: "nothing suspended", want: feasible},
		{name: "suspended leave room", worker: suspended(2), req: []string{"min-cores=2"}, want: feasible},
		{name: "suspended hold the cores", worker: suspended(3), req: []string{"min-cores=2"}, want: refusedPreemption},
		{name: "below min goes first", worker: func(wt *waiter) {
			suspended(4)(wt)
			wt.worker.ten.quotas[quotaKey{"main", "x86"}] = Quota{Instance: "main", Cohort: "x86", Min: 1, Max: -1}
		}, want: feasible},
		{name: "no cohort", worker: func(wt *waiter) { suspended(4)(wt); wt.worker.cohort = "" }, want: feasible},
	})
	t.Run("moved off this worker", func(t *testing.T) {
		wt := stepWaiter(t)
		b := &bucket{key: "default/main", queue: "default", instance: "main"}
		task := &Task{Queue: "default", Instance: "main"}
		wt.worker.ten.avoid[task] = wt.worker
		if got := (preemptionStep{}).check(wt, b, task); got != refusedPreemption {
			t.Fatalf("check = %v, want %v", got, refusedPreemption)
		}
		if rs := (preemptionStep{}).reasons(wt, b, task); len(rs) != 1 || rs[0].Property != "moved off" {
			t.Fatalf("reasons = %q, want the move off", rs)
		}
		wt.worker.ten.avoid[task] = &worker{}
		if got := (preemptionStep{}).check(wt, b, task); got != feasible {
			t.Fatalf("moved off another worker: check = %v, want feasible", got)
		}
	})
}

// TestWhyFirstRefusalWins runs the whole chain: the answer is the first
// step that refuses, in the order controls, platform, instance,
// capacity, quota, pre-emption.
func TestWhyFirstRefusalWins(t *testing.T) {
	hold := func(wt *waiter) { wt.worker.hold = true }
	otherQueue := func(wt *waiter) { wt.worker.info.Platform.Queues = []string{"gpu"} }
	otherInstance := func(wt *waiter) { wt.worker.info.Instances = []string{"other"} }
	busy := func(wt *waiter) { wt.free.Cores = 1 }
	atMax := func(wt *waiter) {
		wt.worker.ten.quotas[quotaKey{"main", "x86"}] = Quota{Instance: "main", Cohort: "x86", Max: 0}
	}
	avoided := func(wt *waiter, task *Task) { wt.worker.ten.avoid[task] = wt.worker }
	all := []func(*waiter){hold, otherQueue, otherInstance, busy, atMax}
	for i, want := range []infeasible{refusedControl, refusedPlatform, refusedInstance, refusedCapacity, refusedQuota, refusedPreemption, feasible} {
		t.Run(want.String(), func(t *testing.T) {
			wt := stepWaiter(t)
			r := mustRequest(t, "min-cores=2")
			b := &bucket{key: "default/main", queue: "default", instance: "main", req: r}
			task := &Task{Queue: "default", Instance: "main", Req: r}
			// Every refusal from the i-th on applies.
			for _, f := range all[min(i, len(all)):] {
				f(wt)
			}
			if i <= 5 {
				avoided(wt, task)
			}
			if got := wt.why(b, task); got != want {
				t.Fatalf("why = %v, want %v", got, want)
			}
			if got := wt.accepts(b, task); got != (want == feasible) {
				t.Fatalf("accepts = %v with why %v", got, want)
			}
		})
	}
}
