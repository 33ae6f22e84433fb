package scheduler

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/protobuf/proto"

	"github.com/gantry-build/gantry/internal/digest"
	"github.com/gantry-build/gantry/internal/platform"
	"github.com/gantry-build/gantry/internal/statestore"
)

// Restoring rebuilds the scheduler from its store (Attach), in steps:
// the unfinished tasks in their queue order, each held back for the
// reconciliation window (reconcile.go) or leased to its worker (restored
// until it reconnects); the operations, each joined to its task or kept
// finished; and the tasks no operation waits for any more are dropped.

// restoreLocked rebuilds the scheduler's state from store. The finished
// operations whose task is gone are returned in later, for restoreLater.
func (s *Scheduler) restoreLocked(ctx context.Context, store statestore.Store) (dropped []*Task, later *laterOps, err error) {
	now := s.clock.Now()
	killed, err := markRunning(ctx, store)
	if err != nil {
		return nil, nil, fmt.Errorf("loading scheduler state: %w", err)
	}
	tasks, err := loadTasks(ctx, store)
	if err != nil {
		return nil, nil, fmt.Errorf("loading scheduler state: %w", err)
	}
	byID := map[string]*Task{}
	var queued []*Task
	for _, r := range tasks {
		if readsBack(store) { // read back when leased (actionstore.go)
			r.Action, r.Command = nil, nil
		}
		t, err := s.restoreTaskLocked(r, now)
		if err != nil {
			return nil, nil, err
		}
		t.actionInStore = readsBack(store)
		byID[t.ID] = t
		if t.state == stateQueued {
			queued = append(queued, t)
		}
	}
	metas, err := loadOpMetas(ctx, store)
	if err != nil {
		return nil, nil, fmt.Errorf("loading scheduler state: %w", err)
	}
	later, err = s.restoreOpsLocked(ctx, store, byID, metas, now)
	if err != nil {
		return nil, nil, fmt.Errorf("loading scheduler state: %w", err)
	}
	dropped = s.dropUnwaitedLocked(byID)
	s.holdRestoredLocked(queued, byID, killed, now)
	return dropped, later, nil
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
	slices.SortFunc(tasks, func(a, b *storedTask) int { return cmp.Compare(a.Seq, b.Seq) })
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
		stored: true, retries: r.Retries, lastWorker: r.LastWorker}
	t.inv = s.fair.node(r.Invocation)
	t.invPath = t.inv.keys
	s.nextSeq = max(s.nextSeq, t.seq)
	s.frontSeq = min(s.frontSeq, t.seq)
	if t.Cacheable && s.inflightLocked(t.dedupKey()) == nil {
		fp := t.dedupKey().fingerprint()
		t.dedupNext = s.inflight[fp]
		s.inflight[fp] = t
	}
	if r.Lease == "" {
		// Queued, or held back until the workers reported their leases,
		// by holdRestoredLocked.
		t.state, t.stage = stateQueued, repb.ExecutionStage_QUEUED
		s.restoreShapeLocked(t, r.Shape, now)
		s.replaceRestoredLocked(t, now)
		return t, nil
	}
	s.restoreLeaseLocked(t, r.Lease, r.Worker, now)
	s.restoreShapeLocked(t, r.Shape, now)
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

// loadOpMetas reads the callers' RequestMetadata, by operation name, as
// stored: only an unfinished operation's is decoded (decodeOpMeta), a
// finished one only says it had one.
func loadOpMetas(ctx context.Context, store statestore.Store) (*metaIndex, error) {
	m := &metaIndex{}
	err := statestore.LoadShared(ctx, store, kindOpMeta, func(name string, value []byte) error {
		m.names = append(m.names, name)
		m.values = append(m.values, value)
		return nil
	})
	m.sort()
	return m, err
}

// metaIndex finds stored metadata by operation name without a map of a
// million entries: the names in order, looked up in ascending order by a
// cursor (the records come in name order), or by binary search.
type metaIndex struct {
	names  []string
	values [][]byte
	next   int
}

// sort orders the index by name, if the store did not.
func (m *metaIndex) sort() {
	if slices.IsSorted(m.names) {
		return
	}
	idx := make([]int, len(m.names))
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, b int) int { return strings.Compare(m.names[a], m.names[b]) })
	names, values := make([]string, len(idx)), make([][]byte, len(idx))
	for i, j := range idx {
		names[i], values[i] = m.names[j], m.values[j]
	}
	m.names, m.values = names, values
}

// find returns the metadata stored for name.
func (m *metaIndex) find(name string) ([]byte, bool) {
	if m.next > 0 && m.names[m.next-1] >= name {
		i, ok := slices.BinarySearch(m.names, name)
		if !ok {
			return nil, false
		}
		return m.values[i], true
	}
	for m.next < len(m.names) && m.names[m.next] < name {
		m.next++
	}
	if m.next < len(m.names) && m.names[m.next] == name {
		m.next++
		return m.values[m.next-1], true
	}
	return nil, false
}

// decodeOpMeta decodes the stored RequestMetadata of operation name.
func decodeOpMeta(name string, value []byte) (*repb.RequestMetadata, error) {
	md := &repb.RequestMetadata{}
	if err := proto.Unmarshal(value, md); err != nil {
		return nil, fmt.Errorf("operation metadata record %s: %w", name, err)
	}
	return md, nil
}

// storedOp is an operation record as read and decoded (decodeStoredOp),
// before it joins the scheduler.
type storedOp struct {
	name  string
	value []byte
	// meta is its stored RequestMetadata, if hasMeta.
	meta    []byte
	hasMeta bool
	r       opRecord
	// resp and fin are a finished operation's response and the task its
	// record keeps (nil if it keeps none).
	resp *repb.ExecuteResponse
	fin  *Task
	err  error
}

// decodeStoredOp decodes o.value; it touches only o, so records decode
// in parallel.
func decodeStoredOp(o *storedOp) {
	value := o.value
	o.value = nil
	if err := o.r.unmarshal(value); err != nil {
		o.err = fmt.Errorf("operation record %s: %w", o.name, err)
		return
	}
	if !o.r.Done {
		return
	}
	o.resp = &repb.ExecuteResponse{}
	if err := proto.Unmarshal(o.r.Response, o.resp); err != nil {
		o.err = fmt.Errorf("operation record %s: %w", o.name, err)
		return
	}
	if o.r.Finished != nil {
		o.fin = finishedTaskOf(&o.r, o.resp)
	}
}

// restoreOpsLocked reads the stored operations: an unfinished one joins
// its task (byID) and is unwatched until a caller follows it again; a
// finished one whose task is gone is returned in later, undecoded, for
// restoreLater; a finished one whose task is still unfinished is kept,
// oldest first, until retention ends. Finished operations that do not
// say whose they are (an older Gantry) are dropped with a warning. The
// records are decoded in batches, in parallel (decodeParallel), and join
// in their stored order.
func (s *Scheduler) restoreOpsLocked(ctx context.Context, store statestore.Store, byID map[string]*Task, metas *metaIndex, now time.Time) (*laterOps, error) {
	var finished []*Operation
	later := &laterOps{metas: metaIndex{names: metas.names, values: metas.values}}
	anonymous := 0
	batch := make([]storedOp, 0, restoreBatch)
	flush := func() error {
		decodeParallel(len(batch), func(i int) { decodeStoredOp(&batch[i]) })
		for i := range batch {
			o := &batch[i]
			if o.err != nil {
				return o.err
			}
			op := &Operation{Name: o.name, goneSince: now, accepted: o.r.Accepted, invocation: o.r.Invocation, hasMeta: o.hasMeta, stored: true}
			if !o.r.Done {
				if o.hasMeta { // a finished one was reported before
					if _, err := decodeOpMeta(o.name, o.meta); err != nil {
						return err
					}
					op.meta = presentMeta(o.meta)
				}
				if !s.joinRestoredLocked(op, byID[o.r.Task]) {
					continue
				}
			} else {
				if !finishDecoded(op, &o.r, o.resp, o.fin, byID[o.r.Task]) {
					anonymous++
					continue
				}
				finished = append(finished, op)
			}
			s.ops[o.name] = op
		}
		clear(batch)
		batch = batch[:0]
		return nil
	}
	err := statestore.LoadShared(ctx, store, kindOp, func(name string, value []byte) error {
		if task, done, ok := peekOp(value); ok && done && byID[string(task)] == nil {
			later.ops = append(later.ops, rawOp{name, value})
			return nil
		}
		meta, hasMeta := metas.find(name)
		batch = append(batch, storedOp{name: name, value: value, meta: meta, hasMeta: hasMeta})
		if len(batch) == restoreBatch {
			return flush()
		}
		return nil
	})
	if err == nil {
		err = flush()
	}
	if err != nil {
		return nil, err
	}
	if anonymous > 0 {
		s.cfg.Logger.Warn("finished operations stored by an older Gantry do not say whose they are: not restored (WaitExecution of them answers NOT_FOUND; their results stay in the ActionCache)",
			"operations", anonymous)
	}
	sortFinished(finished)
	s.finished = append(s.finished, finished...)
	return later, nil
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
	var fin *Task
	if r.Finished != nil {
		fin = finishedTaskOf(r, resp)
	}
	return finishDecoded(op, r, resp, fin, t), nil
}

// finishDecoded is finishRestored with the record's response resp and
// the task it keeps (fin, nil if none) already decoded.
func finishDecoded(op *Operation, r *opRecord, resp *repb.ExecuteResponse, fin *Task, t *Task) bool {
	op.done, op.response, op.doneAt = true, resp, r.DoneAt
	switch {
	case t != nil:
		op.task = t
		t.ops = append(t.ops, op)
	case fin != nil:
		op.task = fin
	default:
		return false
	}
	return true
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
		s.forgetShapeLocked(t)
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
		lastWorker: f.Worker, retries: f.Retries, invPath: f.Invocation, stored: true}
	// Only the cores are shown; a record whose properties no longer
	// parse (the rules changed) shows none.
	if preq, err := platform.ParseRequest(f.Platform); err == nil {
		t.Req = preq
	}
	return t
}
