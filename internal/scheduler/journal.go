package scheduler

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/protobuf/proto"

	"github.com/gantry-build/gantry/internal/digest"
	"github.com/gantry-build/gantry/internal/platform"
	"github.com/gantry-build/gantry/internal/statestore"
)

// Durability: with a store attached (Attach), every change to a task or
// operation marks it dirty under the scheduler's lock, and the call that
// made the change waits, after releasing the lock, until a flush has
// written the objects' current state. One flusher goroutine writes every
// object dirtied since the last flush in one Apply (group commit), so the
// cost is one commit per round of concurrent calls. What is written is
// always the latest state, so flushes can never apply out of order.
//
// Records: kind "task" (an unfinished task: identity, action, platform,
// invocation, priority and queue position, attempts, lease) and kind "op"
// (an operation: its task, or its final response). A finished task leaves
// the store; its operations keep the response until retention ends.

const (
	kindTask      = "task"
	kindTaskState = "tstate"
	kindOp        = "op"
	// kindOpMeta is an operation's RequestMetadata (encoded), written
	// once with its first record and removed with it: the op record is
	// rewritten when the operation finishes, the metadata is not.
	kindOpMeta = "opmeta"
)

type journal struct {
	store statestore.Store

	// Guarded by Scheduler.mu.
	dirtyTasks map[*Task]struct{}
	dirtyOps   map[*Operation]struct{}
	seq        uint64 // changes marked so far
	// Finished operations not yet known to be stored, in doneSeq order.
	doneWait []*Operation

	mu      sync.Mutex
	cond    *sync.Cond
	flushed uint64 // changes durable, or failed
	stored  uint64 // changes durable before any failure
	err     error  // the last flush's error, for the calls waiting on it
	kick    chan struct{}
	done    chan struct{} // closed when the flusher has stopped

	// With a Pipeliner store, commits overlap: each flush queues its
	// batch and a goroutine reports the commit, in flush order (prev).
	inflight sync.WaitGroup
	prev     chan struct{}
}

func newJournal(store statestore.Store) *journal {
	j := &journal{store: store, dirtyTasks: map[*Task]struct{}{}, dirtyOps: map[*Operation]struct{}{}, kick: make(chan struct{}, 1), done: make(chan struct{}),
		prev: make(chan struct{})}
	close(j.prev)
	j.cond = sync.NewCond(&j.mu)
	return j
}

// Attach makes the scheduler durable in store and restores what store
// holds: queued work in its order, leases (kept if their worker reports
// them within the heartbeat timeout, requeued otherwise), and operations
// with their callers' names. Call it once, before serving. Changes are
// stored until ctx ends (then the last ones are flushed).
func (s *Scheduler) Attach(ctx context.Context, store statestore.Store) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.jr != nil {
		return errors.New("scheduler already has a store")
	}
	dropped, err := s.restoreLocked(ctx, store)
	if err != nil {
		return err
	}
	s.jr = newJournal(store)
	for _, t := range dropped {
		s.touchTask(t)
	}
	s.ticketLocked()
	go s.runJournal(ctx)
	return nil
}

// Flush waits until every change made so far is stored. With a store
// whose Attach context has ended, it waits for the final flush.
func (s *Scheduler) Flush(ctx context.Context) error {
	s.mu.Lock()
	j := s.jr
	var ticket uint64
	if j != nil {
		ticket = s.ticketLocked()
	}
	s.mu.Unlock()
	if j == nil {
		return nil
	}
	select {
	case <-j.done:
		j.mu.Lock()
		defer j.mu.Unlock()
		if j.flushed < ticket {
			return errors.New("the scheduler's store was closed before the last changes were written")
		}
		return j.err
	default:
	}
	return s.durable(ctx, ticket)
}

// Stopped is closed when the store's flusher has written its last changes
// after the Attach context ended.
func (s *Scheduler) Stopped() <-chan struct{} {
	if s.jr == nil {
		c := make(chan struct{})
		close(c)
		return c
	}
	return s.jr.done
}

// touchTask and touchOp mark objects dirty (under s.mu).
func (s *Scheduler) touchTask(t *Task) {
	if s.jr != nil {
		s.jr.dirtyTasks[t] = struct{}{}
		s.jr.seq++
	}
}

func (s *Scheduler) touchOp(op *Operation) {
	if s.jr != nil {
		s.jr.dirtyOps[op] = struct{}{}
		s.jr.seq++
	}
}

// seqLocked is the number of changes marked so far (0 without a store),
// under Scheduler.mu.
func (j *journal) seqLocked() uint64 {
	if j == nil {
		return 0
	}
	return j.seq
}

// dirty reports, under Scheduler.mu, whether changes wait for a flush.
func (j *journal) dirty() bool {
	return j != nil && len(j.dirtyTasks)+len(j.dirtyOps) > 0
}

// kickFlush starts a flush of what is dirty (if none is due already).
func (j *journal) kickFlush() {
	if j == nil {
		return
	}
	select {
	case j.kick <- struct{}{}:
	default:
	}
}

// ticketLocked is what a call must wait for: every change so far.
func (s *Scheduler) ticketLocked() uint64 {
	if s.jr == nil {
		return 0
	}
	select {
	case s.jr.kick <- struct{}{}:
	default:
	}
	return s.jr.seq
}

// durable waits until the changes up to ticket are stored.
func (s *Scheduler) durable(ctx context.Context, ticket uint64) error {
	j := s.jr
	if j == nil || ticket == 0 {
		return nil
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	for j.flushed < ticket {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		j.cond.Wait()
	}
	if j.err != nil {
		return errorf(ErrUnavailable, "the scheduler could not store the change: %v; retry", j.err)
	}
	return nil
}

// runJournal flushes until ctx ends.
func (s *Scheduler) runJournal(ctx context.Context) {
	j := s.jr
	defer close(j.done)
	// Wake waiters whose context ends (cond has no context support).
	stop := context.AfterFunc(ctx, func() { j.mu.Lock(); j.cond.Broadcast(); j.mu.Unlock() })
	defer stop()
	for {
		select {
		case <-ctx.Done():
			s.flush(context.Background()) // last changes
			j.inflight.Wait()
			return
		case <-j.kick:
		}
		s.flush(ctx)
	}
}

// flush writes every dirty object's current state in one Apply. The
// state is copied under the lock and encoded after it is released.
func (s *Scheduler) flush(ctx context.Context) {
	j := s.jr
	s.mu.Lock()
	seq := j.seq
	tasks := make([]taskSnap, 0, len(j.dirtyTasks))
	for t := range j.dirtyTasks {
		tasks = append(tasks, s.snapTaskLocked(t))
	}
	ops := make([]opSnap, 0, len(j.dirtyOps))
	for op := range j.dirtyOps {
		ops = append(ops, s.snapOpLocked(op))
	}
	clear(j.dirtyTasks)
	clear(j.dirtyOps)
	s.mu.Unlock()
	batch := make([]statestore.Mutation, 0, 2*len(tasks)+len(ops))
	for _, t := range tasks {
		batch = t.mutations(batch)
	}
	for _, op := range ops {
		batch = op.mutations(batch)
	}
	if len(batch) == 0 {
		// Nothing changed since the last flush, whose commit may still be
		// running: seq is stored when that commit is, not before (else a
		// result it holds would show as stored, and a crash lose it).
		select {
		case <-j.prev:
			j.record(seq, nil)
			s.notifyStored()
		default:
			s.reportInOrder(seq, nil)
		}
		return
	}
	p, ok := j.store.(statestore.Pipeliner)
	if !ok {
		j.record(seq, j.store.Apply(ctx, batch))
		s.notifyStored()
		return
	}
	wait, err := p.Enqueue(context.WithoutCancel(ctx), batch)
	s.reportInOrder(seq, func() error {
		if err != nil {
			return err
		}
		return wait(context.Background())
	})
}

// reportInOrder records seq with the outcome of wait (nil: none to wait
// for) once it is known and every earlier flush is recorded.
func (s *Scheduler) reportInOrder(seq uint64, wait func() error) {
	j := s.jr
	prev, mine := j.prev, make(chan struct{})
	j.prev = mine
	j.inflight.Add(1)
	go func() {
		defer j.inflight.Done()
		defer close(mine)
		var err error
		if wait != nil {
			err = wait()
		}
		<-prev // report in flush order
		j.record(seq, err)
		s.notifyStored()
	}()
}

// record notes that the changes up to seq were stored, or failed. A
// failure sticks: the store's state is then unknown, and every later call
// fails until the server is restarted (it restores what was stored).
func (j *journal) record(seq uint64, err error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if err != nil && j.err == nil {
		j.err = err
	}
	if j.err == nil {
		j.stored = max(j.stored, seq)
	}
	j.flushed = max(j.flushed, seq)
	j.cond.Broadcast()
}

// A task is two records: "task", what never changes (written once), and
// "tstate", its queue position, attempts and lease (small, rewritten on
// every change).
type taskRecord struct {
	ID        string              `json:"id"`
	Instance  string              `json:"instance"`
	Function  int32               `json:"fn"`
	Hash      string              `json:"hash"`
	Size      int64               `json:"size"`
	Platform  platform.Properties `json:"platform"`
	Action    []byte              `json:"action,omitempty"`
	Command   []byte              `json:"command,omitempty"`
	Cacheable bool                `json:"cacheable"`
	Queue     string              `json:"queue"`
	QueuedAt  time.Time           `json:"queued_at"`
}

type taskStateRecord struct {
	Priority   int32    `json:"priority"`
	Seq        int64    `json:"seq"`
	Attempts   int      `json:"attempts"`
	Invocation []string `json:"invocation,omitempty"`
	Lease      string   `json:"lease,omitempty"`
	Worker     string   `json:"worker,omitempty"`
	// Retries and LastWorker (from version 2 on) are shown by the status
	// pages; they survive a restart with the task.
	Retries    []Retry `json:"-"`
	LastWorker string  `json:"-"`
}

type opRecord struct {
	Task     string    `json:"task,omitempty"`
	Done     bool      `json:"done,omitempty"`
	Response []byte    `json:"response,omitempty"`
	DoneAt   time.Time `json:"done_at,omitzero"`
	// Accepted and Invocation are the operation's own (SubmitRequest);
	// records written before they were kept lack them.
	Accepted   time.Time `json:"accepted,omitzero"`
	Invocation []string  `json:"invocation,omitempty"`
	// Finished (from version 3 on) is whose a finished operation is and
	// what the status pages show of its task, which leaves the store when
	// it finishes; nil for an unfinished operation (its task record has
	// it) and in records of older versions.
	Finished *finishedTask `json:"-"`
}

// finishedTask is the part of a finished task that its operations'
// records keep, so that whose it is (its instance and action) and what
// its page shows survive its task.
type finishedTask struct {
	Instance   string
	Function   int32
	Hash       string
	Size       int64
	Queue      string
	Platform   platform.Properties
	QueuedAt   time.Time
	Priority   int32
	Attempts   int
	Worker     string
	Invocation []string
	Retries    []Retry
}

type taskSnap struct {
	id     string
	delete bool
	first  *taskRecord // set when the "task" record is not stored yet
	state  taskStateRecord
}

func (s *Scheduler) snapTaskLocked(t *Task) taskSnap {
	if t.state == stateDone {
		return taskSnap{id: t.ID, delete: true}
	}
	ts := taskSnap{id: t.ID, state: taskStateRecord{Priority: t.priority, Seq: t.seq, Attempts: t.attempts, Retries: t.retries, LastWorker: t.lastWorker}}
	if t.inv != nil {
		ts.state.Invocation = t.inv.path()
	}
	if t.state == stateLeased && t.lease != nil {
		ts.state.Lease, ts.state.Worker = t.lease.id, t.lease.worker.info.ID
	}
	if !t.stored {
		t.stored = true
		ts.first = &taskRecord{ID: t.ID, Instance: t.Instance, Function: int32(t.ActionDigest.Function), Hash: t.ActionDigest.Hash, Size: t.ActionDigest.Size,
			Platform: t.Platform, Action: t.ActionBytes, Command: t.CommandBytes, Cacheable: t.Cacheable, Queue: t.Queue, QueuedAt: t.queuedAt}
	}
	return ts
}

func (ts taskSnap) mutations(batch []statestore.Mutation) []statestore.Mutation {
	if ts.delete {
		return append(batch, statestore.Mutation{Kind: kindTask, Key: ts.id, Delete: true}, statestore.Mutation{Kind: kindTaskState, Key: ts.id, Delete: true})
	}
	if ts.first != nil {
		batch = append(batch, statestore.Mutation{Kind: kindTask, Key: ts.id, Value: ts.first.marshal()})
	}
	return append(batch, statestore.Mutation{Kind: kindTaskState, Key: ts.id, Value: ts.state.marshal()})
}

type opSnap struct {
	name    string
	delete  bool
	hadMeta bool // when deleting: an opmeta record goes too
	rec     opRecord
	resp    *repb.ExecuteResponse
	meta    *repb.RequestMetadata // set when the opmeta record is to be written
}

func (s *Scheduler) snapOpLocked(op *Operation) opSnap {
	if s.ops[op.Name] != op {
		return opSnap{name: op.Name, delete: true, hadMeta: op.hasMeta}
	}
	t := op.task
	o := opSnap{name: op.Name, rec: opRecord{Task: t.ID, Done: op.done, DoneAt: op.doneAt, Accepted: op.accepted, Invocation: op.invocation}}
	if !op.stored {
		op.stored = true
		o.meta = op.meta // never changed
	}
	if op.done {
		o.resp = op.response // never changed once set
		o.rec.Finished = &finishedTask{Instance: t.Instance, Function: int32(t.ActionDigest.Function), Hash: t.ActionDigest.Hash, Size: t.ActionDigest.Size,
			Queue: t.Queue, Platform: t.Platform, QueuedAt: t.queuedAt, Priority: t.priority, Attempts: t.attempts,
			Worker: t.lastWorker, Invocation: t.invPath, Retries: t.retries}
	}
	return o
}

func (o opSnap) mutations(batch []statestore.Mutation) []statestore.Mutation {
	if o.delete {
		batch = append(batch, statestore.Mutation{Kind: kindOp, Key: o.name, Delete: true})
		if o.hadMeta {
			batch = append(batch, statestore.Mutation{Kind: kindOpMeta, Key: o.name, Delete: true})
		}
		return batch
	}
	if o.resp != nil {
		o.rec.Response, _ = proto.Marshal(o.resp)
	}
	if o.meta != nil {
		md, _ := proto.Marshal(o.meta)
		batch = append(batch, statestore.Mutation{Kind: kindOpMeta, Key: o.name, Value: md})
	}
	return append(batch, statestore.Mutation{Kind: kindOp, Key: o.name, Value: o.rec.marshal()})
}

// restoreLocked rebuilds the scheduler's state from store.
func (s *Scheduler) restoreLocked(ctx context.Context, store statestore.Store) (dropped []*Task, err error) {
	now := s.clock.Now()
	type stored struct {
		taskRecord
		taskStateRecord
	}
	states := map[string]*taskStateRecord{}
	err = store.Load(ctx, kindTaskState, func(key string, value []byte) error {
		st := &taskStateRecord{}
		if err := st.unmarshal(value); err != nil {
			return fmt.Errorf("task state record %s: %w", key, err)
		}
		states[key] = st
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("loading scheduler state: %w", err)
	}
	var tasks []*stored
	err = store.Load(ctx, kindTask, func(key string, value []byte) error {
		r := &stored{}
		if err := r.taskRecord.unmarshal(value); err != nil {
			return fmt.Errorf("task record %s: %w", key, err)
		}
		st := states[key]
		if st == nil {
			return nil // written by a flush cut short: never acknowledged
		}
		r.taskStateRecord = *st
		tasks = append(tasks, r)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("loading scheduler state: %w", err)
	}
	// Queue positions come back in their original order.
	sort.Slice(tasks, func(i, j int) bool { return tasks[i].Seq < tasks[j].Seq })
	byID := map[string]*Task{}
	for _, r := range tasks {
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
		byID[t.ID] = t
		if r.Lease == "" {
			t.state, t.stage = stateQueued, repb.ExecutionStage_QUEUED
			s.queue.push(t, now)
			continue
		}
		// The lease stays while its worker reconnects and reports it.
		w := s.workers[r.Worker]
		if w == nil {
			w = &worker{info: WorkerInfo{ID: r.Worker}, lastSeen: now, leases: map[string]*lease{}, held: map[string]int64{},
				cancelled: map[string]map[string]int64{}, matchCache: map[string]bool{}, ten: s.ten, restored: true}
			s.workers[r.Worker] = w
		}
		l := &lease{id: r.Lease, worker: w, task: t, lastSeen: now, stage: repb.ExecutionStage_QUEUED, started: now}
		t.state, t.stage, t.lease = stateLeased, repb.ExecutionStage_EXECUTING, l
		s.leases[l.id] = l
		w.leases[l.id] = l
		s.ten.restoredLease(l)
		s.fair.started(t.inv, +1, now)
	}
	metas := map[string]*repb.RequestMetadata{}
	err = store.Load(ctx, kindOpMeta, func(name string, value []byte) error {
		md := &repb.RequestMetadata{}
		if err := proto.Unmarshal(value, md); err != nil {
			return fmt.Errorf("operation metadata record %s: %w", name, err)
		}
		metas[name] = md
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("loading scheduler state: %w", err)
	}
	var finished []*Operation
	anonymous := 0
	err = store.Load(ctx, kindOp, func(name string, value []byte) error {
		r := &opRecord{}
		if err := r.unmarshal(value); err != nil {
			return fmt.Errorf("operation record %s: %w", name, err)
		}
		op := &Operation{Name: name, goneSince: now, accepted: r.Accepted, invocation: r.Invocation, hasMeta: metas[name] != nil, stored: true}
		if !r.Done {
			op.meta = metas[name] // a finished one was reported before
		}
		if r.Done {
			resp := &repb.ExecuteResponse{}
			if err := proto.Unmarshal(r.Response, resp); err != nil {
				return fmt.Errorf("operation record %s: %w", name, err)
			}
			op.done, op.response, op.doneAt = true, resp, r.DoneAt
			if t := byID[r.Task]; t != nil {
				op.task = t
				t.ops = append(t.ops, op)
			} else if r.Finished != nil {
				op.task = finishedTaskOf(r, resp)
			} else {
				// Written by a Gantry that did not keep whose operation
				// it was: restored with no instance, anyone with rights
				// on the default instance could read it. Dropped.
				anonymous++
				return nil
			}
			finished = append(finished, op)
		} else {
			t := byID[r.Task]
			if t == nil {
				return nil // its task finished without the operation: drop it
			}
			op.task = t
			t.ops = append(t.ops, op)
			s.unwatched.add(op)
			// A record written before operations kept their own
			// acceptance and invocation: the task's are the best known.
			if op.accepted.IsZero() {
				op.accepted = t.queuedAt
			}
			if op.invocation == nil {
				op.invocation = t.invPath
			}
		}
		s.ops[name] = op
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("loading scheduler state: %w", err)
	}
	if anonymous > 0 {
		s.cfg.Logger.Warn("finished operations stored by an older Gantry do not say whose they are: not restored (WaitExecution of them answers NOT_FOUND; their results stay in the ActionCache)",
			"operations", anonymous)
	}
	sort.Slice(finished, func(i, j int) bool { return finished[i].doneAt.Before(finished[j].doneAt) })
	s.finished = append(s.finished, finished...)
	// Tasks nobody waits for any more are dropped.
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
	return dropped, nil
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
