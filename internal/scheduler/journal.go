package scheduler

import (
	"context"
	"errors"
	"sync"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/protobuf/proto"

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
	// closed is set by the last flush: what changes after it is never
	// stored, so no lease may be handed out (reconcile.go).
	closed bool

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
// with their callers' names. Call it once, before serving. The finished
// operations whose task is gone are restored after it returns
// (restorelater.go); Restored is closed once they are. Changes are
// stored until ctx ends (then the last ones are flushed).
func (s *Scheduler) Attach(ctx context.Context, store statestore.Store) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.jr != nil {
		return errors.New("scheduler already has a store")
	}
	started := time.Now()
	dropped, later, err := s.restoreLocked(ctx, store)
	if err != nil {
		return err
	}
	if len(later.ops) > 0 {
		later.sort()
		later.batch, later.beforeBatch = restoreLaterBatch, beforeLaterBatch
		s.restoring, s.restorePending, s.later = make(chan struct{}), len(later.ops), later
		go s.restoreLater(ctx, later, started)
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

// closedLocked reports, under Scheduler.mu, whether the last flush was
// made: nothing changed since will be stored.
func (j *journal) closedLocked() bool {
	return j != nil && j.closed
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
			s.flush(context.Background(), true) // last changes
			j.inflight.Wait()
			return
		case <-j.kick:
		}
		s.flush(ctx, false)
	}
}

// flush writes every dirty object's current state in one Apply. The
// state is copied under the lock and encoded after it is released. The
// last flush (final) closes the journal and, when no lease can be
// missing from what it writes, marks the stop clean (reconcile.go).
func (s *Scheduler) flush(ctx context.Context, final bool) {
	j := s.jr
	s.mu.Lock()
	seq := j.seq
	clean := false
	if final {
		j.closed = true
		clean = s.recon == nil
	}
	tasks := make([]taskSnap, 0, len(j.dirtyTasks))
	var firsts []*Task // whose record this flush stores
	for t := range j.dirtyTasks {
		ts := s.snapTaskLocked(t)
		if ts.first != nil {
			firsts = append(firsts, t)
		}
		tasks = append(tasks, ts)
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
	if clean {
		batch = append(batch, stoppedMark)
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
		err := j.store.Apply(ctx, batch)
		if err == nil {
			s.letGoOfActions(firsts)
		}
		j.record(seq, err)
		s.notifyStored()
		return
	}
	wait, err := p.Enqueue(context.WithoutCancel(ctx), batch)
	s.reportInOrder(seq, func() error {
		if err != nil {
			return err
		}
		err := wait(context.Background())
		if err == nil {
			s.letGoOfActions(firsts)
		}
		return err
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
	// Shape (from version 2 on) is the task's shape (shaperestore.go).
	Shape *taskShapeRecord `json:"-"`
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
	none   bool   // nothing to write
	first  []byte // the encoded "task" record, when it is not stored yet
	state  taskStateRecord
}

func (s *Scheduler) snapTaskLocked(t *Task) taskSnap {
	if t.state == stateDone {
		// A task that finished before any flush took it (one commit for
		// the whole action) was never written: nothing to delete.
		return taskSnap{id: t.ID, delete: t.stored, none: !t.stored}
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
		first := &taskRecord{ID: t.ID, Instance: t.Instance, Function: int32(t.ActionDigest.Function), Hash: t.ActionDigest.Hash, Size: t.ActionDigest.Size,
			Platform: t.Platform, Action: t.ActionBytes, Command: t.CommandBytes, Cacheable: t.Cacheable, Queue: t.Queue, QueuedAt: t.queuedAt,
			Shape: s.shapeRecordLocked(t)}
		// Encoded here, under the lock, so that the task keeps its action
		// and command in the record being stored, not in a second copy of
		// its own, until the store has it (actionstore.go).
		ts.first, t.ActionBytes, t.CommandBytes = first.marshalSharing()
	}
	return ts
}

func (ts taskSnap) mutations(batch []statestore.Mutation) []statestore.Mutation {
	if ts.none {
		return batch
	}
	if ts.delete {
		return append(batch, statestore.Mutation{Kind: kindTask, Key: ts.id, Delete: true}, statestore.Mutation{Kind: kindTaskState, Key: ts.id, Delete: true})
	}
	if ts.first != nil {
		batch = append(batch, statestore.Mutation{Kind: kindTask, Key: ts.id, Value: ts.first})
	}
	return append(batch, statestore.Mutation{Kind: kindTaskState, Key: ts.id, Value: ts.state.marshal()})
}

type opSnap struct {
	name    string
	delete  bool
	hadMeta bool // when deleting: an opmeta record goes too
	rec     opRecord
	resp    *repb.ExecuteResponse
	meta    []byte // set when the opmeta record is to be written
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
		batch = append(batch, statestore.Mutation{Kind: kindOpMeta, Key: o.name, Value: o.meta})
	}
	return append(batch, statestore.Mutation{Kind: kindOp, Key: o.name, Value: o.rec.marshal()})
}
