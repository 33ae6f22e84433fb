package server

import (
	"log/slog"
	"time"

	"github.com/gantry-build/gantry/internal/config"
	"github.com/gantry-build/gantry/internal/platform"
	"github.com/gantry-build/gantry/internal/scheduler"
)

// schedulerConfig is the scheduler's part of cfg; it logs to log.
func schedulerConfig(cfg config.Config, log *slog.Logger) scheduler.Config {
	sc := cfg.Scheduler
	return scheduler.Config{
		HeartbeatInterval: sc.HeartbeatInterval.D(),
		HeartbeatTimeout:  sc.HeartbeatTimeout.D(),
		ReconcileWindow:   sc.ReconcileWindow.D(),
		MaxAttempts:       sc.MaxAttempts,
		CallerGrace:       sc.CallerGrace.D(),
		Retention:         sc.Retention.D(),
		Queues:            Queues(sc.Queues),
		IgnoredProperties: sc.IgnoredProperties,
		UnsatisfiableWait: sc.UnsatisfiableWait.D(),
		StartupGrace:      sc.StartupGrace.D(),
		PriorityHalving:   sc.Fairness.PriorityHalving,
		Stickiness:        durations(sc.Fairness.Stickiness),
		Labels:            labels(sc.Labels),
		Cohorts:           cohorts(sc.Cohorts),
		PreemptionDelay:   sc.PreemptionDelay.D(),
		Preemption:        scheduler.PreemptionMode(sc.Preemption),
		MaxSuspend:        sc.MaxSuspend.D(),
		ChrootInstances:   sc.ChrootInstances,
		LongestFirst:      scheduler.LongestFirstMode(sc.Fairness.LongestFirst),
		LearnedTimeouts: scheduler.LearnedTimeouts{Multiple: sc.Durations.TimeoutMultiple,
			Floor: sc.Durations.TimeoutFloor.D(), MinSamples: sc.Durations.TimeoutMinSamples},
		TargetDrain: sc.Autoscaling.TargetDrain.D(),
		Logger:      log,

		PersistentWorkerStickiness: sc.Fairness.PersistentWorkerStickiness.D(),
	}
}

func labels(ls []config.LabelConfig) []scheduler.Label {
	out := make([]scheduler.Label, len(ls))
	for i, l := range ls {
		out[i].Name = l.Name
		for k, v := range l.Properties {
			out[i].Properties = append(out[i].Properties, platform.Property{Name: k, Value: v})
		}
		out[i].Properties.Sort()
	}
	return out
}

func cohorts(cs []config.CohortConfig) []scheduler.Cohort {
	out := make([]scheduler.Cohort, len(cs))
	for i, c := range cs {
		out[i] = scheduler.Cohort{Name: c.Name, Labels: c.Labels}
	}
	return out
}

func durations(ds []config.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d.D()
	}
	return out
}

// Queues converts configured provision queues.
func Queues(qs []config.QueueConfig) []platform.Queue {
	out := make([]platform.Queue, 0, len(qs))
	for _, q := range qs {
		pq := platform.Queue{Name: q.Name, AllowUnmatched: q.AllowUnmatched}
		for k, vs := range q.Properties {
			for _, v := range vs {
				pq.Properties = append(pq.Properties, platform.Property{Name: k, Value: v})
			}
		}
		pq.Properties.Sort()
		out = append(out, pq)
	}
	return out
}
