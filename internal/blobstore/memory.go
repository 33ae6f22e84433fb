package blobstore

import (
	"container/list"
	"context"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gantry-build/gantry/internal/digest"
)

// Memory is a Store held in RAM, bounded in bytes with LRU eviction.
type Memory struct {
	maxBytes int64
	// life is the promise kept to FindMissing's callers (lifetime.go);
	// refused counts the blobs refused to keep it.
	life    Lifetime
	refused atomic.Int64

	mu    sync.Mutex
	total int64
	lru   *list.List // of *memEntry, most recently used at the front
	index map[digest.Digest]*list.Element
}

type memEntry struct {
	d      digest.Digest
	chunks memChunks
	// keepUntil: FindMissing reported the blob present; it is not
	// evicted before then while others can go.
	keepUntil time.Time
}

// memChunkSize is the size of the pieces a blob is held in. A blob is
// never one large slice: its writer allocates each piece once, as the
// bytes arrive (the digest gives the size, so nothing is ever grown and
// copied), and no allocation is larger than this, so a big blob costs
// neither a large contiguous span nor a copy, and its memory is what it
// holds, not a doubling buffer's slack.
const memChunkSize = 1 << 20

// memChunks is a blob's bytes: every piece memChunkSize long but the last.
type memChunks [][]byte

func (c memChunks) size() int64 {
	if len(c) == 0 {
		return 0
	}
	return int64(len(c)-1)*memChunkSize + int64(len(c[len(c)-1]))
}

var _ Trusting = (*Memory)(nil)

// NewMemory returns an in-memory store holding at most maxBytes of blob
// data (0 means unbounded).
func NewMemory(maxBytes int64) *Memory {
	return NewMemoryLifetime(maxBytes, Lifetime{})
}

// NewMemoryLifetime is NewMemory keeping the lifetime promise life.
func NewMemoryLifetime(maxBytes int64, life Lifetime) *Memory {
	return &Memory{maxBytes: maxBytes, life: life, lru: list.New(), index: make(map[digest.Digest]*list.Element)}
}

// FindMissing implements Store.
func (m *Memory) FindMissing(_ context.Context, ds []digest.Digest) ([]digest.Digest, error) {
	var missing []digest.Digest
	var until time.Time
	if m.life.Min > 0 {
		until = m.life.now().Add(m.life.Min)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, d := range ds {
		if e, ok := m.index[d]; ok {
			m.lru.MoveToFront(e)
			if ent := e.Value.(*memEntry); until.After(ent.keepUntil) {
				ent.keepUntil = until
			}
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
	chunks := e.Value.(*memEntry).chunks
	offset = min(offset, chunks.size())
	return &memReader{chunks: chunks, i: int(offset / memChunkSize), off: int(offset % memChunkSize)}, nil
}

// memReader streams a blob's chunks without copying them into one.
type memReader struct {
	chunks memChunks
	i, off int // the next byte is chunks[i][off]
}

func (r *memReader) next() []byte {
	for r.i < len(r.chunks) && r.off == len(r.chunks[r.i]) {
		r.i, r.off = r.i+1, 0
	}
	if r.i == len(r.chunks) {
		return nil
	}
	return r.chunks[r.i][r.off:]
}

func (r *memReader) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		c := r.next()
		if c == nil {
			break
		}
		k := copy(p[n:], c)
		n += k
		r.off += k
	}
	if n == 0 && len(p) > 0 {
		return 0, io.EOF
	}
	return n, nil
}

// WriteTo hands w the chunks themselves, which w must not keep or change
// (the io.Writer contract).
func (r *memReader) WriteTo(w io.Writer) (int64, error) {
	var total int64
	for c := r.next(); c != nil; c = r.next() {
		n, err := w.Write(c)
		total += int64(n)
		r.off += n
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

func (r *memReader) Close() error { r.chunks = nil; return nil }

// Create implements Store.
func (m *Memory) Create(ctx context.Context, d digest.Digest) (Writer, error) {
	tw, err := m.CreateTrusted(ctx, d)
	if err != nil {
		return nil, err
	}
	return NewChecked(d, tw), nil
}

// CreateTrusted implements Trusting.
func (m *Memory) CreateTrusted(_ context.Context, d digest.Digest) (TrustedWriter, error) {
	if err := m.roomFor(d); err != nil {
		return nil, err
	}
	return &memWriter{m: m, v: verifier{want: d}}, nil
}

// memWriter holds a blob's bytes its caller verifies (v only counts them).
type memWriter struct {
	m      *Memory
	v      verifier
	chunks memChunks // the last one may have room left
	done   bool      // committed or closed
}

func (w *memWriter) Write(p []byte) (int, error) {
	if w.done {
		return 0, errWriterDone
	}
	// The count refuses bytes beyond the digest's size, so the chunks
	// allocated below never add up to more than the blob.
	if err := w.v.count(p); err != nil {
		return 0, err
	}
	n := len(p)
	for len(p) > 0 {
		last := len(w.chunks) - 1
		if last < 0 || len(w.chunks[last]) == cap(w.chunks[last]) {
			held := int64(len(w.chunks)) * memChunkSize
			w.chunks = append(w.chunks, make([]byte, 0, min(memChunkSize, w.v.want.Size-held)))
			last++
		}
		c := w.chunks[last]
		k := copy(c[len(c):cap(c)], p)
		w.chunks[last], p = c[:len(c)+k], p[k:]
	}
	return n, nil
}

func (w *memWriter) Written() int64 { return w.v.n }

func (w *memWriter) CommitVerified(p Proof) error {
	if w.done {
		return errWriterDone
	}
	if err := p.Vouches(w.v.want, w.v.n); err != nil {
		return err
	}
	w.m.insert(w.v.want, w.chunks)
	w.chunks, w.done = nil, true
	return nil
}

func (w *memWriter) Close() error { w.chunks, w.done = nil, true; return nil }

func (m *Memory) insert(d digest.Digest, chunks memChunks) {
	if d.IsEmpty() {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if e, ok := m.index[d]; ok {
		m.lru.MoveToFront(e)
		return
	}
	fresh := m.lru.PushFront(&memEntry{d: d, chunks: chunks})
	m.index[d] = fresh
	m.total += chunks.size()
	m.makeRoomLocked(0, fresh)
}

// makeRoomLocked evicts least recently used blobs until those left and
// reserve more bytes fit the bound, passing over fresh (a blob just
// stored) and blobs under the lifetime promise. It reports whether they
// fit; if not, the store stays over its bound rather than break the
// promise or drop fresh.
func (m *Memory) makeRoomLocked(reserve int64, fresh *list.Element) bool {
	over := func() bool { return m.maxBytes > 0 && m.total+reserve > m.maxBytes }
	if !over() {
		return true
	}
	var now time.Time
	if m.life.Min > 0 {
		now = m.life.now()
		// Evict nothing unless evicting what may go is enough.
		need := m.total + reserve - m.maxBytes
		for e := m.lru.Back(); e != nil && need > 0; e = e.Prev() {
			if ent := e.Value.(*memEntry); e != fresh && !ent.keepUntil.After(now) {
				need -= ent.chunks.size()
			}
		}
		if need > 0 {
			return false
		}
	}
	for e := m.lru.Back(); e != nil && over() && m.lru.Len() > 1; {
		ent := e.Value.(*memEntry)
		prev := e.Prev()
		if e != fresh && !ent.keepUntil.After(now) {
			m.lru.Remove(e)
			delete(m.index, ent.d)
			m.total -= ent.chunks.size()
		}
		e = prev
	}
	return !over()
}

// roomFor makes room for a new blob, or refuses it with a
// *LifetimeError when only promised blobs are left to evict.
func (m *Memory) roomFor(d digest.Digest) error {
	if m.life.Min <= 0 || m.maxBytes <= 0 || d.IsEmpty() || d.Size >= m.maxBytes {
		return nil // no eviction makes room for it: see Disk.roomForLocked
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.index[d]; ok || m.lru.Len() == 0 || m.makeRoomLocked(d.Size, nil) {
		return nil
	}
	m.refused.Add(1)
	return &LifetimeError{Digest: d, Min: m.life.Min}
}

// Refused reports how many blobs were refused since start because only
// blobs under the lifetime promise were left to evict.
func (m *Memory) Refused() int64 { return m.refused.Load() }

// Stats reports the number of blobs and bytes held.
func (m *Memory) Stats() (blobs int, bytes int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.index), m.total
}
