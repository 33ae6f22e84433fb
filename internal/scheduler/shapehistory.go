package scheduler

import (
	"container/list"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"sort"
	"sync"
	"time"

	"github.com/gantry-build/gantry/internal/statestore"
)

// shapeKind is the store's record kind of the duration history: one
// record per action shape, keyed by its ID.
const shapeKind = "shape"

// ShapeOptions bound and tune a ShapeHistory.
type ShapeOptions struct {
	// MaxShapes bounds the shapes kept; the least recently run goes
	// first. It must be positive.
	MaxShapes int
	// HalfLife is how long until a sample counts half as much as a new
	// one; 0 means DefaultShapeHalfLife.
	HalfLife time.Duration
}

// DefaultMaxShapes and DefaultShapeHalfLife are the defaults of
// scheduler.history.max_shapes and half_life.
const (
	DefaultMaxShapes     = 50000
	DefaultShapeHalfLife = 72 * time.Hour
)

// maxShapeClasses bounds the worker classes kept per shape (the least
// recently seen goes first).
const maxShapeClasses = 8

// Sample is what one run of an action took, as its worker reported it.
type Sample struct {
	Wall time.Duration
	CPU  time.Duration
	// PeakMemory is the peak resident set in bytes, 0 when the worker did
	// not report it.
	PeakMemory int64
	ExitCode   int32
}

// ClassStats is a shape's history on one worker class: exponentially
// decayed means of its samples.
type ClassStats struct {
	// Weight is the decayed number of samples as of At.
	Weight float64 `json:"n"`
	// Wall and CPU are mean seconds; Memory the mean peak in bytes (of the
	// samples that reported one).
	Wall   float64 `json:"wall"`
	CPU    float64 `json:"cpu,omitempty"`
	Memory float64 `json:"mem,omitempty"`
	// ExitCode is the last run's.
	ExitCode int32     `json:"exit,omitempty"`
	At       time.Time `json:"at"`
	// FailedAt is when a run last failed on the class for want of size
	// (sizeclass.go); after At, the class is passed over.
	FailedAt time.Time `json:"failed,omitzero"`
}

// Shape is one action shape's history.
type Shape struct {
	ID      string                 `json:"-"`
	Label   string                 `json:"label"`
	Classes map[string]*ClassStats `json:"classes"`
	// Last is when it was last recorded (the LRU order).
	Last time.Time `json:"last"`
}

// ShapeHistory learns how long each action shape runs, per worker class,
// and keeps it in the scheduler's store (records of kind "shape"), so
// that it survives a restart. It is advisory: a failed write is logged
// and the history goes on in memory.
type ShapeHistory struct {
	store statestore.Store
	opts  ShapeOptions
	log   *slog.Logger

	mu     sync.Mutex
	shapes map[string]*list.Element // of *Shape, by ID
	lru    *list.List               // front: most recently recorded
	// dirty are the IDs to write (or delete: no longer in shapes).
	dirty    map[string]bool
	flushing bool
	idle     *sync.Cond
}

// NewShapeHistory loads the history kept in store. Records that do not
// decode are dropped (and deleted) with a warning, never fatal.
func NewShapeHistory(ctx context.Context, store statestore.Store, opts ShapeOptions, log *slog.Logger) (*ShapeHistory, error) {
	if opts.MaxShapes <= 0 {
		return nil, fmt.Errorf("the shape history needs a positive max_shapes, not %d", opts.MaxShapes)
	}
	if opts.HalfLife <= 0 {
		opts.HalfLife = DefaultShapeHalfLife
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	h := &ShapeHistory{store: store, opts: opts, log: log, shapes: map[string]*list.Element{}, lru: list.New(), dirty: map[string]bool{}}
	h.idle = sync.NewCond(&h.mu)
	var loaded []*Shape
	err := store.Load(ctx, shapeKind, func(key string, value []byte) error {
		sh, err := decodeShape(key, value)
		if err != nil {
			log.Warn("dropping an unreadable record of the duration history", "shape", key, "err", err)
			h.dirty[key] = true
			return nil
		}
		loaded = append(loaded, sh)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("loading the duration history: %w", err)
	}
	sort.Slice(loaded, func(i, j int) bool { return loaded[i].Last.After(loaded[j].Last) })
	for _, sh := range loaded {
		h.shapes[sh.ID] = h.lru.PushBack(sh)
	}
	h.evictLocked()
	if err := h.Flush(ctx); err != nil {
		return nil, err
	}
	return h, nil
}

// decodeShape reads a stored shape record back, checking what the
// scheduler relies on.
func decodeShape(key string, value []byte) (*Shape, error) {
	sh := &Shape{}
	if err := json.Unmarshal(value, sh); err != nil {
		return nil, err
	}
	sh.ID = key
	if sh.Classes == nil {
		sh.Classes = map[string]*ClassStats{}
	}
	for class, c := range sh.Classes {
		if c == nil || !finiteNonNegative(c.Weight, c.Wall, c.CPU, c.Memory) {
			return nil, fmt.Errorf("class %q has a negative or non-finite value", class)
		}
	}
	if len(sh.Classes) > maxShapeClasses {
		return nil, fmt.Errorf("%d classes, more than %d", len(sh.Classes), maxShapeClasses)
	}
	return sh, nil
}

func finiteNonNegative(vs ...float64) bool {
	for _, v := range vs {
		if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
			return false
		}
	}
	return true
}

// decay is the factor a weight recorded at then counts for at now.
func (h *ShapeHistory) decay(then, now time.Time) float64 {
	d := now.Sub(then)
	if d <= 0 {
		return 1
	}
	return math.Exp2(-d.Seconds() / h.opts.HalfLife.Seconds())
}

// classLocked is the stats of shape k on class, made if new, the shape
// made the most recently used and run at now.
func (h *ShapeHistory) classLocked(k shapeKey, class string, now time.Time) *ClassStats {
	var sh *Shape
	if e, ok := h.shapes[k.ID]; ok {
		sh = e.Value.(*Shape)
		h.lru.MoveToFront(e)
	} else {
		sh = &Shape{ID: k.ID, Classes: map[string]*ClassStats{}}
		h.shapes[k.ID] = h.lru.PushFront(sh)
	}
	sh.Label, sh.Last = k.Label, now
	c := sh.Classes[class]
	if c == nil {
		if len(sh.Classes) >= maxShapeClasses {
			dropOldestClass(sh)
		}
		c = &ClassStats{}
		sh.Classes[class] = c
	}
	return c
}

// Record adds a sample of shape k run on a worker of class at now, and
// starts writing it to the store (Flush waits for that).
func (h *ShapeHistory) Record(k shapeKey, class string, s Sample, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	c := h.classLocked(k, class, now)
	w := c.Weight * h.decay(c.At, now)
	mean := func(old, x float64) float64 { return (old*w + x) / (w + 1) }
	c.Wall = mean(c.Wall, s.Wall.Seconds())
	c.CPU = mean(c.CPU, s.CPU.Seconds())
	if s.PeakMemory > 0 {
		if c.Memory == 0 {
			c.Memory = float64(s.PeakMemory)
		} else {
			c.Memory = mean(c.Memory, float64(s.PeakMemory))
		}
	}
	c.Weight, c.ExitCode, c.At = w+1, s.ExitCode, now
	h.dirty[k.ID] = true
	h.evictLocked()
	h.kickLocked()
}

func dropOldestClass(sh *Shape) {
	oldest := ""
	for name, c := range sh.Classes {
		if oldest == "" || c.At.Before(sh.Classes[oldest].At) {
			oldest = name
		}
	}
	delete(sh.Classes, oldest)
}

// evictLocked drops the least recently recorded shapes beyond MaxShapes.
func (h *ShapeHistory) evictLocked() {
	for h.lru.Len() > h.opts.MaxShapes {
		sh := h.lru.Remove(h.lru.Back()).(*Shape)
		delete(h.shapes, sh.ID)
		h.dirty[sh.ID] = true
	}
}

// Expected is shape id's expected wall time at now, over every class
// (weighted by their decayed sample counts), and that total weight; 0, 0
// for a shape never seen.
func (h *ShapeHistory) Expected(id string, now time.Time) (time.Duration, float64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	e, ok := h.shapes[id]
	if !ok {
		return 0, 0
	}
	var sum, weight float64
	for _, c := range e.Value.(*Shape).Classes {
		w := c.Weight * h.decay(c.At, now)
		sum += c.Wall * w
		weight += w
	}
	if weight == 0 {
		return 0, 0
	}
	return time.Duration(sum / weight * float64(time.Second)), weight
}

// Shapes returns copies of the kept shapes, most recently run first, at
// most limit (0: all).
func (h *ShapeHistory) Shapes(limit int) []Shape {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []Shape
	for e := h.lru.Front(); e != nil && (limit <= 0 || len(out) < limit); e = e.Next() {
		sh := *e.Value.(*Shape)
		classes := make(map[string]*ClassStats, len(sh.Classes))
		for k, c := range sh.Classes {
			cc := *c
			classes[k] = &cc
		}
		sh.Classes = classes
		out = append(out, sh)
	}
	return out
}

// Len is the number of shapes kept.
func (h *ShapeHistory) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lru.Len()
}

// kickLocked starts writing the dirty shapes unless a write is running
// (it takes them when it is done).
func (h *ShapeHistory) kickLocked() {
	if h.flushing || len(h.dirty) == 0 {
		return
	}
	h.flushing = true
	go func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.writeLocked(context.Background())
	}()
}

// writeLocked writes the dirty shapes until none are left, letting go
// of h.mu while the store commits. The caller has set h.flushing.
func (h *ShapeHistory) writeLocked(ctx context.Context) error {
	defer func() {
		h.flushing = false
		h.idle.Broadcast()
	}()
	for len(h.dirty) > 0 {
		batch := make([]statestore.Mutation, 0, len(h.dirty))
		for id := range h.dirty {
			e, ok := h.shapes[id]
			if !ok {
				batch = append(batch, statestore.Mutation{Kind: shapeKind, Key: id, Delete: true})
				continue
			}
			v, err := json.Marshal(e.Value.(*Shape))
			if err != nil {
				continue
			}
			batch = append(batch, statestore.Mutation{Kind: shapeKind, Key: id, Value: v})
		}
		clear(h.dirty)
		h.mu.Unlock()
		err := h.store.Apply(ctx, batch)
		h.mu.Lock()
		if err != nil {
			h.log.Warn("the duration history could not be stored; it goes on in memory", "shapes", len(batch), "err", err)
			return fmt.Errorf("storing the duration history: %w", err)
		}
	}
	return nil
}

// Flush waits for the writes in flight and writes what is left.
func (h *ShapeHistory) Flush(ctx context.Context) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	for h.flushing {
		h.idle.Wait()
	}
	h.flushing = true
	return h.writeLocked(ctx)
}
