package scheduler

import (
	"context"
	"fmt"
	"sort"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/protobuf/proto"

	"github.com/gantry-build/gantry/internal/digest"
	"github.com/gantry-build/gantry/internal/platform"
	"github.com/gantry-build/gantry/internal/statestore"
)

// Restoring rebuilds the scheduler from its store (Attach), in steps:
// the unfinished tasks in their queue order, each queued again or leased
// to its worker (restored until it reconnects); the operations, each
// joined to its task or kept finished; and the tasks no operation waits
// for any more are dropped.

// restoreLocked rebuilds the scheduler's state from store.
func (s *Scheduler) restoreLocked(ctx context.Context, store statestore.Store) (dropped []*Task, err error) {
	now := s.clock.Now()
	tasks, err := loadTasks(ctx, store)
	if err != nil {
		return nil, fmt.Errorf("loading scheduler state: %w", err)
	}
	byID := map[string]*Task{}
	for _, r := range tasks {
		t, err := s.restoreTaskLocked(r, now)
		if err != nil {
			return nil, err
		}
		byID[t.ID] = t
	}
	metas, err := loadOpMetas(ctx, store)
	if err != nil {
		return nil, fmt.Errorf("loading scheduler state: %w", err)
	}
	if err := s.restoreOpsLocked(ctx, store, byID, metas, now); err != nil {
		return nil, fmt.Errorf("loading scheduler state: %w", err)
	}
	return s.dropUnwaitedLocked(byID), nil
}

// storedTask is an unfinished task as stored: its record and its latest
// state.
type storedTask struct {
	taskRecord
	taskStateRecord
}

// loadTasks reads the stored tasks in their original queue order. A
// task record without a state record was written by a flush cut short
// (never acknowledged) and is skipped.
func loadTasks(ctx context.Context, store statestore.Store) ([]*storedTask, error) {
	states := map[string]*taskStateRecord{}
	err := store.Load(ctx, kindTaskState, func(key string, value []byte) error {
		st := &taskStateRecord{}
		if err := st.unmarshal(value); err != nil {
			return fmt.Errorf("task state record %s: %w", key, err)
		}
		states[key] = st
		return nil
	})
	if err != nil {
		return nil, err
	}
	var tasks []*storedTask
	err = store.Load(ctx, kindTask, func(key string, value []byte) error {
		r := &storedTask{}
		if err := r.taskRecord.unmarshal(value); err != nil {
			return fmt.Errorf("task record %s: %w", key, err)
		}
		st := states[key]
		if st == nil {
			return nil
		}
		r.taskStateRecord = *st
		tasks = append(tasks, r)
		return nil
	})
	if err != nil {
		return nil, err
	}
	sort.Slice(tasks, func(i, j int) bool { return tasks[i].Seq < tasks[j].Seq })
	return tasks, nil
}

// restoreTaskLocked rebuilds the stored task r and puts it back where it
// was: in the in-flight index, and queued or leased.
func (s *Scheduler) restoreTaskLocked(r *storedTask, now time.Time) (*Task, error) {
	preq, err := platform.ParseRequest(r.Platform)
	if err != nil {
		return nil, fmt.Errorf("task record %s: %w", r.ID, err)
	}
	d := digest.Digest{Function: digest.Function(r.Function), Hash: r.Hash, Size: r.Size}
	t := &Task{ID: r.ID, Instance: r.Instance, ActionDigest: d, Platform: r.Platform, ActionBytes: r.Action, CommandBytes: r.Command,
		Cacheable: r.Cacheable, Queue: r.Queue, Req: preq, bucketKey: r.Queue + "\x00" + r.Instance + "\x00" + r.Platform.Key(),
		priority: r.Priority, seq: r.Seq, heapIndex: -1, attempts: r.Attempts, queuedAt: r.QueuedAt,
		dedupKey: dedupKey{r.Instance, d}, inv: s.fair.node(r.Invocation), invPath: r.Invocation, stored: true,
		retries: r.Retries, lastWorker: r.LastWorker}
	s.nextSeq = max(s.nextSeq, t.seq)
	s.frontSeq = min(s.frontSeq, t.seq)
	if t.Cacheable && s.inflightLocked(t.dedupKey) == nil {
		fp := t.dedupKey.fingerprint()
		t.dedupNext = s.inflight[fp]
		s.inflight[fp] = t
	}
	if r.Lease == "" {
		t.state, t.stage = stateQueued, repb.ExecutionStage_QUEUED
		s.queue.push(t, now)
		return t, nil
	}
	s.restoreLeaseLocked(t, r.Lease, r.Worker, now)
	return t, nil
}

// restoreLeaseLocked gives t back its lease id on worker workerID. The
// lease stays while its worker reconnects and reports it; a worker known
// only from its leases is marked restored until it registers again.
func (s *Scheduler) restoreLeaseLocked(t *Task, id, workerID string, now time.Time) {
	w := s.workers[workerID]
	if w == nil {
		w = &worker{info: WorkerInfo{ID: workerID}, lastSeen: now, leases: map[string]*lease{}, held: map[string]int64{},
			cancelled: map[string]map[string]int64{}, matchCache: map[string]bool{}, ten: s.ten, restored: true}
		s.workers[workerID] = w
	}
	l := &lease{id: id, worker: w, task: t, lastSeen: now, stage: repb.ExecutionStage_QUEUED, started: now}
	t.state, t.stage, t.lease = stateLeased, repb.ExecutionStage_EXECUTING, l
	s.leases[l.id] = l
	w.leases[l.id] = l
	s.ten.restoredLease(l)
	s.fair.started(t.inv, +1, now)
}

// loadOpMetas reads the callers' RequestMetadata, by operation name.
func loadOpMetas(ctx context.Context, store statestore.Store) (map[string]*repb.RequestMetadata, error) {
	metas := map[string]*repb.RequestMetadata{}
	err := store.Load(ctx, kindOpMeta, func(name string, value []byte) error {
		md := &repb.RequestMetadata{}
		if err := proto.Unmarshal(value, md); err != nil {
			return fmt.Errorf("operation metadata record %s: %w", name, err)
		}
		metas[name] = md
		return nil
	})
	return metas, err
}

// restoreOpsLocked reads the stored operations: an unfinished one joins
// its task (byID) and is unwatched until a caller follows it again; a
// finished one is kept, oldest first, until retention ends. Finished
// operations that do not say whose they are (an older Gantry) are
// dropped with a warning.
func (s *Scheduler) restoreOpsLocked(ctx context.Context, store statestore.Store, byID map[string]*Task, metas map[string]*repb.RequestMetadata, now time.Time) error {
	var finished []*Operation
	anonymous := 0
	err := store.Load(ctx, kindOp, func(name string, value []byte) error {
		r := &opRecord{}
		if err := r.unmarshal(value); err != nil {
			return fmt.Errorf("operation record %s: %w", name, err)
		}
		op := &Operation{Name: name, goneSince: now, accepted: r.Accepted, invocation: r.Invocation, hasMeta: metas[name] != nil, stored: true}
		if !r.Done {
			op.meta = metas[name] // a finished one was reported before
			if !s.joinRestoredLocked(op, byID[r.Task]) {
				return nil
			}
		} else {
			ok, err := finishRestored(op, r, byID[r.Task])
			if err != nil {
				return fmt.Errorf("operation record %s: %w", name, err)
			}
			if !ok {
				anonymous++
				return nil
			}
			finished = append(finished, op)
		}
		s.ops[name] = op
		return nil
	})
	if err != nil {
		return err
	}
	if anonymous > 0 {
		s.cfg.Logger.Warn("finished operations stored by an older Gantry do not say whose they are: not restored (WaitExecution of them answers NOT_FOUND; their results stay in the ActionCache)",
			"operations", anonymous)
	}
	sort.Slice(finished, func(i, j int) bool { return finished[i].doneAt.Before(finished[j].doneAt) })
	s.finished = append(s.finished, finished...)
	return nil
}

// joinRestoredLocked joins the unfinished operation op to its task t; it
// reports false (op is dropped) when t finished without op.
func (s *Scheduler) joinRestoredLocked(op *Operation, t *Task) bool {
	if t == nil {
		return false
	}
	op.task = t
	t.ops = append(t.ops, op)
	s.unwatched.add(op)
	s.open.add(op)
	// A record written before operations kept their own acceptance and
	// invocation: the task's are the best known.
	if op.accepted.IsZero() {
		op.accepted = t.queuedAt
	}
	if op.invocation == nil {
		op.invocation = t.invPath
	}
	return true
}

// finishRestored makes op the finished operation of record r: its
// response, and its task (t, still unfinished, or the one the record
// keeps). It reports false when the record was written by a Gantry that
// did not keep whose operation it was: restored with no instance, anyone
// with rights on the default instance could read it, so it is dropped.
func finishRestored(op *Operation, r *opRecord, t *Task) (bool, error) {
	resp := &repb.ExecuteResponse{}
	if err := proto.Unmarshal(r.Response, resp); err != nil {
		return false, err
	}
	op.done, op.response, op.doneAt = true, resp, r.DoneAt
	switch {
	case t != nil:
		op.task = t
		t.ops = append(t.ops, op)
	case r.Finished != nil:
		op.task = finishedTaskOf(r, resp)
	default:
		return false, nil
	}
	return true, nil
}

// dropUnwaitedLocked drops the restored tasks (byID) that no operation
// waits for any more: a queued one leaves the queue, a leased one is
// cancelled on its worker. It returns them, to be stored as dropped.
func (s *Scheduler) dropUnwaitedLocked(byID map[string]*Task) (dropped []*Task) {
	for _, t := range byID {
		if len(t.ops) > 0 {
			continue
		}
		switch t.state {
		case stateQueued:
			s.queue.remove(t)
		case stateLeased:
			l := t.lease
			l.worker.commands = append(l.worker.commands, LeaseCommand{LeaseID: l.id, Kind: CommandCancel, Reason: "no client waits for it any more"})
			s.dropLeaseLocked(l)
		}
		t.state = stateDone
		s.forgetInflightLocked(t)
		s.releaseInvocationLocked(t)
		dropped = append(dropped, t)
	}
	return dropped
}

// finishedTaskOf rebuilds, from a finished operation's record, the part
// of its task that authorization and the status pages read.
func finishedTaskOf(r *opRecord, resp *repb.ExecuteResponse) *Task {
	f := r.Finished
	d := digest.Digest{Function: digest.Function(f.Function), Hash: f.Hash, Size: f.Size}
	t := &Task{ID: r.Task, Instance: f.Instance, ActionDigest: d, Platform: f.Platform, Queue: f.Queue, priority: f.Priority,
		heapIndex: -1, state: stateDone, stage: repb.ExecutionStage_COMPLETED, attempts: f.Attempts, response: resp, queuedAt: f.QueuedAt,
		dedupKey: dedupKey{f.Instance, d}, lastWorker: f.Worker, retries: f.Retries, invPath: f.Invocation, stored: true}
	// Only the cores are shown; a record whose properties no longer
	// parse (the rules changed) shows none.
	if preq, err := platform.ParseRequest(f.Platform); err == nil {
		t.Req = preq
	}
	return t
}
