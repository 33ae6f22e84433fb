package blobstore

import (
	"os"

	"github.com/gantry-build/gantry/internal/digest"
)

// evictionPolicy decides what leaves a bounded disk store, and what of an
// evicted segment is kept (see evictSegmentLocked).
type evictionPolicy struct {
	maxBytes int64 // 0: unbounded
}

// over reports whether the blobs indexed exceed the bound, so that the
// least recently used one must go (never the last one).
func (p evictionPolicy) over(x *blobIndex, reserve int64) bool {
	return p.maxBytes > 0 && x.total+reserve > p.maxBytes && x.len() > 1
}

// copiesForward reports whether e, a blob in the segment evicted because
// tail (the least recently used blob) is in it, is copied to the current
// segment rather than evicted: if it was used in the newest three
// quarters of the ticks between tail's last use and now (clock), or if
// it is under the lifetime promise (promised). tail itself always goes.
func (p evictionPolicy) copiesForward(e, tail *entry, clock uint64, promised bool) bool {
	return e != tail && (promised || e.used > tail.used+(clock-tail.used)/4)
}

// evictions is what evictLocked took out of the index: blob files to
// unlink or recycle, and segments whose store reference to drop.
type evictions struct {
	files []evictedFile
	segs  []*segment
}

// evictedFile is an evicted blob with a file of its own. reuse: nobody
// had it open when it was evicted, so the file may become a spare.
type evictedFile struct {
	d     digest.Digest
	reuse bool
}

// evictLocked drops least recently used blobs from the index until the
// store fits its bound. Blobs with their own file go one by one, and are
// marked busy until remove unlinks their files once the caller has
// released the lock. When the least recently used blob is packed, the
// oldest segment goes as a whole, its recently used blobs copied forward
// first (see evictSegmentLocked).
func (s *Disk) evictLocked() evictions {
	ev, _ := s.makeRoomLocked(0, nil)
	return ev
}

// makeRoomLocked evicts least recently used blobs until those left and
// reserve more bytes fit the store's bound. Blobs under the lifetime
// promise are passed over (moved to the recent end of the order, their
// use stamp kept), and so is fresh, a blob just stored. ok is false when
// nothing else was left to evict: the store stays over its bound rather
// than break the promise or drop fresh.
func (s *Disk) makeRoomLocked(reserve int64, fresh *entry) (ev evictions, ok bool) {
	if s.life.Min > 0 && s.policy.over(s.idx, reserve) {
		now := s.life.now()
		s.ticks.mark(now, s.idx.clock)
		s.cut = s.ticks.cutoff(now, s.life.Min)
		if !s.roomLeftLocked(reserve, fresh) {
			// Evicting what may go would not be enough: keep it.
			return ev, false
		}
	}
	passed := 0
	for s.policy.over(s.idx, reserve) {
		tail := s.idx.oldest()
		if tail == fresh || s.promisedLocked(tail) {
			if passed >= s.idx.len() {
				return ev, false
			}
			passed++
			s.idx.unlink(tail)
			s.idx.linkAfter(&s.idx.root, tail)
			continue
		}
		if tail.seg != nil {
			s.evictSegmentLocked(tail, &ev)
			continue
		}
		d := tail.digest()
		s.idx.evict(tail)
		s.idx.markBusy(d)
		ev.files = append(ev.files, evictedFile{d: d, reuse: tail.readers == 0})
	}
	return ev, true
}

// roomLeftLocked reports whether evicting the blobs that may go (not
// promised, not fresh) brings the store and reserve more bytes within
// its bound, looking at the least recently used first.
func (s *Disk) roomLeftLocked(reserve int64, fresh *entry) bool {
	need := s.idx.total + reserve - s.policy.maxBytes
	for e := s.idx.root.prev; e != &s.idx.root && need > 0; e = e.prev {
		if e != fresh && !s.promisedLocked(e) {
			need -= e.size
		}
	}
	return need <= 0
}

// datedLocked dates the use clock's ticks so far (see tickClock); every
// operation that uses or adds blobs calls it once it has.
func (s *Disk) datedLocked() {
	if s.life.Min > 0 {
		s.ticks.mark(s.life.now(), s.idx.clock)
	}
}

// promisedLocked reports whether e is under the lifetime promise: seen
// by FindMissing, and used since the clock value s.cut (see tickClock).
func (s *Disk) promisedLocked(e *entry) bool {
	return s.life.Min > 0 && e.promised && e.used > s.cut
}

// roomFor makes room for a new blob of size bytes, or refuses it with a
// *LifetimeError when only promised blobs are left to evict. A blob
// already stored needs no room.
func (s *Disk) roomFor(d digest.Digest) error {
	if s.life.Min <= 0 || s.policy.maxBytes <= 0 {
		return nil
	}
	s.mu.Lock()
	ev, err := s.roomForLocked(d)
	s.mu.Unlock()
	s.removeSoon(ev)
	return err
}

func (s *Disk) roomForLocked(d digest.Digest) (evictions, error) {
	if s.life.Min <= 0 || s.policy.maxBytes <= 0 || d.IsEmpty() || d.Size >= s.policy.maxBytes {
		// No eviction makes room for it: it is stored as without a
		// lifetime rather than refused in the setting's name.
		return evictions{}, nil
	}
	if e, ok := s.idx.get(d); ok {
		s.idx.use(e)
		s.datedLocked()
		return evictions{}, nil
	}
	ev, ok := s.makeRoomLocked(d.Size, nil)
	if !ok && s.idx.total+d.Size > s.policy.maxBytes {
		s.refused.Add(1)
		return ev, &LifetimeError{Digest: d, Min: s.life.Min}
	}
	return ev, nil
}

// remove unlinks (or keeps as spares) evicted blobs' files and drops
// evicted segments, outside the lock. Open readers keep their file:
// unlinking only drops the name, and a file with readers is not recycled.
func (s *Disk) remove(ev evictions) {
	for _, g := range ev.segs {
		g.unref()
	}
	for _, f := range ev.files {
		d := f.d
		if !f.reuse || !s.keepSpare(d) {
			os.Remove(s.path(d))
		}
		s.mu.Lock()
		s.idx.idle(d)
		s.mu.Unlock()
	}
}

// backgroundRemovals bounds the evictions unlinked in the background at
// once; beyond it, the caller unlinks them itself.
const backgroundRemovals = 2

// removeSoon is remove for evictions a new blob caused: their files are
// unlinked in the background, so that the upload that filled the store
// does not wait for the removal of older blobs (unlinking a large file
// drops its page cache and frees its blocks, tens of milliseconds for
// hundreds of MiB). The evicted digests stay busy until their files are
// gone, so a new copy of one waits and is not unlinked by mistake. When
// backgroundRemovals are already under way the caller removes its own,
// which keeps a store under a storm of evictions from piling them up.
func (s *Disk) removeSoon(ev evictions) {
	if len(ev.files) == 0 {
		s.remove(ev)
		return
	}
	select {
	case s.removers <- struct{}{}:
		s.removing.Add(1)
		go func() {
			defer s.removing.Done()
			s.removeFiles(ev, true)
			<-s.removers
		}()
	default:
		s.removeFiles(ev, false)
	}
}

// removeFiles is remove, running removeHook first.
func (s *Disk) removeFiles(ev evictions, background bool) {
	if s.removeHook != nil {
		s.removeHook(background)
	}
	s.remove(ev)
}

// settle waits for the evictions being removed in the background.
func (s *Disk) settle() { s.removing.Wait() }

// releaseLocked is release with s.mu held; the caller must pass what it
// returns to remove once it has released the lock.
func (s *Disk) releaseLocked(d digest.Digest, e *entry) evictions {
	var ev evictions
	if e != nil {
		s.idx.add(e)
		s.datedLocked()
		ev, _ = s.makeRoomLocked(0, e)
	}
	s.idx.idle(d)
	return ev
}

// evictSegmentLocked evicts the oldest segment; tail is the least recently
// used blob, which is packed. s.mu must be held. The policy:
//
//   - The store keeps one LRU order over all blobs, files and packed, and
//     a use clock: every store and every use (FindMissing, Open, a
//     duplicate write) stamps the blob with the next tick.
//   - When the least recently used blob is packed, the oldest segment goes
//     as a whole. Those of its blobs used recently, in the newest three
//     quarters of the ticks between the least recently used blob's last
//     use and now, are first appended again (their records copied as
//     they are) to the current segment; the others leave the store, the
//     least recently used blob always among them.
//
// So blobs nobody asked for in a while go in the order they were written,
// a segment at a time, while blobs in use survive the eviction of the
// segment they were written to, at the cost of one copy. With no reuse
// (every blob written once and read soon after) nothing is copied; with
// uniform reuse about a quarter of each evicted segment goes and the rest
// is copied. Copied blobs land in segments newer than all others and the
// least recently used blob goes once its segment is reached, so the loop
// in evictLocked ends.
func (s *Disk) evictSegmentLocked(tail *entry, ev *evictions) {
	old := s.packs.dropOldest()
	if old == nil {
		// Cannot happen: a packed blob's segment is live. Do not loop.
		s.idx.evict(tail)
		return
	}
	old.dead = true
	ev.segs = append(ev.segs, old)

	var candidates []*entry
	for _, e := range old.entries {
		if e.seg != old || !s.idx.holds(e) {
			continue // moved or gone
		}
		if s.policy.copiesForward(e, tail, s.idx.clock, s.promisedLocked(e)) {
			candidates = append(candidates, e)
			continue
		}
		s.idx.evict(e)
	}
	old.entries = nil
	if len(candidates) == 0 {
		return
	}
	// Copy the records. Many of them: read the whole segment at once
	// rather than a record at a time.
	var whole []byte
	if len(candidates) > 256 {
		whole = make([]byte, old.log.Size())
		if n, err := old.log.ReadAt(whole, 0); err != nil {
			whole = whole[:n]
		}
	}
	var keep []*entry
	var buf []byte
	for _, e := range candidates {
		n, rl := int64(len(buf)), e.recordLen()
		if whole != nil && e.off+rl <= int64(len(whole)) {
			buf = append(buf, whole[e.off:e.off+rl]...)
		} else {
			buf = append(buf, make([]byte, rl)...)
			if _, err := old.log.ReadAt(buf[n:], e.off); err != nil {
				buf = buf[:n]
			}
		}
		if int64(len(buf)) == n+rl && checkRecord(buf[n:], e.digest()) {
			keep = append(keep, e)
			continue
		}
		buf = buf[:n] // damaged: let it go
		s.idx.evict(e)
	}
	if len(keep) == 0 {
		return
	}
	g, off, err := s.packs.append(buf)
	if err == nil && s.fsync {
		err = g.log.Sync(off + int64(len(buf)))
	}
	if err != nil {
		for _, e := range keep {
			s.idx.evict(e)
		}
		if g != nil {
			g.unref()
		}
		return
	}
	for _, e := range keep {
		e.seg, e.off = g, off
		off += e.recordLen()
		g.entries = append(g.entries, e)
	}
	g.unref() // the store's reference keeps it
}
