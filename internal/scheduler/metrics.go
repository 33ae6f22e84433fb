package scheduler

import (
	"sort"
	"time"
)

// Metrics: the scheduler keeps a few counters and one histogram, updated
// inside critical sections it already holds (no extra lock, no
// allocation per dispatch), and builds the rest of its metrics from its
// state when they are scraped (MetricsSnapshot).

// DispatchBuckets are the upper bounds, in seconds, of the dispatch
// latency histogram.
var DispatchBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600}

// histogram is a fixed-bucket histogram guarded by the scheduler's lock.
type histogram struct {
	counts [20]uint64 // len(DispatchBuckets)+1: the last is +Inf
	count  uint64
	sum    float64
}

func (h *histogram) observe(d time.Duration) {
	v := d.Seconds()
	// Few buckets: a linear scan from the small end is as quick as a
	// binary search for the short waits that dominate.
	i := 0
	for i < len(DispatchBuckets) && v > DispatchBuckets[i] {
		i++
	}
	h.counts[i]++
	h.count++
	h.sum += v
}

// HistogramSnapshot is a histogram in Prometheus's form: Cumulative[i]
// counts the samples up to Buckets[i].
type HistogramSnapshot struct {
	Buckets    []float64
	Cumulative []uint64
	Count      uint64
	Sum        float64
}

func (h *histogram) snapshot() HistogramSnapshot {
	out := HistogramSnapshot{Buckets: DispatchBuckets, Cumulative: make([]uint64, len(DispatchBuckets)), Count: h.count, Sum: h.sum}
	var c uint64
	for i := range DispatchBuckets {
		c += h.counts[i]
		out.Cumulative[i] = c
	}
	return out
}

// schedCounters are the scheduler's event counters, guarded by its lock.
type schedCounters struct {
	// dispatch is queued -> leased of first attempts.
	dispatch histogram
	// retries counts actions put back on the queue after their worker
	// was lost; gaveUp actions failed by the scheduler itself (worker lost
	// too often, or no worker could ever run them); workersLost leases
	// whose worker stopped reporting; adopted leases a worker reported
	// that the restored state did not hold (reconcile.go).
	retries, gaveUp, workersLost, adopted int64
}

// QueueCount is the number of queued or executing actions of one queue,
// instance and cohort.
type QueueCount struct {
	Queue, Instance, Cohort string
	N                       int
}

// Worker states reported by MetricsSnapshot.
const (
	WorkerIdle = "idle" // registered, running nothing
	WorkerBusy = "busy" // running at least one action
	// WorkerRestored: known only from leases stored before a restart; it
	// must register again before it gets work.
	WorkerRestored = "restored"
	// Operators' controls (control.go): draining (finishing its work, no
	// new work), paused (its actions suspended), terminating (draining,
	// then exiting).
	WorkerDraining    = "draining"
	WorkerPaused      = "paused"
	WorkerTerminating = "terminating"
)

// MetricsSnapshot is the scheduler's state as metrics.
type MetricsSnapshot struct {
	// Queued counts queued actions by queue, instance and the cohort that
	// could run them: the first configured cohort with a registered worker
	// able to run the action, "" when none can (or no cohorts exist).
	Queued []QueueCount
	// Executing counts actions their worker started, by queue, instance
	// and the cohort of the worker holding them ("" for a worker in no
	// cohort); Held those leased but not started yet (fetching inputs,
	// waiting for a free core), by the same labels.
	Executing, Held []QueueCount
	// Workers counts registered workers by state (WorkerIdle, ...).
	Workers map[string]int
	// Cores and BusyCores are the registered workers' execute cores and
	// the cores their leases ask for.
	Cores, BusyCores int
	// Dispatch is the queued -> leased latency of first attempts.
	Dispatch HistogramSnapshot
	// Handoff is a poll's (or its lease's) arrival -> the lease handed
	// to the transport, per lease; HandoffLock the scheduler's lock held
	// to answer, per lease; HandoffStore the wait for the leases to be
	// stored (handoff.go).
	Handoff, HandoffLock, HandoffStore HistogramSnapshot
	// Retries, GaveUp, WorkersLost, Preemptions and Adopted count events
	// since start.
	Retries, GaveUp, WorkersLost, Preemptions, Adopted int64
	// Demand is the autoscaling signal per cohort for Config.TargetDrain
	// (autoscale.go).
	Demand []CohortDemand
}

// WorkerStateLocked names the state of a worker for metrics and status
// pages. Keep it cheap: it runs for every worker at every scrape.
func (s *Scheduler) workerStateLocked(w *worker) string {
	c := s.controls[w.info.ID]
	switch {
	case w.restored:
		return WorkerRestored
	case c.Terminate:
		return WorkerTerminating
	case c.Pause:
		return WorkerPaused
	case c.Drain:
		return WorkerDraining
	case len(w.leases) > 0:
		return WorkerBusy
	default:
		return WorkerIdle
	}
}

// MetricsSnapshot returns the scheduler's metrics. It costs
// O(buckets x cohort workers + leases + workers) under the lock, once per
// scrape.
func (s *Scheduler) MetricsSnapshot() MetricsSnapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := MetricsSnapshot{
		Workers:  map[string]int{WorkerIdle: 0, WorkerBusy: 0, WorkerRestored: 0, WorkerDraining: 0, WorkerPaused: 0, WorkerTerminating: 0},
		Dispatch: s.counters.dispatch.snapshot(), Retries: s.counters.retries, GaveUp: s.counters.gaveUp,
		WorkersLost: s.counters.workersLost, Preemptions: s.preemptions, Adopted: s.counters.adopted,
	}
	out.Handoff, out.HandoffLock, out.HandoffStore = s.handoffs.snapshot()
	queued := map[[3]string]int{}
	for _, b := range s.queue.buckets {
		cohort := ""
		for _, c := range s.ten.cohorts {
			if s.cohortCanRunLocked(c.Name, b) {
				cohort = c.Name
				break
			}
		}
		queued[[3]string{b.queue, b.instance, cohort}] += b.n
	}
	executing, held := map[[3]string]int{}, map[[3]string]int{}
	for _, l := range s.leases {
		k := [3]string{l.task.Queue, l.task.Instance, l.cohort}
		if l.executing() {
			executing[k]++
		} else {
			held[k]++
		}
		out.BusyCores += max(l.task.Req.Cores, 1)
	}
	for _, w := range s.workers {
		out.Workers[s.workerStateLocked(w)]++
		if !w.restored {
			out.Cores += max(w.info.Platform.Cores, 1)
		}
	}
	out.Queued, out.Executing, out.Held = counts(queued), counts(executing), counts(held)
	out.Demand = s.demandLocked(s.cfg.TargetDrain)
	return out
}

func counts(m map[[3]string]int) []QueueCount {
	out := make([]QueueCount, 0, len(m))
	for k, n := range m {
		out = append(out, QueueCount{Queue: k[0], Instance: k[1], Cohort: k[2], N: n})
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Queue != b.Queue {
			return a.Queue < b.Queue
		}
		if a.Instance != b.Instance {
			return a.Instance < b.Instance
		}
		return a.Cohort < b.Cohort
	})
	return out
}

// setTraceParentLocked remembers (or, with "", forgets) a task's trace
// context. With tracing off the map stays nil and this costs a compare.
func (s *Scheduler) setTraceParentLocked(t *Task, tp string) {
	switch {
	case tp != "":
		if s.traceParents == nil {
			s.traceParents = map[*Task]string{}
		}
		s.traceParents[t] = tp
	case s.traceParents != nil:
		delete(s.traceParents, t)
	}
}

// TraceParent returns the trace context the task was submitted with, ""
// if none. Callers ask only when tracing is on: it takes the lock.
func (s *Scheduler) TraceParent(t *Task) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.traceParents[t]
}
