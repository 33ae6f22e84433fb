package scheduler

import (
	"fmt"
	"sort"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
)

// Pre-emption by suspension. In suspend mode a running victim is not
// killed: its worker stops its process group (SIGSTOP) and lends its cores
// to the work the victim was pre-empted for; the victim keeps its lease,
// its memory and its output so far. It resumes once its worker has a core
// for it again that no instance below its min_quota is waiting for. The
// trade-off: a suspended action's memory (and disk) stays held on the
// worker while it is stopped, which is what keeps its work; an action
// suspended for longer than MaxSuspend is cancelled and queued again as in
// cancel mode, so memory is not held without bound.

// PreemptionMode says how pre-emption stops a victim.
type PreemptionMode string

// Pre-emption modes.
const (
	// PreemptCancel kills the victim and queues it again: its work so
	// far is lost.
	PreemptCancel PreemptionMode = "cancel"
	// PreemptSuspend stops the victim (SIGSTOP) and resumes it later.
	PreemptSuspend PreemptionMode = "suspend"
)

// DefaultMaxSuspend is the default Config.MaxSuspend.
const DefaultMaxSuspend = 10 * time.Minute

func (tn *tenancy) isSuspended(l *lease) bool {
	if len(tn.suspended) == 0 {
		return false
	}
	_, ok := tn.suspended[l]
	return ok
}

// stopVictimsLocked pre-empts victims, those that have not started
// first: their CANCELs reach the worker before a SUSPEND lends a core
// they could take.
func (s *Scheduler) stopVictimsLocked(victims []*lease, reason string) {
	for _, started := range []bool{false, true} {
		for _, l := range victims {
			if (l.stage >= repb.ExecutionStage_EXECUTING) == started {
				s.stopVictimLocked(l, reason)
			}
		}
	}
}

// stopVictimLocked pre-empts l: in suspend mode a running action is
// suspended; anything else (cancel mode, or an action that has not
// started, so that taking it back loses no work) is cancelled and queued
// again.
func (s *Scheduler) stopVictimLocked(l *lease, reason string) {
	if s.ten.mode != PreemptSuspend || l.stage < repb.ExecutionStage_EXECUTING {
		s.preemptLeaseLocked(l, reason)
		return
	}
	s.ten.suspended[l] = s.clock.Now()
	// It holds no core while stopped: it leaves its instance's usage, so
	// that instance may be pre-empted further only for what still runs.
	s.ten.addUsage(l, -1)
	l.worker.commands = append(l.worker.commands, LeaseCommand{LeaseID: l.id, Kind: CommandSuspend, Reason: reason})
	s.preemptions++
	s.emit(Event{Kind: EventPreempted, Task: l.task.ID, Worker: l.worker.info.ID, Reason: reason + " (suspended)"})
	s.noteRetryLocked(l.task, l.worker.info.ID, RetrySuspended, reason)
}

// resumeLocked runs in Tick: it resumes suspended leases whose workers
// have room for them again, longest suspended first, and cancels and
// queues again those suspended for longer than MaxSuspend. It also sends
// RESUME once for each lease restored from the state store, whose
// suspension (if any) was not stored.
func (s *Scheduler) resumeLocked(now time.Time) {
	for l := range s.ten.unsure {
		if !l.worker.restored {
			l.worker.commands = append(l.worker.commands, LeaseCommand{LeaseID: l.id, Kind: CommandResume, Reason: "the scheduler restarted"})
			delete(s.ten.unsure, l)
		}
	}
	if len(s.ten.suspended) == 0 {
		return
	}
	ls := make([]*lease, 0, len(s.ten.suspended))
	for l := range s.ten.suspended {
		ls = append(ls, l)
	}
	sort.Slice(ls, func(i, j int) bool {
		a, b := s.ten.suspended[ls[i]], s.ten.suspended[ls[j]]
		return a.Before(b) || a.Equal(b) && ls[i].id < ls[j].id
	})
	for _, l := range ls {
		since := s.ten.suspended[l]
		if now.Sub(since) >= s.ten.maxSuspend {
			// Still stopped: give up its memory, lose its work.
			s.ten.expired++
			reason := fmt.Sprintf("suspended for pre-emption longer than scheduler.max_suspend (%s): cancelled and queued again", s.ten.maxSuspend)
			s.emit(Event{Kind: EventRequeued, Task: l.task.ID, Worker: l.worker.info.ID, Reason: reason})
			s.noteRetryLocked(l.task, l.worker.info.ID, RetrySuspendExpired, reason)
			s.takeBackLocked(l, reason) // its usage went when it stopped
			continue
		}
		if !s.roomToResumeLocked(l) {
			continue
		}
		delete(s.ten.suspended, l)
		s.ten.addUsage(l, +1)
		l.worker.commands = append(l.worker.commands, LeaseCommand{LeaseID: l.id, Kind: CommandResume, Reason: "its worker has a free core for it again"})
		s.emit(Event{Kind: EventResumed, Task: l.task.ID, Worker: l.worker.info.ID, Reason: fmt.Sprintf("suspended for %s", now.Sub(since))})
	}
}

// roomToResumeLocked reports whether l, suspended, may run again: the
// worker's other leases (running, or taken and about to run) leave its
// cores for it, no instance below its min on the cohort has queued work
// the worker could run, and its own instance is below its max.
func (s *Scheduler) roomToResumeLocked(l *lease) bool {
	w := l.worker
	used := 0
	for _, o := range w.leases {
		if o != l && !o.preempted && !s.ten.isSuspended(o) {
			used += leaseCores(o)
		}
	}
	if used+leaseCores(l) > max(w.info.Platform.Cores, 1) {
		return false
	}
	if s.ten.maxReached(l.task.Instance, l.cohort) {
		return false
	}
	for _, b := range s.queue.buckets {
		if b.n > 0 && s.ten.belowMin(b.instance, w.cohort) && w.serves(b.instance) && w.matches(b) {
			return false
		}
	}
	return true
}

// admits reports whether w may take t of instance: not if t was moved
// off w (moveHeldLocked); while w holds a
// suspended lease, it takes work only of instances below their min on its
// cohort (the work it was suspended for), or work its cores have room
// for besides every lease it holds, suspended ones included. So the cores
// a suspended action lent are not given away to others, and it can
// resume once the work it made room for is done.
func (tn *tenancy) admits(w *worker, instance string, t *Task) bool {
	if len(tn.avoid) > 0 && tn.avoid[t] == w {
		return false
	}
	if len(tn.suspended) == 0 || w.cohort == "" {
		return true
	}
	used, stopped := 0, false
	for _, l := range w.leases {
		used += leaseCores(l)
		stopped = stopped || tn.isSuspended(l)
	}
	if !stopped || tn.belowMin(instance, w.cohort) {
		return true
	}
	cores := max(w.info.Platform.Cores, 1)
	return used+min(max(t.Req.Cores, 1), cores) <= cores
}

// addUsage adds delta to l's instance's usage on its cohort.
func (tn *tenancy) addUsage(l *lease, delta int) {
	if l.cohort == "" {
		return
	}
	k := quotaKey{l.task.Instance, l.cohort}
	tn.usage[k] += delta
	if tn.usage[k] <= 0 {
		delete(tn.usage, k)
	}
}

// restoredLease records a lease restored from the state store.
func (tn *tenancy) restoredLease(l *lease) { tn.unsure[l] = true }
