package scheduler

import (
	"errors"
	"sort"
	"time"

	"github.com/gantry-build/gantry/internal/platform"
)

// QueuedAnalysis says why a queued operation has not started: where it
// waits, what is ahead of it, its instance's quotas, and which workers
// could run it (and are busy) or cannot (and why).
type QueuedAnalysis struct {
	Queue    string
	Instance string
	Priority int32
	Request  platform.Request
	QueuedAt time.Time
	// Ahead counts the actions of the same queue, instance and platform
	// that are dispatched before it (higher priority, or queued earlier);
	// Waiting all of those queued, itself included.
	Ahead, Waiting int
	// Levels are its invocation path from the root: at each level the
	// invocation's queued and executing actions and how many sibling
	// invocations have queued work (they share the workers fairly).
	Levels []InvocationLevel
	// Quotas are its instance's quotas, one per cohort that has one.
	Quotas []QuotaStatus
	// Able are the workers that could run it, with what they run now;
	// Unable those that cannot, closest first, with the reasons.
	Able   []WorkerLoad
	Unable []WorkerVerdict
	// FailsAt is when it fails as unsatisfiable, if no worker can run it
	// by then (zero while some worker could).
	FailsAt time.Time
}

// InvocationLevel is one level of a queued operation's invocation path.
type InvocationLevel struct {
	Key               string
	Queued, Executing int
	// Siblings counts the other invocations at this level with queued
	// work.
	Siblings int
}

// WorkerLoad is a worker that could run an action and what holds it.
type WorkerLoad struct {
	Worker string
	State  string
	// Running counts its leases; Slots how many it takes at once.
	Running, Slots int
	Polling        bool
}

// ErrNotQueued is WhyQueued's answer for an operation that is not
// waiting in a queue (running, finished or unknown).
var ErrNotQueued = errors.New("operation is not queued")

// WhyQueued analyses a queued operation.
func (s *Scheduler) WhyQueued(name string) (QueuedAnalysis, error) {
	s.lockFor(name)
	defer s.mu.Unlock()
	op, ok := s.ops[name]
	if !ok {
		return QueuedAnalysis{}, ErrNotFound
	}
	t := op.task
	if op.done || t.state != stateQueued {
		return QueuedAnalysis{}, ErrNotQueued
	}
	a := QueuedAnalysis{Queue: t.Queue, Instance: t.Instance, Priority: t.priority, Request: t.Req, QueuedAt: t.queuedAt}
	if b := s.queue.buckets[t.bucketKey]; b != nil {
		b.each(func(o *Task) {
			a.Waiting++
			if (taskHeap{}).lessThan(o, t) {
				a.Ahead++
			}
		})
	}
	for n := t.inv; n != nil && n.parent != nil; n = n.parent {
		lv := InvocationLevel{Key: n.key, Queued: n.queued, Executing: n.executing}
		for _, sib := range n.parent.children {
			if sib != n && sib.queued > 0 {
				lv.Siblings++
			}
		}
		a.Levels = append([]InvocationLevel{lv}, a.Levels...)
	}
	for k := range s.ten.quotas {
		if k.instance == t.Instance {
			a.Quotas = append(a.Quotas, s.quotaStatusLocked(k))
		}
	}
	sort.Slice(a.Quotas, func(i, j int) bool { return a.Quotas[i].Cohort < a.Quotas[j].Cohort })
	a.Able, a.Unable = s.workerVerdictsLocked(t)
	if !s.someWorkerMatchesLocked(t.Queue, t.Req) && s.cfg.UnsatisfiableWait > 0 {
		a.FailsAt = t.queuedAt.Add(s.cfg.UnsatisfiableWait)
		if earliest := s.started.Add(s.cfg.StartupGrace + s.cfg.UnsatisfiableWait); a.FailsAt.Before(earliest) {
			a.FailsAt = earliest
		}
	}
	return a, nil
}

// standingSteps are the feasibility chain's steps whose answer does not
// depend on what a worker has free this moment. The capacity step does:
// a worker that could run the task but is busy is shown with its load
// instead.
func (s *Scheduler) standingSteps() [5]explainingStep {
	return [...]explainingStep{controlStep{s.controls}, platformStep{}, instanceStep{}, quotaStep{}, preemptionStep{}}
}

// refusalsLocked words, through the steps themselves, every standing
// step that refuses registered worker w the queued task t (none: it
// could run t once it has room).
func (s *Scheduler) refusalsLocked(w *worker, t *Task) []platform.Reason {
	b := s.queue.buckets[t.bucketKey]
	if b == nil {
		return nil
	}
	wt := &waiter{worker: w, free: Capacity{Cores: w.info.Platform.Cores}}
	var out []platform.Reason
	for _, st := range s.standingSteps() {
		if st.check(wt, b, t) != feasible {
			out = append(out, st.reasons(wt, b, t)...)
		}
	}
	return out
}

// workerVerdictsLocked splits the registered and recently seen workers
// into those that could run the queued task t (with their load) and
// those that cannot, closest first, with the reasons. A worker gone or
// reconnecting after a restart is judged by its platform alone: the
// other steps need it registered.
func (s *Scheduler) workerVerdictsLocked(t *Task) (able []WorkerLoad, unable []WorkerVerdict) {
	var verdicts []WorkerVerdict
	for id, sw := range s.seen {
		v := WorkerVerdict{Worker: id}
		if w := s.workers[id]; w != nil && !w.restored {
			v.Reasons = s.refusalsLocked(w, t)
		} else {
			v.Reasons = platformReasons(sw.platform, t.Queue, t.Req)
		}
		verdicts = append(verdicts, v)
	}
	sortVerdicts(verdicts)
	for _, v := range verdicts {
		if len(v.Reasons) > 0 {
			unable = append(unable, v)
			continue
		}
		able = append(able, s.workerLoadLocked(v.Worker))
	}
	return able, unable
}

// workerLoadLocked says what holds a worker that could run an action.
func (s *Scheduler) workerLoadLocked(id string) WorkerLoad {
	wl := WorkerLoad{Worker: id, State: "gone"}
	if w := s.workers[id]; w != nil {
		ws := WorkerStatus{Control: s.controls[id], Restored: w.restored, Polling: s.isWaitingLocked(w)}
		for range w.leases {
			ws.Leases = append(ws.Leases, LeaseStatus{})
		}
		wl.State, wl.Running, wl.Slots, wl.Polling = ws.State(), len(w.leases), w.info.Slots, ws.Polling
	}
	return wl
}

// someWorkerMatchesLocked reports whether a registered or recently seen
// worker's platform could run an action of queue with request r: while
// one could, the action waits (failUnsatisfiableLocked).
func (s *Scheduler) someWorkerMatchesLocked(queue string, r platform.Request) bool {
	verdicts := s.explainWorkersLocked(queue, r)
	return len(verdicts) > 0 && len(verdicts[0].Reasons) == 0
}
