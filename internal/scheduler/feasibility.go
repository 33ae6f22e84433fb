package scheduler

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/gantry-build/gantry/internal/platform"
)

// Whether a worker may take a queued task now is a chain of feasibility
// steps, each a type that answers one question and, when the answer is
// no, says which: controls (an operator holds the worker), platform (the
// worker could never run the bucket's actions), instance, capacity (not
// free now), quota (the instance's max on the worker's cohort) and
// pre-emption (the worker's cores are held by suspended actions, or the
// task was moved off it). Among the tasks every step admits, the
// fairness order and the worker's stickiness choose (choice.go).
//
// waiter.why runs the steps in that order, the cheapest and most often
// refusing first; it calls them as concrete types, so the dispatch path
// pays no interface call for the chain.
//
// Each step also words its refusal (its reasons method): WhyQueued and
// ExplainWorkers take their "why not this worker" from the same steps
// (whyqueued.go), so what the status page and `gantry operation show`
// say is what dispatch decides.

// infeasible names the step that refused a worker a task; feasible when
// none did.
type infeasible uint8

const (
	feasible infeasible = iota
	// refusedControl: drained, paused or terminating (control.go).
	refusedControl
	// refusedPlatform: the worker does not serve the queue, or its
	// platform cannot run the bucket's actions at all.
	refusedPlatform
	// refusedInstance: the worker does not serve the task's instance.
	refusedInstance
	// refusedCapacity: the cores or resources the task asks for are not
	// free on the worker now.
	refusedCapacity
	// refusedQuota: the instance holds its max quota on the worker's
	// cohort.
	refusedQuota
	// refusedPreemption: suspended actions hold the worker's cores, or
	// the task was taken back from this worker (suspend.go).
	refusedPreemption
)

var infeasibleNames = [...]string{
	feasible:          "feasible",
	refusedControl:    "control",
	refusedPlatform:   "platform",
	refusedInstance:   "instance",
	refusedCapacity:   "capacity",
	refusedQuota:      "quota",
	refusedPreemption: "preemption",
}

func (r infeasible) String() string {
	if int(r) < len(infeasibleNames) {
		return infeasibleNames[r]
	}
	return "unknown"
}

// feasibilityStep is one question of the chain about a polling worker
// (its waiter, with the capacity it reported free) and a task of bucket
// b.
type feasibilityStep interface {
	check(wt *waiter, b *bucket, t *Task) infeasible
}

// explainingStep is a step that can say why it refuses: the reasons
// for an operator, each with what to do. It is asked only after check
// refused.
type explainingStep interface {
	feasibilityStep
	reasons(wt *waiter, b *bucket, t *Task) []platform.Reason
}

// Reasons the scheduler (not the worker's platform) keeps a worker from
// an action; the platform's own are platform.Reason*.
const (
	ReasonHeld       platform.ReasonKind = "held by an operator"
	ReasonInstance   platform.ReasonKind = "instance not served"
	ReasonQuota      platform.ReasonKind = "max quota reached"
	ReasonPreemption platform.ReasonKind = "held for pre-emption"
)

var (
	_ explainingStep  = controlStep{}
	_ explainingStep  = platformStep{}
	_ explainingStep  = instanceStep{}
	_ explainingStep  = quotaStep{}
	_ explainingStep  = preemptionStep{}
	_ feasibilityStep = capacityStep{}
)

// controlStep refuses a worker an operator drained, paused or is
// terminating: it finishes what it runs and gets no new work. controls
// (the scheduler's, by worker id) only word the refusal; check reads the
// worker's hold.
type controlStep struct{ controls map[string]WorkerControl }

func (controlStep) check(wt *waiter, _ *bucket, _ *Task) infeasible {
	if wt.worker.hold {
		return refusedControl
	}
	return feasible
}

func (c controlStep) reasons(wt *waiter, _ *bucket, _ *Task) []platform.Reason {
	id := wt.worker.info.ID
	ctl := c.controls[id]
	have, fix := "drained", "`gantry workers undrain "+id+"` gives it work again"
	switch {
	case ctl.Pause:
		have, fix = "paused", "`gantry workers resume "+id+"` lets it take work again"
	case ctl.Terminate:
		have, fix = "terminating", "it exits once idle; `gantry workers undrain "+id+"` keeps it"
	}
	return []platform.Reason{{Kind: ReasonHeld, Property: "control", Have: have, Fix: fix}}
}

// platformStep refuses a worker that could never run the bucket's
// actions: the queue, labels, totals, pin and wrappers (remembered per
// bucket: they change only when the worker registers again).
type platformStep struct{}

func (platformStep) check(wt *waiter, b *bucket, _ *Task) infeasible {
	if !wt.worker.matches(b) {
		return refusedPlatform
	}
	return feasible
}

func (platformStep) reasons(wt *waiter, b *bucket, _ *Task) []platform.Reason {
	return platformReasons(wt.worker.info.Platform, b.queue, b.req)
}

// platformReasons says why a worker offering p could never run an action
// of queue with request r (none: it could). worker.matches is its cached
// yes or no.
func platformReasons(p platform.Worker, queue string, r platform.Request) []platform.Reason {
	reasons := sizeClassReasons(p.Accepts(r, nil))
	if !p.Serves(queue) {
		reasons = append(reasons, platform.Reason{Kind: platform.ReasonQueue, Property: "queue", Want: queue, Have: strings.Join(p.Queues, ","),
			Fix: "let the worker serve queue " + strconv.Quote(queue)})
	}
	return reasons
}

// instanceStep refuses a worker that does not serve the bucket's
// instance.
type instanceStep struct{}

func (instanceStep) check(wt *waiter, b *bucket, _ *Task) infeasible {
	if !wt.worker.serves(b.instance) {
		return refusedInstance
	}
	return feasible
}

func (instanceStep) reasons(wt *waiter, b *bucket, _ *Task) []platform.Reason {
	return []platform.Reason{{Kind: ReasonInstance, Property: "instance", Want: strconv.Quote(b.instance), Have: strings.Join(wt.worker.info.Instances, ","),
		Fix: "start the worker with --instance=" + b.instance + " (or --instance='*' for every instance)"}}
}

// capacityStep refuses a worker without the task's cores (as it reported
// them free) or resources (as its leases leave them) free now.
type capacityStep struct{}

func (capacityStep) check(wt *waiter, _ *bucket, t *Task) infeasible {
	if !wt.worker.fits(t.Req, wt.free.Cores) {
		return refusedCapacity
	}
	return feasible
}

// quotaStep refuses a worker of a cohort on which the bucket's instance
// holds its max quota. A worker in no cohort has no quotas.
type quotaStep struct{}

func (quotaStep) check(wt *waiter, b *bucket, _ *Task) infeasible {
	w := wt.worker
	if w.cohort != "" && w.ten.maxReached(b.instance, w.cohort) {
		return refusedQuota
	}
	return feasible
}

func (quotaStep) reasons(wt *waiter, b *bucket, _ *Task) []platform.Reason {
	w := wt.worker
	k := quotaKey{b.instance, w.cohort}
	return []platform.Reason{{Kind: ReasonQuota, Property: "cohort " + w.cohort,
		Want: fmt.Sprintf("instance %q runs %d", b.instance, w.ten.usage[k]), Have: fmt.Sprintf("max %d", w.ten.quotas[k].Max),
		Fix: "it starts when one of them finishes; `gantry quota put` raises the max"}}
}

// preemptionStep refuses a worker of a cohort whose cores suspended
// actions hold (unless the instance is below its min there), or that the
// task was moved off because it could not start there.
type preemptionStep struct{}

func (preemptionStep) check(wt *waiter, b *bucket, t *Task) infeasible {
	w := wt.worker
	if w.cohort != "" && !w.ten.admits(w, b.instance, t) {
		return refusedPreemption
	}
	return feasible
}

func (preemptionStep) reasons(wt *waiter, _ *bucket, t *Task) []platform.Reason {
	if wt.worker.ten.avoid[t] == wt.worker {
		return []platform.Reason{{Kind: ReasonPreemption, Property: "moved off",
			Fix: "it could not start on this worker and was moved off; another worker of the cohort takes it"}}
	}
	return []platform.Reason{{Kind: ReasonPreemption, Property: "suspended actions",
		Fix: "actions suspended for higher-quota work hold the worker's cores; it takes this once they resume and finish"}}
}

// why runs the chain: the first step that refuses wt the task t of
// bucket b, or feasible.
func (wt *waiter) why(b *bucket, t *Task) infeasible {
	if r := (controlStep{}).check(wt, b, t); r != feasible {
		return r
	}
	if r := (platformStep{}).check(wt, b, t); r != feasible {
		return r
	}
	if r := (instanceStep{}).check(wt, b, t); r != feasible {
		return r
	}
	if r := (capacityStep{}).check(wt, b, t); r != feasible {
		return r
	}
	if r := (quotaStep{}).check(wt, b, t); r != feasible {
		return r
	}
	return (preemptionStep{}).check(wt, b, t)
}

// accepts reports whether every step admits the task t of bucket b.
func (wt *waiter) accepts(b *bucket, t *Task) bool { return wt.why(b, t) == feasible }
