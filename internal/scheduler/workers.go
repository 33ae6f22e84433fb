package scheduler

import (
	"context"
	"fmt"
	"strings"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/grpc/codes"

	"github.com/gantry-build/gantry/internal/platform"
)

// WorkerInfo is what a worker registers.
type WorkerInfo struct {
	ID string
	// Platform is what the worker offers: labels, capacities, wrappers
	// and queues. Platform.Name is the worker's public name (its ID).
	Platform platform.Worker
	Slots    int
	Version  string
	// Instances are the instance names the worker serves; empty or "*"
	// serves every instance (instance-agnostic).
	Instances []string
}

type worker struct {
	info     WorkerInfo
	lastSeen time.Time
	leases   map[string]*lease
	commands []LeaseCommand
	// held are the resource:NAME amounts its leases hold.
	held map[string]int64
	// cancelled are the resources of leases the scheduler cancelled, by
	// lease id: they stay in held until the worker stops running them.
	cancelled map[string]map[string]int64
	// matchCache remembers per bucket whether the worker could take the
	// bucket's actions at all (labels, totals, pin, wrappers, queue).
	matchCache map[string]bool
	// inv is the invocation of the worker's last task (nil: none yet, the
	// root), for locality and stickiness.
	inv *inode
	// warm are the persistentWorkerKeys it ran lately (warm.go).
	warm warmKeys
	// cohort is the worker's cohort ("" for none); ten the quota state.
	cohort string
	ten    *tenancy
	// restored marks a worker known only from stored leases after a
	// restart: it must register again before it gets work.
	restored bool
	// hold: an operator drained, paused or is terminating the worker; it
	// gets no new work (control.go).
	hold bool
	// sessions counts the worker's open session streams; detachedAt is
	// when the last one ended (zero while one is open, or none ever was).
	// See recovery.go.
	sessions   int
	detachedAt time.Time
	// sizeClass is its size class's position plus one (0: none;
	// sizeclassplace.go).
	sizeClass int
}

// serves reports whether the worker takes work of instance.
func (w *worker) serves(instance string) bool {
	if len(w.info.Instances) == 0 {
		return true
	}
	for _, i := range w.info.Instances {
		if i == "*" || i == instance {
			return true
		}
	}
	return false
}

func (w *worker) matches(b *bucket) bool {
	ok, known := w.matchCache[b.key]
	if !known {
		ok = w.info.Platform.Serves(b.queue) && len(w.info.Platform.Accepts(b.req, nil)) == 0
		w.matchCache[b.key] = ok
	}
	return ok
}

// fits reports whether the worker has the capacity for r free now:
// freeCores is what the worker reported, resources what its leases leave.
func (w *worker) fits(r platform.Request, freeCores int) bool {
	if r.Cores > max(freeCores, 1) {
		return false
	}
	for name, n := range r.Resources {
		if n > w.info.Platform.Resources[name]-w.held[name] {
			return false
		}
	}
	return true
}

// Capacity is what a polling worker has free.
type Capacity struct {
	Cores int
}

type waiter struct {
	worker *worker
	free   Capacity
	ch     chan *Assignment
	// leasedAt is when the lease on ch was made (handoff.go).
	leasedAt time.Time
}

// Assignment is a leased task handed to a worker.
type Assignment struct {
	LeaseID string
	Task    *Task
	Attempt int
	// ActionBytes and CommandBytes are the task's, taken when it was
	// leased: a finished task lets go of its own.
	ActionBytes, CommandBytes []byte
	// fromStore: the task had let go of them, to be read back from the
	// store as the lease is handed over (actionstore.go).
	fromStore bool
	// Timeout is a learned timeout for this run, shorter than the
	// action's own (learnedtimeout.go); 0: the action's own applies.
	Timeout time.Duration
}

// CommandKind is an instruction for a running lease.
type CommandKind int

// Commands sent to workers in heartbeat responses.
const (
	CommandCancel CommandKind = iota + 1
	CommandSuspend
	CommandResume
)

// LeaseCommand tells a worker to act on one of its leases.
type LeaseCommand struct {
	LeaseID string
	Kind    CommandKind
	Reason  string
}

// ErrUnknownWorker means the worker must register (again).
var ErrUnknownWorker error = &Error{Kind: ErrRefused, Msg: "worker is not registered with this scheduler; register again"}

// RegisterWorker adds or replaces a worker. Leases of a previous
// incarnation with the same id stay until they time out or are reported
// (RegisterWorkerHolding requeues them at once).
func (s *Scheduler) RegisterWorker(info WorkerInfo) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.registerLocked(info)
}

// registerLocked adds or replaces a worker and returns it.
func (s *Scheduler) registerLocked(info WorkerInfo) *worker {
	now := s.clock.Now()
	info.Platform.Name = info.ID
	info.Platform.Properties.Sort()
	cls := s.classifyLocked(&info)
	s.seen[info.ID] = seenWorker{platform: info.Platform, at: now}
	cohort := s.ten.cohortOf(info.Platform.Properties)
	if w, ok := s.workers[info.ID]; ok {
		w.info = info
		w.lastSeen = now
		w.matchCache = map[string]bool{}
		w.cohort = cohort
		w.restored = false
		w.hold = s.controls[info.ID].holds()
		s.countClassLocked(w, cls)
		return w
	}
	w := &worker{info: info, lastSeen: now, leases: map[string]*lease{}, held: map[string]int64{}, cancelled: map[string]map[string]int64{}, matchCache: map[string]bool{},
		cohort: cohort, ten: s.ten, hold: s.controls[info.ID].holds()}
	s.workers[info.ID] = w
	s.countClassLocked(w, cls)
	s.emit(Event{Kind: EventWorkerAdded, Worker: info.ID})
	return w
}

// Poll leases the best task the worker can take, waiting until ctx ends
// if there is none.
func (s *Scheduler) Poll(ctx context.Context, workerID string, free Capacity) (*Assignment, error) {
	as, err := s.PollMany(ctx, PollRequest{WorkerID: workerID, Free: free, Limit: 1})
	if len(as) == 0 {
		return nil, err
	}
	return as[0], err
}

// PollMany is Poll for a worker with room for several actions. It waits
// for the first task as Poll does; then it leases, without waiting, the
// best queued tasks that fit in what the earlier ones leave of
// req.Free, up to req.Limit tasks in all. It returns no assignments when
// the wait ended with no work.
func (s *Scheduler) PollMany(ctx context.Context, req PollRequest) ([]*Assignment, error) {
	workerID, free, limit := req.WorkerID, req.Free, max(req.Limit, 1)
	arrived := time.Now()
	s.mu.Lock()
	locked := time.Now()
	w, ok := s.workers[workerID]
	if !ok || w.restored {
		s.mu.Unlock()
		return nil, ErrUnknownWorker
	}
	w.lastSeen = s.clock.Now()
	probe := waiter{worker: w, free: free}
	t := s.queue.pick(w.inv, w.lastSeen, &probe)
	if t != nil {
		s.queue.take(t)
		as := s.leaseMoreLocked(w, free, limit, s.leaseLocked(t, w, nil))
		if s.jr.closedLocked() {
			s.giveBackLocked(w, as)
			s.mu.Unlock()
			return nil, ErrHalted
		}
		held := time.Since(locked)
		s.mu.Unlock()
		return s.handOff(ctx, as, arrived, held)
	}
	wt := &waiter{worker: w, free: free, ch: make(chan *Assignment, 1)}
	s.waiters = append(s.waiters, wt)
	// Changes this worker made just before (Complete's results) are
	// stored while it waits: nothing else may start storing them soon.
	if s.jr.dirty() {
		s.ticketLocked()
	}
	s.mu.Unlock()

	select {
	case a := <-wt.ch:
		s.mu.Lock()
		locked := time.Now()
		as := []*Assignment{a}
		if limit > 1 {
			as = s.leaseMoreLocked(w, free, limit, a)
		}
		if s.jr.closedLocked() {
			s.giveBackLocked(w, as)
			s.mu.Unlock()
			return nil, ErrHalted
		}
		held := time.Since(locked)
		s.mu.Unlock()
		return s.handOff(ctx, as, wt.leasedAt, held)
	case <-ctx.Done():
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, x := range s.waiters {
		if x == wt {
			s.waiters = append(s.waiters[:i], s.waiters[i+1:]...)
			return nil, nil
		}
	}
	// A task was handed over as the wait ended: the caller can no longer
	// deliver it, so give it back.
	s.giveBackLocked(w, []*Assignment{<-wt.ch})
	return nil, nil
}

// giveBackLocked undoes leases made for w that w will never hear of:
// their tasks go back to the front of the queue.
func (s *Scheduler) giveBackLocked(w *worker, as []*Assignment) {
	for _, a := range as {
		if l := s.leases[a.LeaseID]; l != nil {
			t := l.task
			s.dropLeaseLocked(l)
			t.attempts--
			s.requeueFrontLocked(t)
		} else if _, held := w.cancelled[a.LeaseID]; held {
			// Cancelled meanwhile: its resources wait for the worker to
			// stop running it, but the worker never got it.
			s.releaseCancelledLocked(w, a.LeaseID)
			s.offerLocked(w)
		}
	}
}

// waitDurable waits (bounded) for a change whose caller cannot be told
// about a storage failure; the failure is recorded as an event.
func (s *Scheduler) waitDurable(ticket uint64) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.durable(ctx, ticket); err != nil {
		s.mu.Lock()
		s.emit(Event{Kind: EventStoreFailed, Reason: err.Error()})
		s.mu.Unlock()
	}
}

// leaseMoreLocked adds to first, just leased to w, the best queued tasks
// that fit in what the leased ones leave of free, up to limit in all.
func (s *Scheduler) leaseMoreLocked(w *worker, free Capacity, limit int, first *Assignment) []*Assignment {
	as := []*Assignment{first}
	free.Cores -= max(first.Task.Req.Cores, 1)
	for len(as) < limit && free.Cores > 0 {
		wt := waiter{worker: w, free: free}
		t := s.queue.pick(w.inv, s.clock.Now(), &wt)
		if t == nil {
			break
		}
		s.queue.take(t)
		as = append(as, s.leaseLocked(t, w, nil))
		free.Cores -= max(t.Req.Cores, 1)
	}
	return as
}

// leaseLocked gives t to w. With a waiter, the assignment goes on its channel.
func (s *Scheduler) leaseLocked(t *Task, w *worker, wt *waiter) *Assignment {
	return s.leaseWithIDLocked(t, w, wt, s.leaseIDFor(t))
}

// leaseWithIDLocked is leaseLocked with the lease's id (a new one, or
// one a worker reported: reconcile.go).
func (s *Scheduler) leaseWithIDLocked(t *Task, w *worker, wt *waiter, id string) *Assignment {
	now := s.clock.Now()
	l := &lease{id: id, worker: w, task: t, lastSeen: now, stage: repb.ExecutionStage_QUEUED, cohort: w.cohort, started: now}
	s.leaseUsageLocked(l, +1)
	t.state = stateLeased
	t.lease = l
	t.attempts++
	if t.attempts == 1 {
		s.counters.dispatch.observe(now.Sub(t.queuedAt))
	}
	s.touchTask(t)
	t.lastWorker = w.info.ID
	w.warm.note(persistentKey(t.Req), now)
	s.leases[l.id] = l
	w.leases[l.id] = l
	for name, n := range t.Req.Resources {
		w.held[name] += n
	}
	s.fair.started(t.inv, +1, now)
	if w.inv != t.inv {
		s.fair.ref(t.inv)
		if w.inv != nil {
			s.fair.unref(w.inv)
		}
		w.inv = t.inv
	}
	a := &Assignment{LeaseID: l.id, Task: t, Attempt: t.attempts, ActionBytes: t.ActionBytes, CommandBytes: t.CommandBytes,
		fromStore: t.actionInStore, Timeout: s.leaseTimeoutLocked(t)}
	s.emit(Event{Kind: EventLeased, Task: t.ID, Worker: w.info.ID})
	if wt != nil {
		wt.leasedAt = time.Now()
		wt.ch <- a
	}
	return a
}

func (s *Scheduler) dropLeaseLocked(l *lease) {
	s.leaseUsageLocked(l, -1)
	delete(s.leases, l.id)
	delete(l.worker.leases, l.id)
	for name, n := range l.task.Req.Resources {
		l.worker.held[name] -= n
	}
	if l.task.inv != nil {
		s.fair.started(l.task.inv, -1, time.Time{})
	}
	if l.task.lease == l {
		l.task.lease = nil
	}
}

// requeueFrontLocked puts a task back ahead of everything of its priority.
func (s *Scheduler) requeueFrontLocked(t *Task) {
	s.frontSeq--
	t.seq = s.frontSeq
	s.enqueueLocked(t)
	s.notifyTaskLocked(t)
}

// LeaseReport is a worker's view of one of its leases.
type LeaseReport struct {
	LeaseID string
	Stage   repb.ExecutionStage_Value
}

// Heartbeat refreshes a worker and the leases it reports, and returns the
// commands for it: CANCEL for leases it reports that are no longer its own.
func (s *Scheduler) Heartbeat(workerID string, reports []LeaseReport) ([]LeaseCommand, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w, ok := s.workers[workerID]
	if !ok {
		return nil, ErrUnknownWorker
	}
	now := s.clock.Now()
	w.lastSeen = now
	if w.restored {
		// After a restart: the leases it reports are its own and stay;
		// it registers again to get work.
		for _, r := range reports {
			if l, ok := w.leases[r.LeaseID]; ok {
				l.lastSeen = now
			}
		}
		return nil, ErrUnknownWorker
	}
	cmds := w.commands
	w.commands = nil
	pending := make(map[string]bool, len(cmds))
	for _, c := range cmds {
		pending[c.LeaseID] = true
	}
	reported := make(map[string]bool, len(reports))
	for _, r := range reports {
		reported[r.LeaseID] = true
		l, ok := w.leases[r.LeaseID]
		if !ok {
			l = s.adoptLocked(w, r.LeaseID)
			ok = l != nil
		}
		if !ok {
			if pending[r.LeaseID] {
				continue
			}
			cmds = append(cmds, LeaseCommand{LeaseID: r.LeaseID, Kind: CommandCancel, Reason: "lease is no longer valid (it timed out or the operation was cancelled)"})
			continue
		}
		l.lastSeen = now
		if r.Stage > l.stage {
			l.stage = r.Stage
			if l.task.stage != r.Stage {
				l.task.stage = r.Stage
				s.notifyTaskLocked(l.task)
			}
		}
	}
	freed := false
	for id := range w.cancelled {
		if !reported[id] {
			s.releaseCancelledLocked(w, id)
			freed = true
		}
	}
	if freed {
		s.offerLocked(w)
	}
	return cmds, nil
}

// holdCancelledLocked keeps the resources of a lease the scheduler just
// dropped held until the worker, told to cancel it, stops running it.
func (s *Scheduler) holdCancelledLocked(l *lease) {
	if len(l.task.Req.Resources) == 0 {
		return
	}
	for name, n := range l.task.Req.Resources {
		l.worker.held[name] += n
	}
	l.worker.cancelled[l.id] = l.task.Req.Resources
}

func (s *Scheduler) releaseCancelledLocked(w *worker, leaseID string) {
	for name, n := range w.cancelled[leaseID] {
		w.held[name] -= n
	}
	delete(w.cancelled, leaseID)
}

// offerLocked hands queued work to the worker's parked polls, after
// resources its leases held were freed: work that did not fit when the
// polls started may fit now.
func (s *Scheduler) offerLocked(w *worker) {
	for i := 0; i < len(s.waiters); {
		wt := s.waiters[i]
		if wt.worker != w {
			i++
			continue
		}
		t := s.queue.pick(w.inv, s.clock.Now(), wt)
		if t == nil {
			i++
			continue
		}
		s.waiters = append(s.waiters[:i], s.waiters[i+1:]...)
		s.queue.take(t)
		s.leaseLocked(t, w, wt)
	}
}

// Tick runs the timers: leases whose worker stopped reporting go back on
// the queue (or fail after MaxAttempts), tasks nobody waits for are
// cancelled, silent workers are forgotten and old operations dropped.
func (s *Scheduler) Tick() {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	s.loseDetachedLocked(now)
	s.endReconcilingLocked(now)
	timedOut := map[*worker][]*lease{}
	for _, l := range s.leases {
		if now.Sub(l.lastSeen) > s.cfg.HeartbeatTimeout {
			timedOut[l.worker] = append(timedOut[l.worker], l)
		}
	}
	for w, ls := range timedOut {
		s.loseLeasesLocked(w, ls, fmt.Sprintf("no heartbeat reported them for %s", s.cfg.HeartbeatTimeout))
	}
	for id, w := range s.workers {
		if len(w.leases) == 0 && now.Sub(w.lastSeen) > s.cfg.HeartbeatTimeout && !s.isWaitingLocked(w) {
			delete(s.workers, id)
			s.uncountClassLocked(w)
			s.forgetTerminateLocked(id)
			if w.inv != nil {
				s.fair.unref(w.inv)
			}
			// Remember it as seen when it was last heard from, not when
			// it registered, so "recently seen" counts from then.
			s.seen[id] = seenWorker{platform: w.info.Platform, at: w.lastSeen}
		}
	}
	for id, sw := range s.seen {
		if _, live := s.workers[id]; !live && now.Sub(sw.at) > s.cfg.UnsatisfiableWait {
			delete(s.seen, id)
		}
	}
	s.rehomeLocked()
	s.failUnsatisfiableLocked(now)
	s.resumeLocked(now)
	s.preemptLocked(now)
	s.ticketLocked() // start storing what the timers changed
	// Only operations nobody watches can be abandoned: Tick looks at those,
	// not at every operation.
	for op, next := s.unwatched.head, (*Operation)(nil); op != nil; op = next {
		next = op.uwNext
		if now.Sub(op.goneSince) > s.cfg.CallerGrace {
			s.finishOpLocked(op, &repb.ExecuteResponse{Status: resultStatus(codes.Canceled, fmt.Sprintf("no client waited for the operation for %s", s.cfg.CallerGrace))})
			if allDone(op.task) {
				s.abandonTaskLocked(op.task, "no client is waiting for the result")
			}
		}
	}
	// Finished operations leave in the order they finished.
	for len(s.finished) > 0 && now.Sub(s.finished[0].doneAt) > s.cfg.Retention {
		op := s.finished[0]
		s.finished[0] = nil
		s.finished = s.finished[1:]
		if s.ops[op.Name] == op {
			delete(s.ops, op.Name)
			s.touchOp(op)
		}
		s.dropOpFromTaskLocked(op)
	}
}

func allDone(t *Task) bool {
	for _, op := range t.ops {
		if !op.done {
			return false
		}
	}
	return true
}

func (s *Scheduler) dropOpFromTaskLocked(op *Operation) {
	t := op.task
	for i, o := range t.ops {
		if o == op {
			t.ops = append(t.ops[:i], t.ops[i+1:]...)
			break
		}
	}
}

func (s *Scheduler) isWaitingLocked(w *worker) bool {
	for _, x := range s.waiters {
		if x.worker == w {
			return true
		}
	}
	return false
}

// Run calls Tick every interval until ctx ends. Then it ends the workers'
// sessions: without the timers their ends would go unheeded anyway.
func (s *Scheduler) Run(ctx context.Context, interval time.Duration) {
	s.startRestoredLeaseClocks()
	tk := time.NewTicker(interval)
	defer tk.Stop()
	defer s.halt()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tk.C:
			s.Tick()
		}
	}
}

// failUnsatisfiableLocked fails queued tasks that have waited longer than
// UnsatisfiableWait for a worker that no registered or recently seen
// worker could ever be, naming the closest worker and what kept it out.
func (s *Scheduler) failUnsatisfiableLocked(now time.Time) {
	notBefore := s.started.Add(s.cfg.StartupGrace)
	if now.Before(notBefore.Add(s.cfg.UnsatisfiableWait)) {
		return
	}
	for _, b := range s.queue.buckets {
		var old []*Task
		b.each(func(t *Task) {
			if now.Sub(t.queuedAt) > s.cfg.UnsatisfiableWait {
				old = append(old, t)
			}
		})
		if len(old) == 0 {
			continue
		}
		verdicts := s.explainWorkersLocked(b.queue, b.req)
		if len(verdicts) > 0 && len(verdicts[0].Reasons) == 0 {
			continue // some worker could run it: keep waiting
		}
		msg := fmt.Sprintf("no worker can run this action (queue %q, platform {%s}) and none appeared in %s; ", b.queue, b.req.Properties, s.cfg.UnsatisfiableWait)
		if len(verdicts) == 0 {
			msg += "no workers are registered"
		} else {
			rs := make([]string, len(verdicts[0].Reasons))
			for i, r := range verdicts[0].Reasons {
				rs[i] = r.String()
			}
			msg += fmt.Sprintf("the closest worker, %s, is kept out by: %s", verdicts[0].Worker, strings.Join(rs, "; "))
		}
		for _, t := range old {
			s.queue.remove(t)
			s.completeTaskLocked(t, &repb.ExecuteResponse{Status: resultStatus(codes.FailedPrecondition, msg)})
			s.emit(Event{Kind: EventGaveUp, Task: t.ID, Reason: msg})
			s.counters.gaveUp++
		}
	}
}
