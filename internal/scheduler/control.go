package scheduler

import (
	"context"
	"fmt"
	"sort"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/grpc/codes"

	"github.com/gantry-build/gantry/internal/digest"
	"github.com/gantry-build/gantry/internal/platform"
)

// WorkerControl is what operators set on a worker. It is kept by worker
// id, so it applies again when the worker registers anew.
type WorkerControl struct {
	// Drain: the worker gets no new work; its running work finishes.
	Drain bool `json:"drain,omitempty"`
	// Pause: its running actions are suspended and it gets no new work.
	Pause bool `json:"pause,omitempty"`
	// Terminate: drained, and the worker process exits once idle.
	Terminate bool `json:"terminate,omitempty"`
}

func (c WorkerControl) holds() bool { return c.Drain || c.Pause || c.Terminate }

// ErrUnknownWorkerID is returned for controls of a worker the scheduler
// does not know.
type ErrUnknownWorkerID struct{ ID string }

func (e ErrUnknownWorkerID) Error() string {
	return fmt.Sprintf("worker %q is not registered with this scheduler; `gantry workers list` shows the registered workers", e.ID)
}

// ControlWorker changes a registered worker's controls with f and returns
// the new ones. Work is offered again to a worker no longer held.
func (s *Scheduler) ControlWorker(id string, f func(*WorkerControl)) (WorkerControl, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w, ok := s.workers[id]
	if !ok {
		return WorkerControl{}, ErrUnknownWorkerID{id}
	}
	if s.controls == nil {
		s.controls = map[string]WorkerControl{}
	}
	c := s.controls[id]
	f(&c)
	if c == (WorkerControl{}) {
		delete(s.controls, id)
	} else {
		s.controls[id] = c
	}
	held := w.hold
	w.hold = c.holds()
	if held && !w.hold {
		s.offerLocked(w)
	}
	return c, nil
}

// WorkerControlOf returns the worker's controls.
func (s *Scheduler) WorkerControlOf(id string) WorkerControl {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.controls[id]
}

// WorkerControls returns the controls that persist across restarts (drain
// and pause; terminate applies to the running worker process only).
func (s *Scheduler) WorkerControls() map[string]WorkerControl {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]WorkerControl{}
	for id, c := range s.controls {
		c.Terminate = false
		if c != (WorkerControl{}) {
			out[id] = c
		}
	}
	return out
}

// RestoreWorkerControls sets stored controls, for workers that register
// later too.
func (s *Scheduler) RestoreWorkerControls(cs map[string]WorkerControl) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.controls == nil {
		s.controls = map[string]WorkerControl{}
	}
	for id, c := range cs {
		s.controls[id] = c
		if w, ok := s.workers[id]; ok {
			w.hold = c.holds()
		}
	}
}

// LeaseStatus describes one running lease.
type LeaseStatus struct {
	LeaseID      string
	TaskID       string
	Operations   []string
	Instance     string
	ActionDigest digest.Digest
	// Stage is QUEUED while the worker holds the lease but has not
	// started the action (fetching inputs, waiting for a core), EXECUTING
	// from the start of execution on.
	Stage   repb.ExecutionStage_Value
	Started time.Time
}

// Executing reports whether the worker started the action; otherwise the
// lease is held: leased, not started yet.
func (l LeaseStatus) Executing() bool { return l.Stage >= repb.ExecutionStage_EXECUTING }

// LeaseCounts splits a worker's leases into held (not started: fetching
// inputs or waiting for a free core) and executing.
type LeaseCounts struct {
	Held, Executing int
}

// Counts counts the worker's leases by whether they started.
func (w WorkerStatus) Counts() LeaseCounts {
	var c LeaseCounts
	for _, l := range w.Leases {
		if l.Executing() {
			c.Executing++
		} else {
			c.Held++
		}
	}
	return c
}

// WorkerStatus is a worker as status pages show it.
type WorkerStatus struct {
	Info     WorkerInfo
	Control  WorkerControl
	LastSeen time.Time
	Cohort   string
	Held     map[string]int64
	// Restored: known only from stored leases since a restart.
	Restored bool
	// Polling: a poll of the worker waits for work right now.
	Polling bool
	Leases  []LeaseStatus
}

// State names what the worker is doing for operators.
func (w WorkerStatus) State() string {
	switch {
	case w.Restored:
		return "reconnecting"
	case w.Control.Pause:
		return "paused"
	case w.Control.Terminate:
		return "terminating"
	case w.Control.Drain && len(w.Leases) > 0:
		return "draining"
	case w.Control.Drain:
		return "drained"
	}
	return "active"
}

// Workers returns the registered workers, by id.
func (s *Scheduler) Workers() []WorkerStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]WorkerStatus, 0, len(s.workers))
	for id, w := range s.workers {
		ws := WorkerStatus{Info: w.info, Control: s.controls[id], LastSeen: w.lastSeen, Cohort: w.cohort, Restored: w.restored, Polling: s.isWaitingLocked(w), Held: map[string]int64{}}
		for k, v := range w.held {
			if v != 0 {
				ws.Held[k] = v
			}
		}
		for _, l := range w.leases {
			ls := LeaseStatus{LeaseID: l.id, TaskID: l.task.ID, Instance: l.task.Instance, ActionDigest: l.task.ActionDigest, Stage: l.stage, Started: l.started}
			for _, op := range l.task.ops {
				if !op.done {
					ls.Operations = append(ls.Operations, op.Name)
				}
			}
			ws.Leases = append(ws.Leases, ls)
		}
		sort.Slice(ws.Leases, func(i, j int) bool { return ws.Leases[i].Started.Before(ws.Leases[j].Started) })
		out = append(out, ws)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Info.ID < out[j].Info.ID })
	return out
}

// QueuedCount is the number of queued actions of one (queue, instance).
type QueuedCount struct {
	Queue, Instance string
	Queued          int
}

// QueueCounts returns the queued actions per provision queue and instance.
func (s *Scheduler) QueueCounts() []QueuedCount {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := map[[2]string]int{}
	for _, q := range s.queues {
		m[[2]string{q.Name, ""}] += 0
	}
	for _, b := range s.queue.buckets {
		if b.n > 0 {
			m[[2]string{b.queue, b.instance}] += b.n
		}
	}
	out := make([]QueuedCount, 0, len(m))
	for k, n := range m {
		if k[1] == "" && n == 0 {
			// A configured queue with nothing queued: shown once.
			found := false
			for k2, n2 := range m {
				if k2[0] == k[0] && k2[1] != "" && n2 > 0 {
					found = true
				}
			}
			if found {
				continue
			}
		}
		out = append(out, QueuedCount{Queue: k[0], Instance: k[1], Queued: n})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Queue != out[j].Queue {
			return out[i].Queue < out[j].Queue
		}
		return out[i].Instance < out[j].Instance
	})
	return out
}

// OperationInfo is one operation in detail, for status pages.
type OperationInfo struct {
	OperationState
	TaskID     string
	Queue      string
	Platform   platform.Properties
	Cores      int
	Priority   int32
	Attempts   int
	Worker     string
	QueuedAt   time.Time
	LeasedAt   time.Time
	DoneAt     time.Time
	Invocation []string
}

func (s *Scheduler) infoLocked(op *Operation) OperationInfo {
	t := op.task
	oi := OperationInfo{OperationState: s.stateLocked(op), TaskID: t.ID, Queue: t.Queue, Platform: t.Platform, Cores: t.Req.Cores,
		Priority: t.priority, Attempts: t.attempts, Worker: t.lastWorker, QueuedAt: t.queuedAt, DoneAt: op.doneAt}
	if t.lease != nil {
		oi.LeasedAt = t.lease.started
	}
	// The path outlives inv, which a finished task lets go.
	oi.Invocation = t.invPath
	return oi
}

// Operation returns an operation the scheduler knows (running or
// finished within the retention).
func (s *Scheduler) Operation(name string) (OperationInfo, error) {
	s.lockFor(name)
	defer s.mu.Unlock()
	op, ok := s.ops[name]
	if !ok {
		return OperationInfo{}, ErrNotFound
	}
	return s.infoLocked(op), nil
}

// Operations returns the unfinished operations, oldest first: total is
// how many there are, and the result holds those from offset on, at most
// limit.
func (s *Scheduler) Operations(offset, limit int) (ops []OperationInfo, total int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.open.page(offset, limit, func(op *Operation) { ops = append(ops, s.infoLocked(op)) })
	return ops, s.open.n
}

// Kill cancels an operation as an operator: its callers get CANCELLED
// with reason. With refuse above zero, new submissions of the same action
// (instance and digest) fail for that long (at most MaxRefusal), also when
// the operation had finished. It reports whether the operation had already
// finished.
func (s *Scheduler) Kill(name, reason string, refuse time.Duration) (alreadyDone bool, err error) {
	s.lockFor(name)
	op, ok := s.ops[name]
	if !ok {
		s.mu.Unlock()
		return false, ErrNotFound
	}
	alreadyDone = op.done
	if refuse > 0 {
		now := s.clock.Now()
		s.refused.add(op.task.dedupKey(), refusal{until: now.Add(min(refuse, MaxRefusal)), reason: reason, op: name}, now)
	}
	err = s.cancelWithLocked(name, "operation killed by an operator: "+reason)
	ticket := s.ticketLocked()
	s.mu.Unlock()
	if err != nil {
		return alreadyDone, err
	}
	return alreadyDone, s.durable(context.Background(), ticket)
}

// FailedOperation is a recently failed operation.
type FailedOperation struct {
	Name         string
	Instance     string
	ActionDigest digest.Digest
	Worker       string
	At           time.Time
	Code         codes.Code
	Message      string
	ExitCode     int32
}

// maxFailures bounds the ring of recent failures.
const maxFailures = 500

// noteFinishedLocked keeps failed operations (an error status or a
// non-zero exit code) in a bounded ring.
func (s *Scheduler) noteFinishedLocked(op *Operation, resp *repb.ExecuteResponse) {
	code := codes.Code(resp.GetStatus().GetCode())
	exit := resp.GetResult().GetExitCode()
	if code == codes.OK && exit == 0 {
		return
	}
	f := FailedOperation{Name: op.Name, Instance: op.task.Instance, ActionDigest: op.task.ActionDigest, Worker: op.task.lastWorker,
		At: s.clock.Now(), Code: code, Message: resp.GetStatus().GetMessage(), ExitCode: exit}
	if len(s.failures) < maxFailures {
		s.failures = append(s.failures, f)
	} else {
		s.failures[s.failNext] = f
	}
	s.failNext = (s.failNext + 1) % maxFailures
}

// Failures returns the recently failed operations, newest first: total
// is how many are kept, the result those from offset on, at most limit.
func (s *Scheduler) Failures(offset, limit int) (fs []FailedOperation, total int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	total = len(s.failures)
	for i := offset; i < total && len(fs) < limit; i++ {
		// The newest is just before failNext.
		j := ((s.failNext-1-i)%maxFailures + maxFailures) % maxFailures
		fs = append(fs, s.failures[j])
	}
	return fs, total
}

// forgetTerminateLocked clears a forgotten worker's terminate control: a
// new process under its id starts (still drained, if it was).
func (s *Scheduler) forgetTerminateLocked(id string) {
	if c, ok := s.controls[id]; ok && c.Terminate {
		c.Terminate = false
		if c == (WorkerControl{}) {
			delete(s.controls, id)
		} else {
			s.controls[id] = c
		}
	}
}
