package scheduler

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

var (
	_ feasibilityStep = controlStep{}
	_ feasibilityStep = platformStep{}
	_ feasibilityStep = instanceStep{}
	_ feasibilityStep = capacityStep{}
	_ feasibilityStep = quotaStep{}
	_ feasibilityStep = preemptionStep{}
)

// controlStep refuses a worker an operator drained, paused or is
// terminating: it finishes what it runs and gets no new work.
type controlStep struct{}

func (controlStep) check(wt *waiter, _ *bucket, _ *Task) infeasible {
	if wt.worker.hold {
		return refusedControl
	}
	return feasible
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

// instanceStep refuses a worker that does not serve the bucket's
// instance.
type instanceStep struct{}

func (instanceStep) check(wt *waiter, b *bucket, _ *Task) infeasible {
	if !wt.worker.serves(b.instance) {
		return refusedInstance
	}
	return feasible
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
