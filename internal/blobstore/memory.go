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
//
// The bound covers the uploads in flight as well as the blobs held: an
// upload reserves its size when it starts, and blobs are evicted for it
// then, not after its bytes have arrived. The chunks of evicted blobs are
// kept as spares (memchunks.go) for the next uploads to fill, within the
// same bound, so a full store neither leaves evicted blobs to the
// collector nor asks the kernel for fresh pages for every upload.
type Memory struct {
	maxBytes int64
	// life is the promise kept to FindMissing's callers (lifetime.go);
	// refused counts the blobs refused to keep it.
	life    Lifetime
	refused atomic.Int64

	mu      sync.Mutex
	total   int64      // bytes of the blobs held
	pending int64      // bytes reserved by uploads in flight
	filling int64      // bytes of the full-size chunks uploads in flight have taken
	lru     *list.List // of *memEntry, most recently used at the front
	index   map[digest.Digest]*list.Element
	spares  spareChunks
}

type memEntry struct {
	d      digest.Digest
	chunks memChunks
	// keepUntil: FindMissing reported the blob present; it is not
	// evicted before then while others can go.
	keepUntil time.Time
	// readers counts the blob's open readers; an evicted blob's chunks
	// become spares only when the last one closes.
	readers int
	evicted bool
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
	if offset < 0 {
		return nil, negativeOffset(d, offset)
	}
	m.mu.Lock()
	e, ok := m.index[d]
	var ent *memEntry
	var chunks memChunks
	if ok {
		m.lru.MoveToFront(e)
		ent = e.Value.(*memEntry)
		ent.readers++
		chunks = ent.chunks
	}
	m.mu.Unlock()
	if !ok {
		return nil, ErrNotFound
	}
	offset = min(offset, chunks.size())
	return &memReader{m: m, ent: ent, chunks: chunks, i: int(offset / memChunkSize), off: int(offset % memChunkSize)}, nil
}

// closeReader ends one of ent's readers.
func (m *Memory) closeReader(ent *memEntry) {
	m.mu.Lock()
	defer m.mu.Unlock()
	ent.readers--
	if ent.readers == 0 && ent.evicted {
		m.spareLocked(ent.chunks)
		ent.chunks = nil
	}
}

// Create implements Store.
func (m *Memory) Create(ctx context.Context, d digest.Digest) (Writer, error) {
	tw, err := m.CreateTrusted(ctx, d)
	if err != nil {
		return nil, err
	}
	return NewChecked(d, tw), nil
}

// CreateTrusted implements Trusting. The blob's size is reserved now
// (see Memory), or the blob refused with a *LifetimeError when only
// promised blobs are left to evict for it.
func (m *Memory) CreateTrusted(_ context.Context, d digest.Digest) (TrustedWriter, error) {
	reserved, err := m.reserve(d)
	if err != nil {
		return nil, err
	}
	return &memWriter{m: m, v: verifier{want: d}, reserved: reserved}, nil
}

// reserve counts d's size as in flight and evicts blobs to keep the held
// and the reserved bytes within the bound. It reports the bytes reserved:
// none for an unbounded store, the empty blob, a blob already held, or
// one the bound cannot hold (nothing is evicted for it until it is
// stored, if it ever is: see Disk.roomForLocked).
func (m *Memory) reserve(d digest.Digest) (int64, error) {
	if m.maxBytes <= 0 || d.IsEmpty() || d.Size >= m.maxBytes {
		return 0, nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if e, ok := m.index[d]; ok {
		m.lru.MoveToFront(e)
		return 0, nil
	}
	m.pending += d.Size
	if !m.makeRoomLocked(0, nil) && m.life.Min > 0 && m.lru.Len() > 0 {
		// Only promised blobs are left to evict.
		m.pending -= d.Size
		m.refused.Add(1)
		return 0, &LifetimeError{Digest: d, Min: m.life.Min}
	}
	return d.Size, nil
}

// insert stores a blob whose upload reserved reserved bytes and took
// full bytes of full-size chunks.
func (m *Memory) insert(d digest.Digest, chunks memChunks, reserved, full int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.pending -= reserved
	m.filling -= full
	if d.IsEmpty() {
		return
	}
	if e, ok := m.index[d]; ok {
		// Uploaded twice at once: the copy nobody has seen is spare.
		m.lru.MoveToFront(e)
		m.spareLocked(chunks)
		return
	}
	fresh := m.lru.PushFront(&memEntry{d: d, chunks: chunks})
	m.index[d] = fresh
	m.total += chunks.size()
	m.makeRoomLocked(0, fresh)
}

// abandon ends an upload, as insert would, that will not be stored.
func (m *Memory) abandon(chunks memChunks, reserved, full int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.pending -= reserved
	m.filling -= full
	m.spareLocked(chunks)
}

// makeRoomLocked evicts least recently used blobs until those left, the
// uploads in flight and reserve more bytes fit the bound, passing over
// fresh (a blob just stored) and blobs under the lifetime promise. It
// reports whether they fit; if not, the store stays over its bound rather
// than break the promise or drop fresh.
func (m *Memory) makeRoomLocked(reserve int64, fresh *list.Element) bool {
	over := func() bool { return m.maxBytes > 0 && m.total+m.pending+reserve > m.maxBytes }
	if !over() {
		return true
	}
	var now time.Time
	if m.life.Min > 0 {
		now = m.life.now()
		// Evict nothing unless evicting what may go is enough.
		need := m.total + m.pending + reserve - m.maxBytes
		for e := m.lru.Back(); e != nil && need > 0; e = e.Prev() {
			if ent := e.Value.(*memEntry); e != fresh && !ent.keepUntil.After(now) {
				need -= ent.chunks.size()
			}
		}
		if need > 0 {
			return false
		}
	}
	for e := m.lru.Back(); e != nil && over(); {
		ent := e.Value.(*memEntry)
		prev := e.Prev()
		if e != fresh && !ent.keepUntil.After(now) {
			m.evictLocked(e)
		}
		e = prev
	}
	return !over()
}

// evictLocked drops the blob of e. Its chunks become spares now, or when
// its last reader closes.
func (m *Memory) evictLocked(e *list.Element) {
	ent := e.Value.(*memEntry)
	m.lru.Remove(e)
	delete(m.index, ent.d)
	m.total -= ent.chunks.size()
	ent.evicted = true
	if ent.readers == 0 {
		m.spareLocked(ent.chunks)
		ent.chunks = nil
	}
}

// spareLocked keeps chunks' full-size pieces for the next uploads, as
// long as the blobs held, the chunks uploads have taken and the spares
// together stay within the bound; the rest go to the collector. (Uploads
// take spares before new memory, and the bytes they reserved are within
// the bound, so memory held stays within it.)
func (m *Memory) spareLocked(chunks memChunks) {
	for _, c := range chunks {
		if m.maxBytes <= 0 || m.total+m.filling+m.spares.bytes()+memChunkSize > m.maxBytes {
			return
		}
		if cap(c) == memChunkSize {
			m.spares.put(c)
		}
	}
}

// chunk returns an empty chunk of capacity n for an upload: a spare if n
// is a full chunk and one is left, else a new one. The upload counts the
// full-size ones it took to insert or abandon.
func (m *Memory) chunk(n int64) []byte {
	if n == memChunkSize {
		m.mu.Lock()
		m.filling += n
		c := m.spares.get()
		m.mu.Unlock()
		if c != nil {
			return c
		}
	}
	return make([]byte, 0, n)
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

// memoryUsage is what a Memory store's bytes are.
type memoryUsage struct {
	Held     int64 // the blobs stored
	Reserved int64 // the sizes of the uploads in flight, reserved at their start
	Filling  int64 // the full-size chunks those uploads have taken so far
	Spare    int64 // evicted blobs' chunks kept for uploads
}

// usage reports the store's bytes. Held and Reserved together, and Held,
// Filling and Spare together, stay within the bound, but for blobs
// larger than the bound and blobs under the lifetime promise, which the
// store keeps and goes over it.
func (m *Memory) usage() memoryUsage {
	m.mu.Lock()
	defer m.mu.Unlock()
	return memoryUsage{Held: m.total, Reserved: m.pending, Filling: m.filling, Spare: m.spares.bytes()}
}
