package scheduler

import (
	"math"
	"sort"
	"time"
)

// UnknownDuration is what the autoscaling signal counts for an action
// whose shape has no history.
const UnknownDuration = time.Minute

// CohortDemand is the autoscaling signal of one cohort: the work queued
// for it and running on it, from the expected durations, and the
// workers that would finish it within the target drain time.
type CohortDemand struct {
	// Cohort is "" for work no cohort's worker can run (or no cohorts).
	Cohort string
	// Queued and Running count actions; Work is the expected seconds of
	// work left (running actions: their expected time less the time
	// they have run, never below 0).
	Queued, Running int
	Work            float64
	// Workers is ceil(core-weighted Work / (target x cores per worker)),
	// with the mean execute cores of the cohort's registered workers (1
	// when none is): an action asking for n cores counts n times. Cores,
	// not lease slots: a Gantry worker's slots include its input fetch
	// and upload stages, three times the actions it executes at once.
	// It is at least the cores the actions with more than half the
	// target left ask for, over cores per worker: two of those cannot
	// run one after the other on a core within the target.
	Workers int
}

// Demand is the autoscaling signal per cohort for draining the queued
// and running work within target. It costs O(queued + leases + workers)
// under the lock: call it once per scrape.
func (s *Scheduler) Demand(target time.Duration) []CohortDemand {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.demandLocked(target)
}

func (s *Scheduler) demandLocked(target time.Duration) []CohortDemand {
	if target <= 0 {
		target = DefaultTargetDrain
	}
	now := s.clock.Now()
	by := map[string]*CohortDemand{}
	// coreWork is each cohort's Work with every action's seconds counted
	// once per core it asks for.
	coreWork := map[string]float64{}
	// longCores are each cohort's cores asked for by actions with more
	// than half the target left.
	longCores := map[string]int{}
	half := target.Seconds() / 2
	get := func(c string) *CohortDemand {
		d := by[c]
		if d == nil {
			d = &CohortDemand{Cohort: c}
			by[c] = d
		}
		return d
	}
	// Every cohort, and "", has a row, 0 when idle: an autoscaler that
	// reads no value (a HorizontalPodAutoscaler's External metric) would
	// keep the workers it has instead of scaling down.
	get("")
	for _, c := range s.ten.cohorts {
		get(c.Name)
	}
	for _, b := range s.queue.buckets {
		cohort := ""
		for _, c := range s.ten.cohorts {
			if s.cohortCanRunLocked(c.Name, b) {
				cohort = c.Name
				break
			}
		}
		d := get(cohort)
		b.each(func(t *Task) {
			d.Queued++
			e := s.expectedLocked(t).Seconds()
			d.Work += e
			coreWork[cohort] += e * float64(max(t.Req.Cores, 1))
			if e > half {
				longCores[cohort] += max(t.Req.Cores, 1)
			}
		})
	}
	for _, l := range s.leases {
		d := get(l.cohort)
		d.Running++
		e := max(s.expectedLocked(l.task)-now.Sub(l.started), 0).Seconds()
		d.Work += e
		coreWork[l.cohort] += e * float64(max(l.task.Req.Cores, 1))
		if e > half {
			longCores[l.cohort] += max(l.task.Req.Cores, 1)
		}
	}
	cores, workers := map[string]int{}, map[string]int{}
	for _, w := range s.workers {
		if !w.restored {
			cores[w.cohort] += workerCores(w.info)
			workers[w.cohort]++
		}
	}
	out := make([]CohortDemand, 0, len(by))
	for c, d := range by {
		per := 1.0
		if workers[c] > 0 {
			per = float64(cores[c]) / float64(workers[c])
		}
		d.Workers = int(math.Ceil(max(coreWork[c]/target.Seconds(), float64(longCores[c])) / per))
		out = append(out, *d)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Cohort < out[j].Cohort })
	return out
}

// Autoscaling is the autoscaling signal at the configured target drain
// time (Config.TargetDrain): the numbers gantry_workers_needed exports.
type Autoscaling struct {
	Target time.Duration
	Demand []CohortDemand
}

// Autoscaling is the signal the metrics export, for callers that read it
// directly (the status pages' /status/autoscaling).
func (s *Scheduler) Autoscaling() Autoscaling {
	s.mu.Lock()
	defer s.mu.Unlock()
	return Autoscaling{Target: s.cfg.TargetDrain, Demand: s.demandLocked(s.cfg.TargetDrain)}
}

// workerCores is how many one-core actions a worker executes at once: its
// cores, else (a worker that states none) its slots, at least 1.
func workerCores(w WorkerInfo) int {
	if w.Platform.Cores > 0 {
		return w.Platform.Cores
	}
	return max(w.Slots, 1)
}

// DefaultTargetDrain is the default scheduler.autoscaling.target_drain.
const DefaultTargetDrain = 10 * time.Minute

// expectedLocked is t's expected wall time from its shape's history,
// UnknownDuration when there is none.
func (s *Scheduler) expectedLocked(t *Task) time.Duration {
	if ts := s.shapeOf[t]; ts != nil && ts.known {
		return ts.expected
	}
	return UnknownDuration
}
