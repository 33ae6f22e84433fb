package blobstore

import (
	"encoding/hex"
	"strings"

	"github.com/gantry-build/gantry/internal/digest"
)

// entry is the index entry of a blob: which blob, where it is and when it
// was used. A store holds one per blob, so it is kept small (96 bytes, a
// size class of its own; TestEntryFitsItsSizeClass): the hash in binary
// instead of a hex string, the LRU links inside it.
type entry struct {
	// sum is the hash's bytes, n of them, when it is canonical lowercase
	// hex of at most 32 bytes (SHA256, BLAKE3, SHA1, MD5); otherwise odd
	// holds the whole digest.
	sum  [32]byte
	size int64
	// readers counts the Open calls that hold (or are opening) the
	// blob's file; an evicted file with readers is never recycled.
	readers int32
	fn      uint8
	n       uint8
	// promised: FindMissing reported the blob present since it was
	// stored; it is kept for the store's Lifetime after its last use
	// (see promisedLocked). In the padding: the entry does not grow.
	promised bool
	// prev and next link the index's LRU ring; nil when not indexed.
	prev, next *entry
	seg        *segment // nil: the blob has its own file
	off        int64    // offset of the blob's record in seg
	used       uint64   // clock at the last store or use
	odd        *digest.Digest
}

// blobKey identifies a blob whose hash packs into an entry (see entry.sum).
type blobKey struct {
	sum  [32]byte
	size int64
	fn   digest.Function
	n    uint8
}

// packKey returns d's key, or false if d's hash does not pack: longer
// than 32 bytes (SHA384, SHA512), or not lowercase hex.
func packKey(d digest.Digest) (blobKey, bool) {
	h := d.Hash
	if len(h) > 64 || len(h)%2 != 0 || d.Function < 0 || d.Function > 255 {
		return blobKey{}, false
	}
	k := blobKey{size: d.Size, fn: d.Function, n: uint8(len(h) / 2)}
	// Every lookup decodes its digest (a batch read, thousands a call):
	// a table and one check for the whole hash, not a branch per digit.
	bad := byte(0)
	for i := 0; i < len(h); i += 2 {
		hi, lo := hexValue[h[i]], hexValue[h[i+1]]
		bad |= hi | lo
		k.sum[i/2] = hi<<4 | lo&0xf
	}
	if bad&notHex != 0 {
		return blobKey{}, false
	}
	return k, true
}

// notHex marks the bytes that are not lowercase hex digits in hexValue.
const notHex = 0x80

// hexValue is each byte's value as a lowercase hex digit, or notHex.
var hexValue = func() (t [256]byte) {
	for c := range t {
		switch {
		case c >= '0' && c <= '9':
			t[c] = byte(c - '0')
		case c >= 'a' && c <= 'f':
			t[c] = byte(c - 'a' + 10)
		default:
			t[c] = notHex
		}
	}
	return t
}()

// newEntry returns an entry for blob d at (seg, off); seg nil: its own
// file.
func newEntry(d digest.Digest, seg *segment, off int64) *entry {
	e := &entry{size: d.Size, seg: seg, off: off}
	if k, ok := packKey(d); ok {
		e.sum, e.fn, e.n = k.sum, uint8(k.fn), k.n
	} else {
		// Cloned: the hash may point into a request's buffers.
		e.odd = &digest.Digest{Function: d.Function, Hash: strings.Clone(d.Hash), Size: d.Size}
	}
	return e
}

func digestFn(b uint8) digest.Function { return digest.Function(b) }

func (e *entry) key() blobKey {
	return blobKey{sum: e.sum, size: e.size, fn: digestFn(e.fn), n: e.n}
}

// digest returns e's blob's digest (its hash as a new string).
func (e *entry) digest() digest.Digest {
	if e.odd != nil {
		return *e.odd
	}
	return digest.Digest{Function: digestFn(e.fn), Hash: hex.EncodeToString(e.sum[:e.n]), Size: e.size}
}

// recordLen is recordLen of e's digest.
func (e *entry) recordLen() int64 {
	hashBytes := int64(e.n)
	if e.odd != nil {
		hashBytes = int64(len(e.odd.Hash) / 2)
	}
	return recFixedHdr + hashBytes + 4 + e.size
}

// blobIndex is what a disk store knows of its blobs: where each is, in
// least recently used order with a use clock, their total size, and the
// digests whose file or record is being written or removed (busy). It is
// not safe for concurrent use: the store holds its lock around every call.
type blobIndex struct {
	// root links the LRU ring: root.next is the most recently used
	// entry, root.prev the least.
	root entry
	m    entryTable
	// oddM holds the entries whose digests do not pack.
	oddM  map[digest.Digest]*entry
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
	x := &blobIndex{m: newEntryTable(), oddM: make(map[digest.Digest]*entry), busy: make(map[digest.Digest]chan struct{})}
	x.root.prev, x.root.next = &x.root, &x.root
	return x
}

// get returns d's entry.
func (x *blobIndex) get(d digest.Digest) (*entry, bool) {
	var e *entry
	if k, ok := packKey(d); ok {
		e = x.m.find(k)
	} else {
		e = x.oddM[d]
	}
	return e, e != nil
}

// getAll sets found[i] to ds[i]'s entry, or nil, for every i: get for
// many digests at once, their table lookups overlapped (see
// entryTable.findAll).
func (x *blobIndex) getAll(ds []digest.Digest, found []*entry) {
	ks := make([]blobKey, 0, len(ds))
	at := make([]int, 0, len(ds)) // ks[j] is the key of ds[at[j]]
	for i, d := range ds {
		if k, ok := packKey(d); ok {
			ks, at = append(ks, k), append(at, i)
		} else {
			found[i] = x.oddM[d]
		}
	}
	hits, home := make([]*entry, len(ks)), make([]uint64, len(ks))
	x.m.findAll(ks, hits, home)
	for j, e := range hits {
		found[at[j]] = e
	}
}

// holds reports whether e is still its digest's entry.
func (x *blobIndex) holds(e *entry) bool {
	if e.odd != nil {
		return x.oddM[*e.odd] == e
	}
	return x.m.find(e.key()) == e
}

// use marks e as just used.
func (x *blobIndex) use(e *entry) {
	if e.prev != nil && x.root.next != e {
		x.unlink(e)
		x.linkAfter(&x.root, e)
	}
	e.used = x.tick()
}

// tick advances the use clock and returns its new value.
func (x *blobIndex) tick() uint64 {
	x.clock++
	return x.clock
}

// add indexes e as the most recently used blob.
func (x *blobIndex) add(e *entry) {
	x.linkAfter(&x.root, e)
	e.used = x.tick()
	x.insert(e)
}

// addOldest indexes e as the least recently used blob so far, without a
// use stamp (see stamp): start-up adds the blobs newest first.
func (x *blobIndex) addOldest(e *entry) {
	x.linkAfter(x.root.prev, e)
	x.insert(e)
}

func (x *blobIndex) insert(e *entry) {
	if e.odd != nil {
		x.oddM[*e.odd] = e
	} else {
		x.m.put(e)
	}
	x.total += e.size
	if e.seg != nil {
		e.seg.entries = append(e.seg.entries, e)
	}
}

// linkAfter puts e into the LRU ring after at.
func (x *blobIndex) linkAfter(at, e *entry) {
	e.prev, e.next = at, at.next
	at.next.prev = e
	at.next = e
}

// unlink takes e out of the LRU ring.
func (x *blobIndex) unlink(e *entry) {
	e.prev.next = e.next
	e.next.prev = e.prev
	e.prev, e.next = nil, nil
}

// stamp gives every entry a use stamp, oldest first.
func (x *blobIndex) stamp() {
	for e := x.root.prev; e != &x.root; e = e.prev {
		e.used = x.tick()
	}
}

// remove drops e from the index.
func (x *blobIndex) remove(e *entry) {
	if e.prev == nil {
		return // not indexed (any more)
	}
	x.unlink(e)
	if e.odd != nil {
		delete(x.oddM, *e.odd)
	} else {
		x.m.del(e.key())
	}
	x.total -= e.size
}

// evict is remove, counted as an eviction.
func (x *blobIndex) evict(e *entry) {
	x.remove(e)
	x.dropped++
}

// oldest returns the least recently used entry, or nil.
func (x *blobIndex) oldest() *entry {
	if e := x.root.prev; e != &x.root {
		return e
	}
	return nil
}

// len is the number of blobs indexed.
func (x *blobIndex) len() int { return x.m.n + len(x.oddM) }

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
