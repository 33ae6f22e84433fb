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
	// Workers is ceil(Work / (target x slots per worker)), with the mean
	// slots of the cohort's registered workers (1 when none is).
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
	get := func(c string) *CohortDemand {
		d := by[c]
		if d == nil {
			d = &CohortDemand{Cohort: c}
			by[c] = d
		}
		return d
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
			d.Work += s.expectedLocked(t).Seconds()
		})
	}
	for _, l := range s.leases {
		d := get(l.cohort)
		d.Running++
		d.Work += max(s.expectedLocked(l.task)-now.Sub(l.started), 0).Seconds()
	}
	slots, workers := map[string]int{}, map[string]int{}
	for _, w := range s.workers {
		if !w.restored {
			slots[w.cohort] += max(w.info.Slots, 1)
			workers[w.cohort]++
		}
	}
	out := make([]CohortDemand, 0, len(by))
	for c, d := range by {
		per := 1.0
		if workers[c] > 0 {
			per = float64(slots[c]) / float64(workers[c])
		}
		d.Workers = int(math.Ceil(d.Work / (target.Seconds() * per)))
		out = append(out, *d)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Cohort < out[j].Cohort })
	return out
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
