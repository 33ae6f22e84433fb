package blobstore

import (
	"bytes"
	"container/list"
	"context"
	"io"
	"sync"

	"github.com/gantry-build/gantry/internal/digest"
)

// Memory is a Store held in RAM, bounded in bytes with LRU eviction.
type Memory struct {
	maxBytes int64

	mu    sync.Mutex
	total int64
	lru   *list.List // of *memEntry, most recently used at the front
	index map[digest.Digest]*list.Element
}

type memEntry struct {
	d    digest.Digest
	data []byte
}

var _ Store = (*Memory)(nil)

// NewMemory returns an in-memory store holding at most maxBytes of blob
// data (0 means unbounded).
func NewMemory(maxBytes int64) *Memory {
	return &Memory{maxBytes: maxBytes, lru: list.New(), index: make(map[digest.Digest]*list.Element)}
}

// FindMissing implements Store.
func (m *Memory) FindMissing(_ context.Context, ds []digest.Digest) ([]digest.Digest, error) {
	var missing []digest.Digest
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, d := range ds {
		if e, ok := m.index[d]; ok {
			m.lru.MoveToFront(e)
		} else if !d.IsEmpty() {
			missing = append(missing, d)
		}
	}
	return missing, nil
}

// Open implements Store.
func (m *Memory) Open(_ context.Context, d digest.Digest, offset int64) (io.ReadCloser, error) {
	if d.IsEmpty() {
		return emptyReader(), nil
	}
	m.mu.Lock()
	e, ok := m.index[d]
	if ok {
		m.lru.MoveToFront(e)
	}
	m.mu.Unlock()
	if !ok {
		return nil, ErrNotFound
	}
	if offset < 0 {
		return nil, negativeOffset(d, offset)
	}
	data := e.Value.(*memEntry).data
	if offset > int64(len(data)) {
		offset = int64(len(data))
	}
	return io.NopCloser(bytes.NewReader(data[offset:])), nil
}

// Create implements Store.
func (m *Memory) Create(_ context.Context, d digest.Digest) (Writer, error) {
	return &memWriter{m: m, v: newVerifier(d), buf: make([]byte, 0, min(d.Size, 1<<20))}, nil
}

type memWriter struct {
	m    *Memory
	v    verifier
	buf  []byte
	done bool // committed or closed
}

func (w *memWriter) Write(p []byte) (int, error) {
	if w.done {
		return 0, errWriterDone
	}
	if err := w.v.write(p); err != nil {
		return 0, err
	}
	w.buf = append(w.buf, p...)
	return len(p), nil
}

func (w *memWriter) Written() int64 { return w.v.n }

func (w *memWriter) Commit() error {
	if w.done {
		return errWriterDone
	}
	if err := w.v.check(); err != nil {
		return err
	}
	w.m.insert(w.v.want, w.buf)
	w.buf, w.done = nil, true
	return nil
}

func (w *memWriter) Close() error { w.buf, w.done = nil, true; return nil }

func (m *Memory) insert(d digest.Digest, data []byte) {
	if d.IsEmpty() {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if e, ok := m.index[d]; ok {
		m.lru.MoveToFront(e)
		return
	}
	m.index[d] = m.lru.PushFront(&memEntry{d: d, data: data})
	m.total += int64(len(data))
	for m.maxBytes > 0 && m.total > m.maxBytes && m.lru.Len() > 1 {
		back := m.lru.Back()
		ent := back.Value.(*memEntry)
		m.lru.Remove(back)
		delete(m.index, ent.d)
		m.total -= int64(len(ent.data))
	}
}

// Stats reports the number of blobs and bytes held.
func (m *Memory) Stats() (blobs int, bytes int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.index), m.total
}
