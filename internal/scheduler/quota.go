package scheduler

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"

	"github.com/gantry-build/gantry/internal/platform"
)

// Tenancy: instance names are tenants. Workers fall into cohorts through
// property labels, and each (instance, cohort) may have a quota: min is the
// number of concurrent executions guaranteed to the instance on the
// cohort's workers, max the most it may hold. An instance below its min
// with work waiting takes the next free slot of the cohort before anyone
// else; when no slot comes free within PreemptionDelay, actions of
// instances above their own min are pre-empted for it.

// Label is a named set of platform properties. A worker has the label
// when it offers every property (the same value, or "*").
type Label struct {
	Name       string
	Properties platform.Properties
}

// Cohort is a named group of workers: a worker is in the first cohort (in
// configuration order) whose Labels include every label the worker has.
// A worker with no label is in no cohort.
type Cohort struct {
	Name   string
	Labels []string
}

// Quota bounds an instance's concurrent executions on a cohort.
type Quota struct {
	Instance string
	Cohort   string
	Min      int
	// Max is the most it may use; negative means no bound.
	Max int
}

// QuotaStatus is a quota with the cohort's current state.
type QuotaStatus struct {
	Quota
	// Usage is the instance's executing actions on the cohort.
	Usage int
	// Queued counts the instance's queued actions the cohort could run.
	Queued int
	// CohortSlots is the execute capacity (cores) of the cohort's
	// registered workers; MinSum the sum of all min quotas on the cohort.
	CohortSlots, MinSum int
	// Configured is false for a usage row without a quota.
	Configured bool
}

type quotaKey struct{ instance, cohort string }

// tenancy is the scheduler's quota state, guarded by Scheduler.mu.
type tenancy struct {
	labels  []Label
	cohorts []Cohort
	delay   time.Duration
	quotas  map[quotaKey]Quota
	usage   map[quotaKey]int
	// starving is when an instance below its min with runnable work was
	// first seen waiting (or last got victims) on a cohort.
	starving map[quotaKey]time.Time
	// mode is how victims are stopped; suspended holds, in suspend mode,
	// the leases stopped for pre-emption and when (suspend.go).
	mode       PreemptionMode
	maxSuspend time.Duration
	suspended  map[*lease]time.Time
	expired    int64
	// avoid keeps an action moved off a worker it waited on (and could
	// not start on) from going back there until it is leased.
	avoid map[*Task]*worker
	// unsure are leases restored from the state store: a suspension is
	// not stored, so each gets a RESUME (a no-op unless it is stopped).
	unsure map[*lease]bool
}

func newTenancy(cfg Config) *tenancy {
	return &tenancy{labels: cfg.Labels, cohorts: cfg.Cohorts, delay: cfg.PreemptionDelay,
		quotas: map[quotaKey]Quota{}, usage: map[quotaKey]int{}, starving: map[quotaKey]time.Time{},
		mode: cfg.Preemption, maxSuspend: cfg.MaxSuspend, suspended: map[*lease]time.Time{}, unsure: map[*lease]bool{},
		avoid: map[*Task]*worker{}}
}

// cohortOf returns the cohort of a worker offering props, or "".
func (tn *tenancy) cohortOf(props platform.Properties) string {
	var have []string
	for _, l := range tn.labels {
		if hasAll(props, l.Properties) {
			have = append(have, l.Name)
		}
	}
	if len(have) == 0 {
		return ""
	}
	for _, c := range tn.cohorts {
		if subset(have, c.Labels) {
			return c.Name
		}
	}
	return ""
}

func hasAll(offered, want platform.Properties) bool {
	for _, w := range want {
		found := false
		for _, o := range offered {
			if o.Name == w.Name && (o.Value == w.Value || o.Value == "*") {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

func subset(a, b []string) bool {
	for _, x := range a {
		if !slices.Contains(b, x) {
			return false
		}
	}
	return true
}

func (tn *tenancy) knownCohort(name string) bool {
	for _, c := range tn.cohorts {
		if c.Name == name {
			return true
		}
	}
	return false
}

// maxReached reports whether instance may not start more work on cohort.
func (tn *tenancy) maxReached(instance, cohort string) bool {
	if cohort == "" {
		return false
	}
	q, ok := tn.quotas[quotaKey{instance, cohort}]
	return ok && q.Max >= 0 && tn.usage[quotaKey{instance, cohort}] >= q.Max
}

// belowMin reports whether instance holds fewer than its min on cohort.
func (tn *tenancy) belowMin(instance, cohort string) bool {
	if cohort == "" {
		return false
	}
	q, ok := tn.quotas[quotaKey{instance, cohort}]
	return ok && tn.usage[quotaKey{instance, cohort}] < q.Min
}

func (tn *tenancy) min(instance, cohort string) int {
	return tn.quotas[quotaKey{instance, cohort}].Min
}

// ValidateQuota checks a quota against the configured cohorts.
func (s *Scheduler) ValidateQuota(q Quota) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.validateQuotaLocked(q)
}

func (s *Scheduler) validateQuotaLocked(q Quota) error {
	if !s.ten.knownCohort(q.Cohort) {
		names := make([]string, len(s.ten.cohorts))
		for i, c := range s.ten.cohorts {
			names[i] = c.Name
		}
		if len(names) == 0 {
			return errorf(ErrInvalid, "unknown cohort %q: no cohorts are configured; define them under scheduler.cohorts", q.Cohort)
		}
		return errorf(ErrInvalid, "unknown cohort %q; configured cohorts: %s", q.Cohort, strings.Join(names, ", "))
	}
	if q.Min < 0 {
		return errorf(ErrInvalid, "min_quota %d is negative; use 0 or more", q.Min)
	}
	if q.Max >= 0 && q.Min > q.Max {
		return errorf(ErrInvalid, "min_quota %d is greater than max_quota %d; raise max_quota or lower min_quota", q.Min, q.Max)
	}
	return nil
}

// SetQuota adds or replaces the quota of (q.Instance, q.Cohort). It
// returns a warning when the cohort's min quotas add up to more than its
// slots.
func (s *Scheduler) SetQuota(q Quota) (warning string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.validateQuotaLocked(q); err != nil {
		return "", err
	}
	s.ten.quotas[quotaKey{q.Instance, q.Cohort}] = q
	return s.oversubscribedLocked(q.Cohort), nil
}

// DeleteQuota removes a quota; it reports whether there was one.
func (s *Scheduler) DeleteQuota(instance, cohort string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := quotaKey{instance, cohort}
	_, ok := s.ten.quotas[k]
	delete(s.ten.quotas, k)
	delete(s.ten.starving, k)
	return ok
}

// QuotaList returns every configured quota with its usage, and usage rows
// for (instance, cohort) pairs that execute without a quota. Sorted by
// cohort, then instance.
func (s *Scheduler) QuotaList() []QuotaStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	keys := map[quotaKey]bool{}
	for k := range s.ten.quotas {
		keys[k] = true
	}
	for k, n := range s.ten.usage {
		if n > 0 {
			keys[k] = true
		}
	}
	out := make([]QuotaStatus, 0, len(keys))
	for k := range keys {
		out = append(out, s.quotaStatusLocked(k))
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Cohort != out[j].Cohort {
			return out[i].Cohort < out[j].Cohort
		}
		return out[i].Instance < out[j].Instance
	})
	return out
}

// QuotaOf returns the status of one (instance, cohort) pair.
func (s *Scheduler) QuotaOf(instance, cohort string) (QuotaStatus, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.ten.knownCohort(cohort) {
		return QuotaStatus{}, s.validateQuotaLocked(Quota{Instance: instance, Cohort: cohort})
	}
	return s.quotaStatusLocked(quotaKey{instance, cohort}), nil
}

func (s *Scheduler) quotaStatusLocked(k quotaKey) QuotaStatus {
	q, ok := s.ten.quotas[k]
	if !ok {
		q = Quota{Instance: k.instance, Cohort: k.cohort, Max: -1}
	}
	st := QuotaStatus{Quota: q, Configured: ok, Usage: s.ten.usage[k], CohortSlots: s.cohortSlotsLocked(k.cohort)}
	for qk, qq := range s.ten.quotas {
		if qk.cohort == k.cohort {
			st.MinSum += qq.Min
		}
	}
	for _, b := range s.queue.buckets {
		if b.instance == k.instance && s.cohortCanRunLocked(k.cohort, b) {
			st.Queued += b.n
		}
	}
	return st
}

func (s *Scheduler) cohortSlotsLocked(cohort string) int {
	n := 0
	for _, w := range s.workers {
		if w.cohort == cohort {
			n += max(w.info.Platform.Cores, 1)
		}
	}
	return n
}

// Cohorts returns the configured cohorts with their current slots.
func (s *Scheduler) Cohorts() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]int{}
	for _, c := range s.ten.cohorts {
		out[c.Name] = s.cohortSlotsLocked(c.Name)
	}
	return out
}

// oversubscribedLocked explains when a cohort's min quotas exceed its
// slots: then not every min can be honoured at once.
func (s *Scheduler) oversubscribedLocked(cohort string) string {
	sum := 0
	for k, q := range s.ten.quotas {
		if k.cohort == cohort {
			sum += q.Min
		}
	}
	if slots := s.cohortSlotsLocked(cohort); sum > slots {
		return fmt.Sprintf("the min quotas on cohort %s add up to %d but its registered workers have %d slots: not every min can be honoured at once", cohort, sum, slots)
	}
	return ""
}

// QuotaWarnings returns one warning per cohort whose min quotas add up to
// more than its slots.
func (s *Scheduler) QuotaWarnings() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, c := range s.ten.cohorts {
		if w := s.oversubscribedLocked(c.Name); w != "" {
			out = append(out, w)
		}
	}
	return out
}

// cohortCanRunLocked reports whether some registered worker of cohort
// could run the bucket's actions.
func (s *Scheduler) cohortCanRunLocked(cohort string, b *bucket) bool {
	for _, w := range s.workers {
		if w.cohort == cohort && w.serves(b.instance) && w.matches(b) {
			return true
		}
	}
	return false
}

// leaseUsage counts a lease toward its instance's usage on its worker's
// cohort (delta +1 at the start, -1 at the end).
func (s *Scheduler) leaseUsageLocked(l *lease, delta int) {
	if delta > 0 && len(s.ten.avoid) > 0 {
		delete(s.ten.avoid, l.task)
	}
	if delta < 0 {
		delete(s.ten.unsure, l)
		if _, ok := s.ten.suspended[l]; ok {
			// A suspended lease gave its usage back when it stopped.
			delete(s.ten.suspended, l)
			return
		}
	}
	s.ten.addUsage(l, delta)
}

// preemptLocked runs in Tick: for each instance below its min on a cohort
// with work waiting, once the pre-emption delay has passed, it pre-empts
// actions of instances above their own min on that cohort: the most
// over-quota instance first, then a running action (it holds a core)
// before one still being prepared, then the most recently started (the
// least work lost). A victim is cancelled on its worker and goes back to
// the front of its queue; its clients see it QUEUED again and the try does
// not count. Actions the victim's worker holds but has not started yet
// (its pipeline fetches ahead of its cores) are taken back with it, so
// that the freed core goes to the starving instance.
//
// An action of the instance that a worker holds but cannot start, because
// running actions hold all that worker's cores, does not count toward the
// min: it waits as queued work does, and its victim is a running action on
// that same worker; if nothing there may be pre-empted, the action is
// taken back and its victim is a running action on another worker that
// could run it (moveHeldLocked). (One still fetching its inputs on a
// worker with a free core counts: it will run.) Work waits if it is queued with no free slot
// of the cohort to take it, or held like that.
func (s *Scheduler) preemptLocked(now time.Time) {
	s.forgetAvoidedLocked()
	if len(s.ten.quotas) == 0 {
		return
	}
	var stuck map[quotaKey][]*lease
	found := false
	for k, q := range s.ten.quotas {
		if q.Min <= 0 {
			delete(s.ten.starving, k)
			continue
		}
		if !found {
			stuck, found = s.stuckLocked(), true
		}
		held := stuck[k]
		// Leases count toward the min, but for those that cannot start:
		// one still fetching inputs on a worker with a free core will run.
		deficit := q.Min - (s.ten.usage[k] - len(held))
		if deficit <= 0 {
			delete(s.ten.starving, k)
			continue
		}
		runnable, queued := s.waitingWorkLocked(k)
		if queued == 0 && len(held) == 0 {
			delete(s.ten.starving, k)
			continue
		}
		if !s.starvedLongEnoughLocked(k, now) {
			continue
		}
		reason := fmt.Sprintf("pre-empted: instance %q is below its min_quota %d on cohort %s", k.instance, q.Min, k.cohort)
		deficit = s.preemptForHeldLocked(k, held, deficit, reason)
		if deficit > 0 && queued > 0 {
			s.preemptForQueuedLocked(k, runnable, min(deficit, queued), reason)
		}
		s.ten.starving[k] = now
	}
}

// forgetAvoidedLocked forgets the workers kept from tasks that finished
// without a lease (moveHeldLocked).
func (s *Scheduler) forgetAvoidedLocked() {
	for t := range s.ten.avoid {
		if t.state != stateQueued {
			delete(s.ten.avoid, t)
		}
	}
}

// waitingWorkLocked is the queued work of k's instance that k's cohort
// could run (its buckets, and how many tasks): none when a parked poll of
// the cohort takes it now.
func (s *Scheduler) waitingWorkLocked(k quotaKey) (runnable []*bucket, queued int) {
	for _, b := range s.queue.buckets {
		if b.instance == k.instance && s.cohortCanRunLocked(k.cohort, b) {
			runnable = append(runnable, b)
			queued += b.n
		}
	}
	if queued > 0 && s.freeSlotForLocked(k.cohort, runnable) {
		queued = 0
	}
	return runnable, queued
}

// starvedLongEnoughLocked notes when k began to starve and reports
// whether the pre-emption delay has passed since.
func (s *Scheduler) starvedLongEnoughLocked(k quotaKey, now time.Time) bool {
	since, ok := s.ten.starving[k]
	if !ok {
		s.ten.starving[k] = now
		since = now
	}
	return now.Sub(since) >= s.ten.delay
}

// preemptForHeldLocked stops, for each of k's held actions while the
// deficit lasts, a running action on its own worker; when nothing there
// may be pre-empted, the held action moves to a core freed on another
// worker that could run it. It returns the deficit left.
func (s *Scheduler) preemptForHeldLocked(k quotaKey, held []*lease, deficit int, reason string) int {
	for _, h := range held {
		if deficit == 0 {
			break
		}
		victims := s.chooseVictimsLocked(k, 1, func(l *lease) bool {
			return l.worker == h.worker && l.stage >= repb.ExecutionStage_EXECUTING
		})
		if len(victims) == 0 {
			// Nothing on its worker may be pre-empted (what runs there
			// is within its own min): the action moves to a core taken
			// on another worker that could run it.
			victims = s.chooseVictimsLocked(k, 1, func(l *lease) bool {
				return l.worker != h.worker && l.stage >= repb.ExecutionStage_EXECUTING && l.worker.canRun(h.task)
			})
			if len(victims) == 0 {
				continue
			}
			s.moveHeldLocked(h)
		}
		s.stopVictimsLocked(victims, reason)
		deficit--
	}
	return deficit
}

// preemptForQueuedLocked stops n actions on workers that could run k's
// queued work (runnable, its buckets).
func (s *Scheduler) preemptForQueuedLocked(k quotaKey, runnable []*bucket, n int, reason string) {
	victims := s.chooseVictimsLocked(k, n, func(l *lease) bool {
		for _, b := range runnable {
			if l.worker.serves(b.instance) && l.worker.matches(b) {
				return true
			}
		}
		return false
	})
	s.stopVictimsLocked(victims, reason)
}

// moveHeldLocked takes back h, an action its worker cannot start, and
// queues it again at the front, kept from that worker until it is leased
// elsewhere (admits): it has not started, so nothing is lost.
func (s *Scheduler) moveHeldLocked(h *lease) {
	reason := fmt.Sprintf("taken back: worker %s cannot start it and nothing running there may be pre-empted; it runs on another worker", h.worker.info.ID)
	s.emit(Event{Kind: EventRequeued, Task: h.task.ID, Worker: h.worker.info.ID, Reason: reason})
	s.noteRetryLocked(h.task, h.worker.info.ID, RetryTakenBack, reason)
	s.takeBackLocked(h, reason)
	s.ten.avoid[h.task] = h.worker
}

// canRun reports whether w could run t at all (instance, queue, platform).
func (w *worker) canRun(t *Task) bool {
	return w.serves(t.Instance) && w.info.Platform.Serves(t.Queue) && len(w.info.Platform.Accepts(t.Req, nil)) == 0
}

// stuckLocked lists, per (instance, cohort), the leases whose action has
// not started and cannot: running actions hold so many of its worker's
// cores that those it needs are not free.
func (s *Scheduler) stuckLocked() map[quotaKey][]*lease {
	busy := map[*worker]int{} // cores held by running actions
	for _, l := range s.leases {
		if !l.preempted && l.stage >= repb.ExecutionStage_EXECUTING && !s.ten.isSuspended(l) {
			busy[l.worker] += leaseCores(l)
		}
	}
	var stuck map[quotaKey][]*lease
	for _, l := range s.leases {
		if l.cohort == "" || l.preempted || l.stage >= repb.ExecutionStage_EXECUTING {
			continue
		}
		if busy[l.worker]+leaseCores(l) > max(l.worker.info.Platform.Cores, 1) {
			if stuck == nil {
				stuck = map[quotaKey][]*lease{}
			}
			k := quotaKey{l.task.Instance, l.cohort}
			stuck[k] = append(stuck[k], l)
		}
	}
	for _, ls := range stuck {
		// Longest held first: the order does not depend on map iteration.
		sort.Slice(ls, func(i, j int) bool {
			return ls[i].started.Before(ls[j].started) || ls[i].started.Equal(ls[j].started) && ls[i].id < ls[j].id
		})
	}
	return stuck
}

// leaseCores is the cores l's action holds on its worker once it runs:
// its min-cores, at least 1, at most the worker's.
func leaseCores(l *lease) int {
	return min(max(l.task.Req.Cores, 1), max(l.worker.info.Platform.Cores, 1))
}

// freeSlotForLocked reports whether a parked poll of the cohort could take
// one of the buckets' work now.
func (s *Scheduler) freeSlotForLocked(cohort string, bs []*bucket) bool {
	for _, wt := range s.waiters {
		if wt.worker.cohort != cohort {
			continue
		}
		for _, b := range bs {
			if head := b.root.next; head != nil && wt.accepts(b, head) {
				return true
			}
		}
	}
	return false
}

// chooseVictimsLocked picks up to n leases on cohort k.cohort, of other
// instances above their min, among those fits accepts (on workers that
// could run the starving instance's work), with the not-started leases of
// such instances on the victims' workers.
func (s *Scheduler) chooseVictimsLocked(k quotaKey, n int, fits func(*lease) bool) []*lease {
	usage := map[string]int{}
	var cands, others []*lease
	for _, l := range s.leases {
		if l.cohort != k.cohort || l.task.Instance == k.instance || l.preempted || s.ten.isSuspended(l) {
			continue
		}
		if fits(l) {
			cands = append(cands, l)
		} else if l.stage < repb.ExecutionStage_EXECUTING {
			others = append(others, l)
		}
		usage[l.task.Instance] = s.ten.usage[quotaKey{l.task.Instance, k.cohort}]
	}
	var out []*lease
	for len(out) < n {
		best := -1
		for i, l := range cands {
			if l == nil {
				continue
			}
			inst := l.task.Instance
			over := usage[inst] - s.ten.min(inst, k.cohort)
			if over <= 0 {
				continue
			}
			if best < 0 {
				best = i
				continue
			}
			b := cands[best]
			bOver := usage[b.task.Instance] - s.ten.min(b.task.Instance, k.cohort)
			lRun, bRun := l.stage >= repb.ExecutionStage_EXECUTING, b.stage >= repb.ExecutionStage_EXECUTING
			switch {
			case over != bOver:
				if over > bOver {
					best = i
				}
			case lRun != bRun:
				// A running action holds a core; one still being
				// prepared does not, so taking it frees nothing.
				if lRun {
					best = i
				}
			case l.started.After(b.started):
				best = i
			}
		}
		if best < 0 {
			break
		}
		l := cands[best]
		cands[best] = nil
		usage[l.task.Instance]--
		out = append(out, l)
		// Actions the victim's worker holds but has not started (waiting
		// for its cores) would take the freed core first: they go too,
		// which costs no work.
		for _, list := range [][]*lease{cands, others} {
			for i, c := range list {
				if c != nil && c.worker == l.worker && c.stage < repb.ExecutionStage_EXECUTING &&
					usage[c.task.Instance] > s.ten.min(c.task.Instance, k.cohort) {
					list[i] = nil
					usage[c.task.Instance]--
					out = append(out, c)
				}
			}
		}
	}
	return out
}

// preemptLeaseLocked takes a running action away from its worker and puts
// it back at the front of its queue, without counting the try.
func (s *Scheduler) preemptLeaseLocked(l *lease, reason string) {
	s.preemptions++
	s.emit(Event{Kind: EventPreempted, Task: l.task.ID, Worker: l.worker.info.ID, Reason: reason})
	s.noteRetryLocked(l.task, l.worker.info.ID, RetryPreempted, reason)
	s.takeBackLocked(l, reason)
}

// takeBackLocked cancels l on its worker and queues its task again at the
// front, without counting the try.
func (s *Scheduler) takeBackLocked(l *lease, reason string) {
	t := l.task
	l.preempted = true
	l.worker.commands = append(l.worker.commands, LeaseCommand{LeaseID: l.id, Kind: CommandCancel, Reason: reason})
	s.dropLeaseLocked(l)
	s.holdCancelledLocked(l)
	t.attempts--
	s.requeueFrontLocked(t)
}
