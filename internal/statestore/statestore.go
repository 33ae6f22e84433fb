// Package statestore makes the scheduler's promises durable. A Store holds
// records — (kind, key) -> value bytes, one table of the same shape in
// every backend — and applies batches of changes atomically. The scheduler
// encodes its own records; the store does not interpret values.
//
// Apply is called by many goroutines at once (every Execute, Poll and
// Complete); backends group-commit: the batches waiting while one commit
// is in flight go together in the next one, so durability costs one
// commit per round, not one per call.
package statestore

import (
	"context"
	"sort"
	"sync"
)

// Mutation is one change: Value replaces the record, or Delete removes it.
type Mutation struct {
	Kind   string
	Key    string
	Value  []byte
	Delete bool
}

// Store is a durable record store.
type Store interface {
	// Apply makes the batch durable, all of it or none, before it
	// returns. Batches from concurrent calls may share a commit; their
	// order is the order Apply was called in.
	Apply(ctx context.Context, batch []Mutation) error
	// Load calls fn for every record of kind, in key order.
	Load(ctx context.Context, kind string, fn func(key string, value []byte) error) error
	// Close flushes and releases the store.
	Close() error
}

// Viewer is a Store whose records can be read without a copy of each
// value: fn may keep value but must not change it. (The embedded store
// reads values back from its files: its View is its Load.)
type Viewer interface {
	Store
	View(ctx context.Context, kind string, fn func(key string, value []byte) error) error
}

// LoadShared reads the records of kind from store as Load does, through
// View when store is a Viewer: fn must not change value.
func LoadShared(ctx context.Context, store Store, kind string, fn func(key string, value []byte) error) error {
	if v, ok := store.(Viewer); ok {
		return v.View(ctx, kind, fn)
	}
	return store.Load(ctx, kind, fn)
}

// Getter is a Store that can read one record back, for a caller that
// does not keep in memory what it stored.
type Getter interface {
	Store
	// Get returns the value of (kind, key) as of the last commit, and
	// whether there is such a record. The caller may keep the value.
	Get(ctx context.Context, kind, key string) (value []byte, ok bool, err error)
}

// Pipeliner is a Store that can queue a batch without waiting for its
// commit, so that one caller can keep several commits in flight in order.
// Batches queued by Enqueue commit in the order Enqueue was called; if a
// batch's commit fails, no later one is reported as committed before it.
// Unlike Apply, Enqueue may keep the batch's values without copying them:
// the caller must not change them afterwards.
type Pipeliner interface {
	Store
	Enqueue(ctx context.Context, batch []Mutation) (wait func(context.Context) error, err error)
}

// Memory is a Store that keeps records in memory, for tests.
type Memory struct {
	mu      sync.Mutex
	records map[string]map[string][]byte
	// Commits counts Apply calls, for tests.
	Commits int
}

// NewMemory returns an empty Memory store.
func NewMemory() *Memory { return &Memory{records: map[string]map[string][]byte{}} }

// Apply implements Store.
func (m *Memory) Apply(_ context.Context, batch []Mutation) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.Commits++
	for _, mu := range batch {
		k := m.records[mu.Kind]
		if k == nil {
			k = map[string][]byte{}
			m.records[mu.Kind] = k
		}
		if mu.Delete {
			delete(k, mu.Key)
		} else {
			k[mu.Key] = append([]byte(nil), mu.Value...)
		}
	}
	return nil
}

// Load implements Store.
func (m *Memory) Load(_ context.Context, kind string, fn func(key string, value []byte) error) error {
	m.mu.Lock()
	keys := make([]string, 0, len(m.records[kind]))
	for k := range m.records[kind] {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	vals := make([][]byte, len(keys))
	for i, k := range keys {
		vals[i] = m.records[kind][k]
	}
	m.mu.Unlock()
	for i, k := range keys {
		if err := fn(k, vals[i]); err != nil {
			return err
		}
	}
	return nil
}

// Get implements Getter.
func (m *Memory) Get(_ context.Context, kind, key string) ([]byte, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	v, ok := m.records[kind][key]
	return append([]byte(nil), v...), ok, nil
}

var _ Getter = (*Memory)(nil)

// Close implements Store.
func (m *Memory) Close() error { return nil }
