package metrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gantry-build/gantry/internal/scheduler"
)

// Scheduler exports the scheduler's state, read once per scrape from
// scheduler.MetricsSnapshot: nothing is added to the dispatch path.
type Scheduler struct {
	snap      func() scheduler.MetricsSnapshot
	instances *Instances

	queued, executing, held, workers, cores, busyCores *prometheus.Desc
	dispatch, retries, gaveUp, lost, adopted           *prometheus.Desc
	handoff, handoffLock, handoffStore                 *prometheus.Desc
	workersNeeded, expectedWork                        *prometheus.Desc

	mu sync.Mutex
	// seenQueued, seenExecuting and seenHeld are the label sets reported
	// before: they are reported as 0 once empty, so that an autoscaler
	// sees the queue drain rather than the series vanish. Bounded by
	// queues x capped instances x cohorts.
	seenQueued, seenExecuting, seenHeld map[[3]string]bool
}

// NewScheduler registers the scheduler's metrics with reg.
func NewScheduler(reg prometheus.Registerer, snap func() scheduler.MetricsSnapshot, instances *Instances) *Scheduler {
	qic := []string{"queue", "instance", "cohort"}
	c := &Scheduler{
		snap: snap, instances: instances,
		queued: prometheus.NewDesc("gantry_queue_length",
			"Actions waiting for a worker, by provision queue, instance and the cohort that could run them (\"\": none registered). The autoscaling signal.", qic, nil),
		executing: prometheus.NewDesc("gantry_executing_actions",
			"Actions their worker started executing (holding their cores, or uploading their outputs), by provision queue, instance and the cohort of the worker.", qic, nil),
		held: prometheus.NewDesc("gantry_held_actions",
			"Actions leased to a worker that has not started them yet (fetching inputs or waiting for a free core), by provision queue, instance and the cohort of the worker.", qic, nil),
		workers:   prometheus.NewDesc("gantry_workers", "Registered workers by state (idle, busy, restored).", []string{"state"}, nil),
		cores:     prometheus.NewDesc("gantry_worker_cores", "Execute cores of the registered workers.", nil, nil),
		busyCores: prometheus.NewDesc("gantry_worker_busy_cores", "Cores the leased actions ask for.", nil, nil),
		dispatch: prometheus.NewDesc("gantry_scheduler_dispatch_latency_seconds",
			"Time from an action being queued to its lease to a worker (first attempts only).", nil, nil),
		handoff: prometheus.NewDesc("gantry_scheduler_handoff_seconds",
			"The scheduler's own share of a dispatch, per lease: from a worker's poll reaching the scheduler with work queued (or, for a poll that waited, from its lease being made) to the lease being handed to the transport, stored.", nil, nil),
		handoffLock: prometheus.NewDesc("gantry_scheduler_handoff_lock_seconds",
			"The time the scheduler's lock was held to answer a worker's poll, per lease it handed out.", nil, nil),
		handoffStore: prometheus.NewDesc("gantry_scheduler_handoff_store_seconds",
			"The part of gantry_scheduler_handoff_seconds spent waiting for the lease to be stored, per lease.", nil, nil),
		retries: prometheus.NewDesc("gantry_scheduler_retries_total",
			"Actions queued again because their worker stopped responding.", nil, nil),
		gaveUp: prometheus.NewDesc("gantry_scheduler_gave_up_total",
			"Actions the scheduler failed itself: their workers were lost too often, or no worker could ever run them.", nil, nil),
		lost: prometheus.NewDesc("gantry_scheduler_lost_leases_total",
			"Leases whose worker stopped reporting.", nil, nil),
		adopted: prometheus.NewDesc("gantry_scheduler_adopted_leases_total",
			"Leases a worker reported after a scheduler restart that the restored state did not hold (handed out before they were stored), taken over instead of run again.", nil, nil),
		workersNeeded: prometheus.NewDesc("gantry_workers_needed",
			"Workers a cohort needs to finish its queued and running actions within scheduler.autoscaling.target_drain, from their expected durations (the duration history). The autoscaling signal that accounts for how long the work takes.", []string{"cohort"}, nil),
		expectedWork: prometheus.NewDesc("gantry_expected_work_seconds",
			"Expected seconds of work left in a cohort's queued and running actions (an action with no history counts a minute).", []string{"cohort"}, nil),
		seenQueued: map[[3]string]bool{}, seenExecuting: map[[3]string]bool{}, seenHeld: map[[3]string]bool{},
	}
	reg.MustRegister(c)
	return c
}

// Describe implements prometheus.Collector.
func (c *Scheduler) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.queued, c.executing, c.held, c.workers, c.cores, c.busyCores, c.dispatch, c.handoff, c.handoffLock, c.handoffStore, c.retries, c.gaveUp, c.lost, c.adopted, c.workersNeeded, c.expectedWork} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *Scheduler) Collect(ch chan<- prometheus.Metric) {
	m := c.snap()
	c.mu.Lock()
	c.gauges(ch, c.queued, m.Queued, c.seenQueued)
	c.gauges(ch, c.executing, m.Executing, c.seenExecuting)
	c.gauges(ch, c.held, m.Held, c.seenHeld)
	c.mu.Unlock()
	for state, n := range m.Workers {
		ch <- prometheus.MustNewConstMetric(c.workers, prometheus.GaugeValue, float64(n), state)
	}
	ch <- prometheus.MustNewConstMetric(c.cores, prometheus.GaugeValue, float64(m.Cores))
	ch <- prometheus.MustNewConstMetric(c.busyCores, prometheus.GaugeValue, float64(m.BusyCores))
	histogram(ch, c.dispatch, m.Dispatch)
	histogram(ch, c.handoff, m.Handoff)
	histogram(ch, c.handoffLock, m.HandoffLock)
	histogram(ch, c.handoffStore, m.HandoffStore)
	ch <- prometheus.MustNewConstMetric(c.retries, prometheus.CounterValue, float64(m.Retries))
	ch <- prometheus.MustNewConstMetric(c.gaveUp, prometheus.CounterValue, float64(m.GaveUp))
	ch <- prometheus.MustNewConstMetric(c.lost, prometheus.CounterValue, float64(m.WorkersLost))
	ch <- prometheus.MustNewConstMetric(c.adopted, prometheus.CounterValue, float64(m.Adopted))
	for _, d := range m.Demand {
		ch <- prometheus.MustNewConstMetric(c.workersNeeded, prometheus.GaugeValue, float64(d.Workers), d.Cohort)
		ch <- prometheus.MustNewConstMetric(c.expectedWork, prometheus.GaugeValue, d.Work, d.Cohort)
	}
}

// histogram reports h as d.
func histogram(ch chan<- prometheus.Metric, d *prometheus.Desc, h scheduler.HistogramSnapshot) {
	buckets := make(map[float64]uint64, len(h.Buckets))
	for i, b := range h.Buckets {
		buckets[b] = h.Cumulative[i]
	}
	ch <- prometheus.MustNewConstHistogram(d, h.Count, h.Sum, buckets)
}

// gauges reports counts folded onto capped instance labels, and 0 for
// label sets seen before that are empty now.
func (c *Scheduler) gauges(ch chan<- prometheus.Metric, d *prometheus.Desc, counts []scheduler.QueueCount, seen map[[3]string]bool) {
	now := make(map[[3]string]int, len(counts))
	for _, q := range counts {
		now[[3]string{q.Queue, c.instances.Label(q.Instance), q.Cohort}] += q.N
	}
	for k := range now {
		seen[k] = true
	}
	for k := range seen {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(now[k]), k[0], k[1], k[2])
	}
}
