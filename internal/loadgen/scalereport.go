package loadgen

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// fairMinActions is how many actions an invocation or tenant needs to
// take part in the fairness index: the window ends when the first of
// them has no more queued work.
const fairMinActions = 20

// ScaleReport is what a scale run measured. Byte figures are of the
// server's resident set (/proc/PID/status VmRSS); per-worker and
// per-queued figures are the growth from the state before divided by the
// count.
type ScaleReport struct {
	Workers, Slots, Tenants, Invocations, Queued int
	MeanSleepMs, Drop                            float64

	// Completed actions and those that failed (FirstError is the first).
	Completed, Errors int
	FirstError        string `json:",omitempty"`
	// Exactly-once: actions leased more than once, never leased, and
	// results the scheduler refused.
	LeasedTwice, NeverLeased, Refused int

	QueueSeconds, DrainSeconds, Throughput float64
	// The time from a slot freeing to its next lease, over the leases
	// until 90% of the actions were leased (the queue still deep).
	GapN                         int
	GapP50Ms, GapP99Ms, GapMaxMs float64
	// The scheduler's own share of it (gantry_scheduler_handoff_seconds
	// over the drain, needs --http): a poll's arrival, or its lease being
	// made, to the lease handed to the transport. The max is the upper
	// bound of the histogram's highest bucket in use (-1: above the
	// last); Lock is the scheduler's lock held per lease, Store the wait
	// for the lease to be stored.
	ServerHandoffN                                             int
	ServerHandoffP50Ms, ServerHandoffP99Ms, ServerHandoffMaxMs float64
	ServerLockP50Ms, ServerLockP99Ms                           float64
	ServerStoreP50Ms, ServerStoreP99Ms                         float64
	// The state store's group commits over the drain (write and fsync).
	CommitN                  int
	CommitP50Ms, CommitP99Ms float64
	// The clients' time from Execute to the result.
	WaitP50Ms, WaitP99Ms, WaitMaxMs float64
	CPUPerActionMs                  float64
	// The server's CPU per worker for registering, and per worker and
	// second while the workers only heartbeat (with --hold).
	RegisterCPUPerWorkerMs, HeartbeatCPUPerWorkerSecMs float64

	RSSIdle, RSSWorkers, RSSLoaded, RSSPeak      int64
	RSSPerWorker, RSSPerQueued, RSSPeakPerQueued float64
	GoroutinesIdle, GoroutinesLoaded             float64
	FilesIdle, FilesLoaded, FilesPeak            int
	PagesIdle, PagesLoaded                       []pageTime
	// MemLoaded is the server's MemStats at the loaded state; MemLive
	// the same after a collection (with --heap-profile).
	MemLoaded, MemLive memStats

	// Jain's index of the actions leased per invocation and per tenant
	// while all of them had queued work.
	JainInvocations, JainTenants float64
	// ProbeWaitMs is the starving-tenant probe's Execute-to-result time.
	ProbeWaitMs float64
	ProbeError  string `json:",omitempty"`

	// Kill is "fail-over" or "restart" for a run with --kill-after
	// (scalekill.go): OpenAtKill actions had no result at the kill;
	// RestoredActions were queued or leased on the new scheduler when it
	// served (-1: not read). From the kill: BackMs until a scheduler
	// served again (the standby led, or the restarted server answered
	// /healthz), ExecuteMs until a fresh Execute was answered,
	// ClientsBackMs until the last of the ClientsBroken clients whose
	// stream broke followed its operation again (ClientsBack did), and
	// WorkersBack workers held a lease of the new scheduler again, the
	// median and the last after WorkersBackP50Ms and WorkersBackMaxMs.
	Kill                               string `json:",omitempty"`
	OpenAtKill                         int
	RestoredActions                    float64
	BackMs, ExecuteMs, ClientsBackMs   float64
	ClientsBroken, ClientsBack         int
	WorkersBack                        int
	WorkersBackP50Ms, WorkersBackMaxMs float64
	KillError                          string `json:",omitempty"`
	KillProbeError                     string `json:",omitempty"`
}

// summarize fills in the report from the items, the probe, the worker
// processes' leases, the drain's start and the server CPU it took.
func (r *ScaleReport) summarize(items []*scaleItem, probe *scaleItem, extra []*scaleItem, reps []*scaleWorkersReport, t0 time.Time, cpu time.Duration) {
	byID := make(map[string]*scaleItem, len(items)+1)
	var last time.Time
	var waits []time.Duration
	for _, it := range items {
		byID[it.id] = it
		if it.err != nil {
			if r.Errors++; r.FirstError == "" {
				r.FirstError = it.err.Error()
			}
			continue
		}
		if it.doneAt.IsZero() {
			continue
		}
		r.Completed++
		waits = append(waits, it.wait)
		if it.doneAt.After(last) {
			last = it.doneAt
		}
	}
	byID[probe.id] = probe
	for _, it := range extra {
		byID[it.id] = it
	}
	if probe.err != nil {
		r.ProbeError = probe.err.Error()
	} else {
		r.ProbeWaitMs = roundTo(ms(probe.wait), 2)
	}
	if !last.IsZero() {
		r.DrainSeconds = roundTo(last.Sub(t0).Seconds(), 3)
		r.Throughput = roundTo(float64(r.Completed)/last.Sub(t0).Seconds(), 1)
	}
	if r.Completed > 0 {
		r.CPUPerActionMs = roundTo(ms(cpu)/float64(r.Completed), 3)
	}
	w := summarize(waits)
	r.WaitP50Ms, r.WaitP99Ms, r.WaitMaxMs = roundTo(ms(w.p50), 2), roundTo(ms(w.p99), 2), roundTo(ms(w.max), 2)

	var leases []scaleLease
	for _, rp := range reps {
		leases = append(leases, rp.Leases...)
		r.Refused += rp.Refused
	}
	times := map[string]int{}
	for _, l := range leases {
		times[l.ID]++
	}
	for id, it := range byID {
		switch n := times[id]; {
		case n > 1:
			r.LeasedTwice++
		case n == 0 && it.err == nil:
			r.NeverLeased++
		}
	}
	slices.SortFunc(leases, func(a, b scaleLease) int { return int(a.AtNs - b.AtNs) })
	var gaps []time.Duration
	if n := len(leases); n > 0 {
		cut := leases[n*9/10].AtNs
		for _, l := range leases {
			if l.GapNs >= 0 && l.AtNs <= cut {
				gaps = append(gaps, time.Duration(l.GapNs))
			}
		}
	}
	g := summarize(gaps)
	r.GapN, r.GapP50Ms, r.GapP99Ms, r.GapMaxMs = g.n, roundTo(ms(g.p50), 3), roundTo(ms(g.p99), 3), roundTo(ms(g.max), 3)
	r.JainInvocations = fairness(leases, byID, func(it *scaleItem) int { return it.inv })
	r.JainTenants = fairness(leases, byID, func(it *scaleItem) int { return it.tenant })
}

// fairness is Jain's index of the leases per entity (key of an item)
// among the entities with at least fairMinActions actions, counted until
// the first of them had its last action leased. leases are sorted by
// time.
func fairness(leases []scaleLease, byID map[string]*scaleItem, key func(*scaleItem) int) float64 {
	total, lastAt := map[int]int{}, map[int]int64{}
	for _, l := range leases {
		if it := byID[l.ID]; it != nil && it.inv >= 0 {
			total[key(it)]++
			lastAt[key(it)] = l.AtNs
		}
	}
	end := int64(-1)
	for k, n := range total {
		if n >= fairMinActions && (end < 0 || lastAt[k] < end) {
			end = lastAt[k]
		}
	}
	counts := map[int]float64{}
	for k, n := range total {
		if n >= fairMinActions {
			counts[k] = 0
		}
	}
	if len(counts) < 2 {
		return 0
	}
	for _, l := range leases {
		if l.AtNs > end {
			break
		}
		if it := byID[l.ID]; it != nil && it.inv >= 0 {
			if _, ok := counts[key(it)]; ok {
				counts[key(it)]++
			}
		}
	}
	var xs []float64
	for _, c := range counts {
		xs = append(xs, c)
	}
	return roundTo(jain(xs), 3)
}

// UnboundedPages lists the pages that grew by more than pageSlack from
// the idle to the loaded state.
func (r *ScaleReport) UnboundedPages() []string {
	var out []string
	for i, p := range r.PagesLoaded {
		if i < len(r.PagesIdle) && p.Bytes > r.PagesIdle[i].Bytes+pageSlack {
			out = append(out, fmt.Sprintf("%s: %d bytes idle, %d with %d queued", p.Page, r.PagesIdle[i].Bytes, p.Bytes, r.Queued))
		}
	}
	return out
}

// check is the run's verdict: every action completed, once.
func (r *ScaleReport) check() error {
	var errs []error
	if r.Errors > 0 {
		errs = append(errs, fmt.Errorf("%d of %d actions failed; the first: %s", r.Errors, r.Queued, r.FirstError))
	}
	if r.Completed+r.Errors != r.Queued {
		errs = append(errs, fmt.Errorf("only %d of %d actions finished", r.Completed+r.Errors, r.Queued))
	}
	if r.LeasedTwice > 0 || r.NeverLeased > 0 {
		errs = append(errs, fmt.Errorf("exactly-once dispatch failed: %d actions leased more than once, %d completed but never leased by the run's workers", r.LeasedTwice, r.NeverLeased))
	}
	if r.ProbeError != "" {
		errs = append(errs, fmt.Errorf("the starving-tenant probe failed: %s", r.ProbeError))
	}
	if r.KillError != "" {
		errs = append(errs, fmt.Errorf("the kill: %s", r.KillError))
	}
	if r.KillProbeError != "" {
		errs = append(errs, fmt.Errorf("the Execute sent after the kill failed: %s", r.KillProbeError))
	}
	for _, p := range append(slices.Clone(r.PagesIdle), r.PagesLoaded...) {
		if p.Error != "" {
			errs = append(errs, fmt.Errorf("%s: %s", p.Page, p.Error))
		}
	}
	return errors.Join(errs...)
}

// Print writes the report for people, then one SCALE line for scripts.
func (r *ScaleReport) Print(w io.Writer) {
	mib := func(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
	fmt.Fprintf(w, "%d workers × %d slots, %d tenants, %d invocations, %d queued (mean sleep %gms, %.0f%% dropped streams)\n",
		r.Workers, r.Slots, r.Tenants, r.Invocations, r.Queued, r.MeanSleepMs, r.Drop*100)
	fmt.Fprintf(w, "completed %d, failed %d, leased twice %d, never leased %d, refused results %d\n", r.Completed, r.Errors, r.LeasedTwice, r.NeverLeased, r.Refused)
	fmt.Fprintf(w, "queued in %.1fs; drained in %.2fs: %.1f actions/s; server CPU %.3f ms/action\n", r.QueueSeconds, r.DrainSeconds, r.Throughput, r.CPUPerActionMs)
	fmt.Fprintf(w, "slot free → next lease (%d): p50 %.3fms p99 %.3fms max %.3fms; Execute → result p50 %.1fms p99 %.1fms max %.1fms\n",
		r.GapN, r.GapP50Ms, r.GapP99Ms, r.GapMaxMs, r.WaitP50Ms, r.WaitP99Ms, r.WaitMaxMs)
	if r.ServerHandoffN > 0 {
		maxMs := fmt.Sprintf("<= %.3fms", r.ServerHandoffMaxMs)
		if r.ServerHandoffMaxMs < 0 {
			maxMs = "above the last bucket"
		}
		fmt.Fprintf(w, "  of which the scheduler's own (%d leases, from its histogram): p50 %.3fms p99 %.3fms max %s; its lock held per lease p50 %.4fms p99 %.4fms; waiting for the lease to be stored p50 %.3fms p99 %.3fms\n",
			r.ServerHandoffN, r.ServerHandoffP50Ms, r.ServerHandoffP99Ms, maxMs, r.ServerLockP50Ms, r.ServerLockP99Ms, r.ServerStoreP50Ms, r.ServerStoreP99Ms)
		fmt.Fprintf(w, "  the state store's group commits (%d): p50 %.3fms p99 %.3fms\n", r.CommitN, r.CommitP50Ms, r.CommitP99Ms)
	}
	fmt.Fprintf(w, "server CPU per worker: %.4f ms to register; %.5f ms a second while it only heartbeats (measured with --hold)\n", r.RegisterCPUPerWorkerMs, r.HeartbeatCPUPerWorkerSecMs)
	fmt.Fprintf(w, "server RSS: idle %s, with workers %s (%.1f KiB/worker), loaded %s (%.2f KiB/queued), peak %s (%.2f KiB/queued)\n",
		mib(r.RSSIdle), mib(r.RSSWorkers), r.RSSPerWorker/1024, mib(r.RSSLoaded), r.RSSPerQueued/1024, mib(r.RSSPeak), r.RSSPeakPerQueued/1024)
	if m := r.MemLoaded; m.Sys > 0 {
		per := func(b int64) float64 { return float64(b) / float64(r.Queued) / 1024 }
		fmt.Fprintf(w, "loaded server's memory (MemStats) per queued action: heap in use %.2f KiB (allocated %.2f KiB, next GC at %.2f KiB), stacks %.2f KiB, heap idle not released %.2f KiB, runtime (spans, GC) %.2f KiB; Sys %s\n",
			per(m.HeapInuse), per(m.HeapAlloc), per(m.NextGC), per(m.Stack), per(m.HeapIdle-m.HeapReleased), per(m.MSpan+m.GCSys), mib(m.Sys))
	}
	if m := r.MemLive; m.Sys > 0 {
		fmt.Fprintf(w, "after a collection, per queued action: live heap %.2f KiB, stacks %.2f KiB\n", float64(m.HeapAlloc)/float64(r.Queued)/1024, float64(m.Stack)/float64(r.Queued)/1024)
	}
	fmt.Fprintf(w, "goroutines idle %.0f, loaded %.0f; open files idle %d, loaded %d, at the end %d\n", r.GoroutinesIdle, r.GoroutinesLoaded, r.FilesIdle, r.FilesLoaded, r.FilesPeak)
	for i, p := range r.PagesLoaded {
		idle := ""
		if i < len(r.PagesIdle) {
			idle = fmt.Sprintf(" (idle: %.1fms, %d bytes)", r.PagesIdle[i].Ms, r.PagesIdle[i].Bytes)
		}
		fmt.Fprintf(w, "  %-32s %8.1fms %9d bytes%s\n", p.Page, p.Ms, p.Bytes, idle)
	}
	for _, u := range r.UnboundedPages() {
		fmt.Fprintf(w, "UNBOUNDED page: %s\n", u)
	}
	fmt.Fprintf(w, "fairness (Jain): invocations %.3f, tenants %.3f; starving-tenant probe %.1fms\n", r.JainInvocations, r.JainTenants, r.ProbeWaitMs)
	if r.Kill != "" {
		fmt.Fprintf(w, "%s: %d actions open at the kill, %.0f queued or leased on the new scheduler; after the kill: serving %.0fms, Execute answered %.0fms, %d of %d broken streams followed again %.0fms, %d of %d workers leased again p50 %.0fms last %.0fms\n",
			r.Kill, r.OpenAtKill, r.RestoredActions, r.BackMs, r.ExecuteMs, r.ClientsBack, r.ClientsBroken, r.ClientsBackMs, r.WorkersBack, r.Workers, r.WorkersBackP50Ms, r.WorkersBackMaxMs)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "SCALE workers=%d slots=%d queued=%d rate=%.1f gap_p50_ms=%.3f gap_p99_ms=%.3f gap_max_ms=%.3f cpu_ms=%.3f", r.Workers, r.Slots, r.Queued, r.Throughput, r.GapP50Ms, r.GapP99Ms, r.GapMaxMs, r.CPUPerActionMs)
	fmt.Fprintf(&b, " server_p50_ms=%.3f server_p99_ms=%.3f server_max_ms=%.3f", r.ServerHandoffP50Ms, r.ServerHandoffP99Ms, r.ServerHandoffMaxMs)
	fmt.Fprintf(&b, " rss_worker_kib=%.1f rss_queued_kib=%.2f rss_peak_queued_kib=%.2f jain_inv=%.3f jain_tenant=%.3f probe_ms=%.1f", r.RSSPerWorker/1024, r.RSSPerQueued/1024, r.RSSPeakPerQueued/1024, r.JainInvocations, r.JainTenants, r.ProbeWaitMs)
	if r.Kill != "" {
		fmt.Fprintf(&b, " kill=%s back_ms=%.0f execute_ms=%.0f clients_back_ms=%.0f workers_back_p50_ms=%.0f workers_back_max_ms=%.0f", r.Kill, r.BackMs, r.ExecuteMs, r.ClientsBackMs, r.WorkersBackP50Ms, r.WorkersBackMaxMs)
	}
	fmt.Fprintln(w, b.String())
}
