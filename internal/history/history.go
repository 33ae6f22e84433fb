// Package history keeps the finished operations and a summary per build
// (a client's tool_invocation_id) for the status pages, durably, in the
// scheduler's state store (the embedded log or PostgreSQL), so that they
// are shown again after a restart or by the next leading scheduler.
//
// Recording is off the operations' path: Record queues the change in
// memory and a background loop writes what was queued every FlushEvery
// in one Apply (one commit for many operations). A crash loses at most
// that interval's records; Flush waits for everything recorded so far.
// The history is bounded by a number of operations and of builds and by
// age; what falls out is deleted from the store too.
package history

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/gantry-build/gantry/internal/statestore"
)

// The record kinds in the state store: an operation under
// "FINISHED-UNIX-NANOS(16 hex)/NAME" (so that loading gives them oldest
// first), a build under its id.
const (
	kindOp    = "history.op"
	kindBuild = "history.build"
)

// Options bound the history.
type Options struct {
	// MaxOperations and MaxBuilds bound what is kept (at least 1 each).
	MaxOperations int
	MaxBuilds     int
	// MaxAge drops operations finished, and builds last active, longer
	// ago; 0 keeps them until the counts push them out.
	MaxAge time.Duration
	// FlushEvery is how often recorded changes are written (default
	// 100ms).
	FlushEvery time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// applyTimeout bounds one write of the history.
const applyTimeout = 30 * time.Second

// Recorder is the history of one scheduler. It is safe for concurrent
// use.
type Recorder struct {
	store statestore.Store
	opts  Options
	log   *slog.Logger

	mu     sync.Mutex
	ops    []entry           // oldest first
	names  map[string]string // operation name -> its key in ops
	builds map[string]*Build
	// pending are the operation puts and deletes not yet written;
	// dirty the builds whose record changed.
	pending []statestore.Mutation
	dirty   map[string]bool
	// seq counts recorded changes; savedSeq those written.
	seq, savedSeq uint64
	saved         *sync.Cond
	// traffic gathers the builds' CAS bytes (AddTraffic); unattached
	// holds those of builds not in the history yet.
	traffic    traffic
	unattached map[string]*flow

	// ages orders builds for pruning.
	ages *buildAges

	kick chan struct{}
	stop chan struct{}
	done chan struct{}
}

type entry struct {
	key string
	op  Operation
}

// New loads the history kept in store and starts writing to it; Close
// stops that.
func New(ctx context.Context, store statestore.Store, opts Options, log *slog.Logger) (*Recorder, error) {
	if opts.MaxOperations < 1 || opts.MaxBuilds < 1 {
		return nil, fmt.Errorf("history: MaxOperations (%d) and MaxBuilds (%d) must be at least 1", opts.MaxOperations, opts.MaxBuilds)
	}
	if opts.FlushEvery <= 0 {
		opts.FlushEvery = 100 * time.Millisecond
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r := &Recorder{store: store, opts: opts, log: log, names: map[string]string{}, builds: map[string]*Build{}, ages: newBuildAges(), dirty: map[string]bool{}, unattached: map[string]*flow{},
		kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	r.saved = sync.NewCond(&r.mu)
	damaged := 0
	err := store.Load(ctx, kindOp, func(key string, value []byte) error {
		var op Operation
		if json.Unmarshal(value, &op) != nil || op.Name == "" {
			damaged++
			r.pending = append(r.pending, statestore.Mutation{Kind: kindOp, Key: key, Delete: true})
			return nil
		}
		r.ops = append(r.ops, entry{key: key, op: op})
		r.names[op.Name] = key
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("history: loading the finished operations: %w", err)
	}
	err = store.Load(ctx, kindBuild, func(key string, value []byte) error {
		b := &Build{}
		if json.Unmarshal(value, b) != nil || b.ID != key {
			damaged++
			r.pending = append(r.pending, statestore.Mutation{Kind: kindBuild, Key: key, Delete: true})
			return nil
		}
		r.builds[key] = b
		r.ages.add(b)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("history: loading the builds: %w", err)
	}
	if damaged > 0 {
		log.Warn("history: dropped damaged records", "count", damaged)
	}
	r.mu.Lock()
	r.pruneLocked()
	if len(r.pending) > 0 {
		r.seq++
	}
	r.mu.Unlock()
	go r.loop()
	return r, nil
}

// Record adds a finished operation (a second record of the same name is
// ignored).
func (r *Recorder) Record(op Operation) {
	data, err := json.Marshal(op)
	if err != nil {
		r.log.Warn("history: cannot encode an operation", "operation", op.Name, "err", err)
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.names[op.Name]; ok {
		return
	}
	key := fmt.Sprintf("%016x/%s", op.Finished.UnixNano(), op.Name)
	// Keep the slice ordered by key: a record may arrive a little after
	// a later one, but most are the newest (appended without a search).
	if n := len(r.ops); n == 0 || r.ops[n-1].key <= key {
		r.ops = append(r.ops, entry{key: key, op: op})
	} else {
		i := sort.Search(n, func(i int) bool { return r.ops[i].key > key })
		r.ops = append(r.ops, entry{})
		copy(r.ops[i+1:], r.ops[i:])
		r.ops[i] = entry{key: key, op: op}
	}
	r.names[op.Name] = key
	r.pending = append(r.pending, statestore.Mutation{Kind: kindOp, Key: key, Value: data})
	if op.Build != "" {
		b := r.builds[op.Build]
		if b == nil {
			b = &Build{ID: op.Build}
			r.builds[op.Build] = b
			if f := r.unattached[op.Build]; f != nil {
				b.BytesUp, b.BytesDown = f.up, f.down
				delete(r.unattached, op.Build)
			}
			b.add(op)
			r.ages.add(b)
		} else {
			b.add(op)
			r.ages.changed(b)
		}
		r.dirty[op.Build] = true
	}
	r.pruneLocked()
	r.seq++
	if len(r.pending) >= 512 {
		select {
		case r.kick <- struct{}{}:
		default:
		}
	}
}

// pruneLocked drops the oldest operations and builds beyond the bounds.
func (r *Recorder) pruneLocked() {
	var cutoff time.Time
	if r.opts.MaxAge > 0 {
		cutoff = r.opts.Now().Add(-r.opts.MaxAge)
	}
	n := 0
	for n < len(r.ops) && (len(r.ops)-n > r.opts.MaxOperations || (!cutoff.IsZero() && r.ops[n].op.Finished.Before(cutoff))) {
		e := r.ops[n]
		delete(r.names, e.op.Name)
		r.pending = append(r.pending, statestore.Mutation{Kind: kindOp, Key: e.key, Delete: true})
		n++
	}
	if n > 0 {
		// Resliced, not copied: the next append that outgrows the array
		// moves only the live entries (amortised O(1) a record, where a
		// copy of all 10,000 cost milliseconds each).
		clear(r.ops[:n])
		r.ops = r.ops[n:]
	}
	// Builds: the oldest first, beyond the count or the age.
	for b := r.ages.oldest(); b != nil; b = r.ages.oldest() {
		if len(r.builds) <= r.opts.MaxBuilds && (cutoff.IsZero() || !b.Last.Before(cutoff)) {
			break
		}
		r.ages.remove(b)
		delete(r.builds, b.ID)
		delete(r.dirty, b.ID)
		r.pending = append(r.pending, statestore.Mutation{Kind: kindBuild, Key: b.ID, Delete: true})
	}
}

// loop writes the pending changes every FlushEvery (sooner when many
// wait) until Close.
func (r *Recorder) loop() {
	defer close(r.done)
	t := time.NewTicker(r.opts.FlushEvery)
	defer t.Stop()
	for {
		select {
		case <-r.stop:
			r.foldTraffic()
			r.write()
			return
		case <-t.C:
			r.foldTraffic()
			r.mu.Lock()
			r.pruneLocked() // age, also while nothing finishes
			if len(r.pending) > 0 {
				r.seq++
			}
			r.mu.Unlock()
		case <-r.kick:
		}
		r.write()
	}
}

// write stores what is pending in one Apply. On failure the changes stay
// pending for the next round (a build's newest value is taken then).
func (r *Recorder) write() {
	r.mu.Lock()
	if r.savedSeq == r.seq {
		r.mu.Unlock()
		return
	}
	seq := r.seq
	batch := r.pending
	r.pending = nil
	dirty := r.dirty
	r.dirty = map[string]bool{}
	for id := range dirty {
		data, err := json.Marshal(r.builds[id])
		if err != nil {
			continue
		}
		batch = append(batch, statestore.Mutation{Kind: kindBuild, Key: id, Value: data})
	}
	r.mu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), applyTimeout)
	err := r.store.Apply(ctx, batch)
	cancel()

	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.log.Warn("history: writing finished operations failed; retrying", "records", len(batch), "err", err)
		// Operation records first, in their order; builds are written
		// again from their newest value.
		var ops []statestore.Mutation
		for _, m := range batch {
			if m.Kind == kindOp || m.Delete {
				ops = append(ops, m)
			} else if r.builds[m.Key] != nil {
				r.dirty[m.Key] = true
			}
		}
		r.pending = append(ops, r.pending...)
		return
	}
	if seq > r.savedSeq {
		r.savedSeq = seq
	}
	r.saved.Broadcast()
}

// Flush waits until everything recorded before the call (the builds'
// traffic included) is stored.
func (r *Recorder) Flush(ctx context.Context) error {
	r.foldTraffic()
	r.mu.Lock()
	want := r.seq
	r.mu.Unlock()
	select {
	case r.kick <- struct{}{}:
	default:
	}
	stop := context.AfterFunc(ctx, func() {
		r.mu.Lock()
		r.saved.Broadcast()
		r.mu.Unlock()
	})
	defer stop()
	r.mu.Lock()
	defer r.mu.Unlock()
	for r.savedSeq < want {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("history: %d changes not yet stored: %w", r.seq-r.savedSeq, err)
		}
		select {
		case <-r.done:
			return fmt.Errorf("history: closed with changes not stored")
		default:
		}
		r.saved.Wait()
	}
	return nil
}

// Unsaved is how many recorded changes are not yet stored.
func (r *Recorder) Unsaved() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.pending) + len(r.dirty)
}

// Close writes what is pending and stops the writing loop.
func (r *Recorder) Close() {
	select {
	case <-r.stop:
	default:
		close(r.stop)
	}
	<-r.done
	r.mu.Lock()
	r.saved.Broadcast()
	r.mu.Unlock()
}

// Operations returns finished operations, newest first, those of build
// only when it is not "": total is how many match, the result those from
// offset on, at most limit.
func (r *Recorder) Operations(build string, offset, limit int) (ops []Operation, total int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := len(r.ops) - 1; i >= 0; i-- {
		op := r.ops[i].op
		if build != "" && op.Build != build {
			continue
		}
		if total >= offset && len(ops) < limit {
			ops = append(ops, op)
		}
		total++
	}
	return ops, total
}

// Operation returns the finished operation name, if the history has it.
func (r *Recorder) Operation(name string) (Operation, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	key, ok := r.names[name]
	if !ok {
		return Operation{}, false
	}
	i := sort.Search(len(r.ops), func(i int) bool { return r.ops[i].key >= key })
	return r.ops[i].op, true
}

// Builds returns the builds, the most recently started first: total is
// how many there are, the result those from offset on, at most limit.
func (r *Recorder) Builds(offset, limit int) (bs []Build, total int) {
	r.mu.Lock()
	all := make([]*Build, 0, len(r.builds))
	for _, b := range r.builds {
		all = append(all, b)
	}
	sort.Slice(all, func(i, j int) bool {
		if !all[i].First.Equal(all[j].First) {
			return all[i].First.After(all[j].First)
		}
		return all[i].ID < all[j].ID
	})
	for i := offset; i < len(all) && len(bs) < limit; i++ {
		bs = append(bs, all[i].clone())
	}
	r.mu.Unlock()
	return bs, len(all)
}

// Build returns the build id, if the history has it.
func (r *Recorder) Build(id string) (Build, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	b := r.builds[id]
	if b == nil {
		return Build{}, false
	}
	return b.clone(), true
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// Point sums up the operations that finished in one interval of a Series.
type Point struct {
	Start time.Time
	// Executed, CacheHits and Failed count the operations as a Build
	// does.
	Executed, CacheHits, Failed int
	// QueueP50 and QueueP95 are the executed operations' queue time
	// quantiles (upper bounds of the histogram buckets; zero without
	// any).
	QueueP50, QueueP95 time.Duration
	// Busy is the execution time (the worker's execute stage) of the
	// operations, each counted in the interval it finished in.
	Busy time.Duration
}

// Series sums up the kept operations in n intervals of step ending at
// end, oldest first: what the status pages' charts draw. Operations that
// fell out of the history (status.history) are missing from it.
func (r *Recorder) Series(end time.Time, step time.Duration, n int) []Point {
	if n <= 0 || step <= 0 {
		return nil
	}
	start := end.Add(-time.Duration(n) * step)
	pts := make([]Point, n)
	hists := make([]Build, n) // for their queue histograms
	for i := range pts {
		pts[i].Start = start.Add(time.Duration(i) * step)
	}
	r.mu.Lock()
	// ops are ordered by finish time: start from the first in the window.
	from := sort.Search(len(r.ops), func(i int) bool { return !r.ops[i].op.Finished.Before(start) })
	for _, e := range r.ops[from:] {
		o := e.op
		if !o.Finished.Before(end) {
			break
		}
		i := int(o.Finished.Sub(start) / step)
		hists[i].add(o)
		if !o.Cached && !o.ExecStart.IsZero() && o.ExecEnd.After(o.ExecStart) {
			pts[i].Busy += o.ExecEnd.Sub(o.ExecStart)
		}
	}
	r.mu.Unlock()
	for i := range pts {
		b := hists[i]
		pts[i].Executed, pts[i].CacheHits, pts[i].Failed = b.Executed, b.CacheHits, b.Failed
		pts[i].QueueP50, pts[i].QueueP95 = b.QueueQuantile(0.5), b.QueueQuantile(0.95)
	}
	return pts
}
