package blobstore

import (
	"container/list"

	"github.com/gantry-build/gantry/internal/digest"
)

// entry is the index entry of a blob: where it is and when it was used.
type entry struct {
	d    digest.Digest
	elem *list.Element
	seg  *segment // nil: the blob has its own file
	off  int64    // offset of the blob's record in seg
	used uint64   // clock at the last store or use
	// readers counts the Open calls that hold (or are opening) the
	// blob's file; an evicted file with readers is never recycled.
	readers int
}

// blobIndex is what a disk store knows of its blobs: where each is, in
// least recently used order with a use clock, their total size, and the
// digests whose file or record is being written or removed (busy). It is
// not safe for concurrent use: the store holds its lock around every call.
type blobIndex struct {
	lru   *list.List // of *entry, most recently used at the front
	m     map[digest.Digest]*entry
	total int64
	// clock ticks on every store and use of a blob.
	clock uint64
	// busy marks digests whose file or record is being created, or whose
	// file is being removed, outside the lock; the channel is closed when
	// that is over. A digest is never both indexed and busy.
	busy map[digest.Digest]chan struct{}
	// dropped counts the entries evicted since start.
	dropped int64
}

func newBlobIndex() *blobIndex {
	return &blobIndex{lru: list.New(), m: make(map[digest.Digest]*entry), busy: make(map[digest.Digest]chan struct{})}
}

// get returns d's entry.
func (x *blobIndex) get(d digest.Digest) (*entry, bool) {
	e, ok := x.m[d]
	return e, ok
}

// holds reports whether e is still its digest's entry.
func (x *blobIndex) holds(e *entry) bool { return x.m[e.d] == e }

// use marks e as just used.
func (x *blobIndex) use(e *entry) {
	x.lru.MoveToFront(e.elem)
	e.used = x.tick()
}

// tick advances the use clock and returns its new value.
func (x *blobIndex) tick() uint64 {
	x.clock++
	return x.clock
}

// add indexes e as the most recently used blob.
func (x *blobIndex) add(e *entry) {
	e.elem = x.lru.PushFront(e)
	e.used = x.tick()
	x.insert(e)
}

// addOldest indexes e as the least recently used blob so far, without a
// use stamp (see stamp): start-up adds the blobs newest first.
func (x *blobIndex) addOldest(e *entry) {
	e.elem = x.lru.PushBack(e)
	x.insert(e)
}

func (x *blobIndex) insert(e *entry) {
	x.m[e.d] = e
	x.total += e.d.Size
	if e.seg != nil {
		e.seg.entries = append(e.seg.entries, e)
	}
}

// stamp gives every entry a use stamp, oldest first.
func (x *blobIndex) stamp() {
	for el := x.lru.Back(); el != nil; el = el.Prev() {
		el.Value.(*entry).used = x.tick()
	}
}

// remove drops e from the index.
func (x *blobIndex) remove(e *entry) {
	x.lru.Remove(e.elem)
	delete(x.m, e.d)
	x.total -= e.d.Size
}

// evict is remove, counted as an eviction.
func (x *blobIndex) evict(e *entry) {
	x.remove(e)
	x.dropped++
}

// oldest returns the least recently used entry, or nil.
func (x *blobIndex) oldest() *entry {
	if el := x.lru.Back(); el != nil {
		return el.Value.(*entry)
	}
	return nil
}

// len is the number of blobs indexed.
func (x *blobIndex) len() int { return len(x.m) }

// markBusy marks d busy; it must not be.
func (x *blobIndex) markBusy(d digest.Digest) { x.busy[d] = make(chan struct{}) }

// busyUntil returns the channel closed when d stops being busy, if it is.
func (x *blobIndex) busyUntil(d digest.Digest) (<-chan struct{}, bool) {
	ch, ok := x.busy[d]
	return ch, ok
}

// idle ends d's busy mark, waking those who wait for it.
func (x *blobIndex) idle(d digest.Digest) {
	close(x.busy[d])
	delete(x.busy, d)
}
