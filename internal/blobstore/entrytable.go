package blobstore

import (
	"hash/maphash"
)

// entryTable finds an entry by its packed digest (blobKey): an open
// addressing table of entry pointers, the key read from the entry itself,
// so that a blob costs a slot of 8 bytes (at most twice over, at the
// lowest load) instead of a map's copy of its 48-byte key. Hashes are
// seeded per process: clients choose which digests they look up.
type entryTable struct {
	seed  maphash.Seed
	slots []*entry // len a power of two, or 0
	n     int
}

func newEntryTable() entryTable { return entryTable{seed: maphash.MakeSeed()} }

func (t *entryTable) hash(k *blobKey) uint64 {
	h := maphash.Bytes(t.seed, k.sum[:k.n])
	return h ^ (uint64(k.size)*0x9e3779b97f4a7c15 + uint64(k.fn)<<8 + uint64(k.n))
}

func (e *entry) is(k *blobKey) bool {
	return e.size == k.size && digestFn(e.fn) == k.fn && e.n == k.n && e.sum == k.sum
}

// find returns k's entry, or nil.
func (t *entryTable) find(k blobKey) *entry {
	if t.n == 0 {
		return nil
	}
	mask := uint64(len(t.slots) - 1)
	for i := t.hash(&k) & mask; ; i = (i + 1) & mask {
		e := t.slots[i]
		if e == nil || e.is(&k) {
			return e
		}
	}
}

// put sets e as the entry of its key, replacing any other.
func (t *entryTable) put(e *entry) {
	if (t.n+1)*4 > len(t.slots)*3 {
		t.grow()
	}
	k := e.key()
	mask := uint64(len(t.slots) - 1)
	for i := t.hash(&k) & mask; ; i = (i + 1) & mask {
		switch o := t.slots[i]; {
		case o == nil:
			t.slots[i] = e
			t.n++
			return
		case o.is(&k):
			t.slots[i] = e
			return
		}
	}
}

// del removes k's entry, if any, moving the entries after it back so that
// no lookup meets a hole before its entry.
func (t *entryTable) del(k blobKey) {
	if t.n == 0 {
		return
	}
	mask := uint64(len(t.slots) - 1)
	i := t.hash(&k) & mask
	for ; ; i = (i + 1) & mask {
		e := t.slots[i]
		if e == nil {
			return
		}
		if e.is(&k) {
			break
		}
	}
	t.slots[i] = nil
	t.n--
	for j := (i + 1) & mask; t.slots[j] != nil; j = (j + 1) & mask {
		ek := t.slots[j].key()
		home := t.hash(&ek) & mask
		// The entry at j may fill the hole at i if its home is not in
		// the (cyclic) range (i, j].
		if (j > i && (home <= i || home > j)) || (j < i && home <= i && home > j) {
			t.slots[i], t.slots[j] = t.slots[j], nil
			i = j
		}
	}
}

func (t *entryTable) grow() {
	old := t.slots
	t.slots = make([]*entry, max(2*len(old), 64))
	t.n = 0
	for _, e := range old {
		if e != nil {
			t.put(e)
		}
	}
}

// findAll sets found[i] to ks[i]'s entry, or nil, for every i. It reads
// every key's home slot before it reads any entry, so that the memory
// loads of different keys (each a likely cache miss in a big table)
// overlap instead of waiting on one another; home is scratch space, at
// least len(ks) long.
func (t *entryTable) findAll(ks []blobKey, found []*entry, home []uint64) {
	if t.n == 0 {
		clear(found[:len(ks)])
		return
	}
	mask := uint64(len(t.slots) - 1)
	for i := range ks {
		h := t.hash(&ks[i]) & mask
		home[i], found[i] = h, t.slots[h]
	}
	for i := range ks {
		for j, e := home[i], found[i]; ; {
			if e == nil || e.is(&ks[i]) {
				found[i] = e
				break
			}
			j = (j + 1) & mask
			e = t.slots[j]
		}
	}
}
