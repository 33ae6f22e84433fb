package config

import (
	"fmt"

	"github.com/gantry-build/gantry/internal/invocation"
)

// Config.Validate asks one validator per section (and per part of the
// larger sections); each reports what it finds wrong through bad, with
// the key's path.

// validateStorage checks the stores' backends and the sizes of what is
// stored and served; the S3 bucket's keys only when a store uses it.
func validateStorage(st Storage, bad func(path, format string, args ...any)) {
	for path, b := range map[string]string{"storage.cas.backend": st.CAS.Backend, "storage.action_cache.backend": st.ActionCache.Backend} {
		if b != "disk" && b != "memory" && b != "s3" {
			bad(path, "%q is not a backend; use disk, memory or s3", b)
		}
	}
	if st.UsesS3() {
		validateS3(st.S3, bad)
	}
	if s3 := st.S3; st.CAS.Backend == "s3" && s3.ExpireAfter > 0 && s3.ExpireAfter-s3.RefreshAfter < st.CAS.MinLifetime {
		bad("storage.cas.min_lifetime", "%s is more than storage.s3.expire_after minus refresh_after (%s): a blob used just before its refresh was due could expire sooner; lower refresh_after or min_lifetime", st.CAS.MinLifetime, s3.ExpireAfter-s3.RefreshAfter)
	}
	if st.CAS.PackThreshold > 1<<20 {
		bad("storage.cas.pack_threshold", "at most 1MiB; larger blobs are better off in their own files")
	}
	if st.MaxBatchSize < 64<<10 {
		bad("storage.max_batch_size", "%d bytes is too small; use at least 64KiB", st.MaxBatchSize)
	}
	if st.ReadChunkSize < 1<<10 || st.ReadChunkSize > 4<<20-1<<10 {
		bad("storage.read_chunk_size", "must be between 1KiB and 4MiB-1KiB (clients accept 4 MiB messages)")
	}
}

// validateScheduler checks the scheduler section, part by part.
func validateScheduler(sc SchedulerConfig, bad func(path, format string, args ...any)) {
	validateLeases(sc, bad)
	validateFairness(sc.Fairness, bad)
	if sc.Durations.MaxShapes < 0 {
		bad("scheduler.durations.max_shapes", "must not be negative (0 learns no durations)")
	}
	if sc.Durations.TimeoutMultiple < 0 || sc.Durations.TimeoutMultiple > 0 && sc.Durations.TimeoutMultiple < 1 {
		bad("scheduler.durations.timeout_multiple", "is %v; use 0 (no learned timeouts) or at least 1 (5: five times the expected time)", sc.Durations.TimeoutMultiple)
	}
	if sc.Durations.TimeoutFloor < 0 || sc.Durations.TimeoutMinSamples < 0 {
		bad("scheduler.durations", "timeout_floor and timeout_min_samples must not be negative")
	}
	if sc.Autoscaling.TargetDrain <= 0 {
		bad("scheduler.autoscaling.target_drain", "must be positive (10m: enough workers to finish the queued and running work in ten minutes)")
	}
	if sc.Durations.HalfLife <= 0 {
		bad("scheduler.durations.half_life", "must be positive (72h: a sample counts half after three days)")
	}
	validateSizeClasses(sc, bad)
	validateTenancy(sc.Labels, sc.Cohorts, bad)
	validateSchedulerStore(sc.Store, bad)
	validatePreemption(sc, bad)
	validateLiveOutput(sc.LiveOutput, bad)
	validateQueues(sc.Queues, sc.IgnoredProperties, bad)
}

// validateLeases checks the heartbeats that keep a lease and the tries
// an action gets.
func validateLeases(sc SchedulerConfig, bad func(path, format string, args ...any)) {
	if sc.HeartbeatInterval <= 0 {
		bad("scheduler.heartbeat_interval", "must be positive")
	}
	if sc.HeartbeatTimeout < 2*sc.HeartbeatInterval {
		bad("scheduler.heartbeat_timeout", "%s is less than twice heartbeat_interval (%s); one late heartbeat would lose work", sc.HeartbeatTimeout, sc.HeartbeatInterval)
	}
	if sc.MaxAttempts < 1 {
		bad("scheduler.max_attempts", "must be at least 1")
	}
	if sc.ReconcileWindow <= 0 {
		bad("scheduler.reconcile_window", "must be positive (a few seconds: workers register again within about a second of a restart)")
	}
}

// validateFairness checks the invocation keys and their stickiness.
func validateFairness(fc FairnessConfig, bad func(path, format string, args ...any)) {
	for i, k := range fc.Keys {
		if _, err := invocation.Parse(k); err != nil {
			bad(fmt.Sprintf("scheduler.fairness.keys[%d]", i), "%v", err)
		}
	}
	switch fc.LongestFirst {
	case "off", "gantry", "all":
	default:
		bad("scheduler.fairness.longest_first", "is %q; use off, gantry (the invocations of gantry batch, run and cc) or all", fc.LongestFirst)
	}
	if fc.PersistentWorkerStickiness < 0 {
		bad("scheduler.fairness.persistent_worker_stickiness", "must not be negative (0 turns the preference for warm workers off)")
	}
	if len(fc.Stickiness) > len(fc.Keys) {
		bad("scheduler.fairness.stickiness", "%d durations for %d keys; give at most one per key", len(fc.Stickiness), len(fc.Keys))
	}
	if fc.PriorityHalving <= 0 {
		bad("scheduler.fairness.priority_halving", "must be positive (10: every 10 priority points double a share)")
	}
	if fc.UserHeader == "" {
		bad("scheduler.fairness.user_header", "must name a header, e.g. %s", invocation.DefaultUserHeader)
	}
}

// validateTenancy checks the labels and the cohorts made of them.
func validateTenancy(labelConfigs []LabelConfig, cohortConfigs []CohortConfig, bad func(path, format string, args ...any)) {
	labels := map[string]bool{}
	for i, l := range labelConfigs {
		path := fmt.Sprintf("scheduler.labels[%d]", i)
		switch {
		case l.Name == "":
			bad(path+".name", "every label needs a name")
		case labels[l.Name]:
			bad(path+".name", "label %q is defined twice", l.Name)
		case len(l.Properties) == 0:
			bad(path+".properties", "label %q needs at least one property, e.g. {OSFamily: linux}", l.Name)
		}
		labels[l.Name] = true
	}
	cohorts := map[string]bool{}
	for i, co := range cohortConfigs {
		path := fmt.Sprintf("scheduler.cohorts[%d]", i)
		switch {
		case co.Name == "":
			bad(path+".name", "every cohort needs a name")
		case cohorts[co.Name]:
			bad(path+".name", "cohort %q is defined twice", co.Name)
		case len(co.Labels) == 0:
			bad(path+".labels", "cohort %q needs at least one label", co.Name)
		}
		cohorts[co.Name] = true
		for j, l := range co.Labels {
			if !labels[l] {
				bad(fmt.Sprintf("%s.labels[%d]", path, j), "unknown label %q; define it under scheduler.labels", l)
			}
		}
	}
}

// validateSchedulerStore checks where the scheduler's state is kept.
func validateSchedulerStore(store StoreConfig, bad func(path, format string, args ...any)) {
	switch store.Backend {
	case "embedded", "memory":
	case "postgres":
		if store.DSN == "" {
			bad("scheduler.store.dsn", "the postgres backend needs a connection string, e.g. postgres://gantry@db:5432/gantry")
		}
		if store.StartWait < 0 {
			bad("scheduler.store.start_wait", "must not be negative (0 gives up at the first failure)")
		}
		if store.CommitsInFlight < 0 || store.CommitsInFlight > 16 { // 0: the default
			bad("scheduler.store.commits_in_flight", "is %d; use 1 to 16 (default 1, one group at a time)", store.CommitsInFlight)
		}
	default:
		bad("scheduler.store.backend", "%q is not a store; use embedded, postgres or memory", store.Backend)
	}
}

// validatePreemption checks the pre-emption mode and its delays.
func validatePreemption(sc SchedulerConfig, bad func(path, format string, args ...any)) {
	if sc.PreemptionDelay <= 0 {
		bad("scheduler.preemption_delay", "must be positive: it is the grace running work gets before it is pre-empted")
	}
	switch sc.Preemption {
	case "cancel", "suspend":
	default:
		bad("scheduler.preemption", "%q is not a pre-emption mode; use cancel (the victim is stopped and queued again) or suspend (it is stopped with SIGSTOP and resumed later)", sc.Preemption)
	}
	if sc.MaxSuspend <= 0 {
		bad("scheduler.max_suspend", "must be positive: it is how long a suspended action may stay stopped before it is cancelled and queued again")
	}
}

// validateQueues checks the provision queues and the ignored properties.
func validateQueues(queues []QueueConfig, ignored []string, bad func(path, format string, args ...any)) {
	seenQueue := map[string]bool{}
	for i, q := range queues {
		path := fmt.Sprintf("scheduler.queues[%d]", i)
		if q.Name == "" {
			bad(path+".name", "every queue needs a name")
		} else if seenQueue[q.Name] {
			bad(path+".name", "queue %q is defined twice", q.Name)
		}
		seenQueue[q.Name] = true
		for k, vs := range q.Properties {
			if k == "" || len(vs) == 0 {
				bad(path+".properties", "property %q needs a name and at least one value", k)
			}
		}
	}
	for i, name := range ignored {
		if name == "" {
			bad(fmt.Sprintf("scheduler.ignored_properties[%d]", i), "is empty; list property names, e.g. [container-image]")
		}
	}
}

// validateWorker checks the worker section: its resources, wrappers,
// sandbox, disk limits and slots.
func validateWorker(w WorkerConfig, bad func(path, format string, args ...any)) {
	for name, n := range w.Resources {
		if name == "" || n < 0 {
			bad("worker.resources."+name, "a resource needs a name and a non-negative capacity")
		}
	}
	for name, argv := range w.ProcessWrappers {
		if name == "" || len(argv) == 0 || argv[0] == "" {
			bad("worker.process_wrappers."+name, "a wrapper needs a name and a command, e.g. {nice: [/usr/bin/nice, -n, \"10\"]}")
		}
	}
	validateSandbox(w.Sandbox, bad)
	validateDiskLimits(w, bad)
	validateLinkInputDirectories(w, bad)
	validatePersistentWorkers(w.PersistentWorkers, bad)
	if w.StopGrace < 0 {
		bad("worker.stop_grace", "must not be negative (0: SIGTERM stops the running actions at once; 10m: they get ten minutes to finish)")
	}
	if w.Cores < 0 || w.InputFetchSlots < 0 || w.ReportSlots < 0 {
		bad("worker", "cores, input_fetch_slots and report_slots must not be negative")
	}
}

// validateLog checks the log level and format.
func validateLog(l LogConfig, bad func(path, format string, args ...any)) {
	switch l.Level {
	case "debug", "info", "warn", "error":
	default:
		bad("log.level", "%q is not a level; use debug, info, warn or error", l.Level)
	}
	switch l.Format {
	case "text", "json":
	default:
		bad("log.format", "%q is not a format; use text or json", l.Format)
	}
}
