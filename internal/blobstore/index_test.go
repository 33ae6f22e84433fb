package blobstore

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"unsafe"

	"github.com/gantry-build/gantry/internal/digest"
)

// TestBlobIndexAlone exercises the index without a store: least recently
// used order under use, the total size, the use clock, segments' entries,
// evictions counted, and busy marks that wake their waiters.
func TestBlobIndexAlone(t *testing.T) {
	x := newBlobIndex()
	d := func(i int) digest.Digest {
		data := []byte(fmt.Sprint("blob", i))
		return digest.Compute(digest.SHA256, data)
	}
	// Start-up adds the newest first, then stamps them oldest first.
	g := &segment{}
	for i := range 3 {
		e := newEntry(d(i), nil, 0)
		if i == 1 {
			e.seg = g
		}
		x.addOldest(e)
	}
	x.stamp()
	if o := x.oldest(); o.digest() != d(2) || o.used != 1 {
		t.Fatalf("oldest %v used %d, want %v used 1", o.digest(), o.used, d(2))
	}
	if len(g.entries) != 1 || g.entries[0].digest() != d(1) {
		t.Fatalf("segment entries %v, want blob 1's", g.entries)
	}
	e2, ok := x.get(d(2))
	if !ok {
		t.Fatal("blob 2 not indexed")
	}
	x.use(e2)
	if o := x.oldest(); o.digest() != d(1) {
		t.Fatalf("after using blob 2 the oldest is %v, want blob 1", o.digest())
	}
	if e2.used != x.clock {
		t.Fatalf("a use stamped %d, the clock is at %d", e2.used, x.clock)
	}
	x.add(newEntry(d(3), nil, 0))
	want := d(0).Size + d(1).Size + d(2).Size + d(3).Size
	if x.len() != 4 || x.total != want {
		t.Fatalf("%d blobs, %d bytes; want 4, %d", x.len(), x.total, want)
	}
	e1, _ := x.get(d(1))
	x.evict(e1)
	x.remove(e2)
	if _, ok := x.get(d(1)); ok || x.holds(e2) || x.len() != 2 || x.total != want-d(1).Size-d(2).Size || x.dropped != 1 {
		t.Fatalf("after evicting one and removing another: %d blobs, %d bytes, %d evicted", x.len(), x.total, x.dropped)
	}
	if o := x.oldest(); o.digest() != d(0) {
		t.Fatalf("oldest %v, want blob 0", o.digest())
	}

	if _, busy := x.busyUntil(d(9)); busy {
		t.Fatal("busy before being marked")
	}
	x.markBusy(d(9))
	ch, busy := x.busyUntil(d(9))
	if !busy {
		t.Fatal("not busy once marked")
	}
	x.idle(d(9))
	select {
	case <-ch:
	default:
		t.Fatal("idle did not wake the waiters")
	}
	if _, busy := x.busyUntil(d(9)); busy {
		t.Fatal("still busy once idle")
	}
}

// TestEntryFitsItsSizeClass pins the index entry's size: a store holds
// one per blob (millions on a large CAS), and each used to take about 280
// bytes with its list element, map key and hex hash.
func TestEntryFitsItsSizeClass(t *testing.T) {
	if n := unsafe.Sizeof(entry{}); n > 96 {
		t.Errorf("an index entry takes %d bytes, more than the 96-byte size class", n)
	}
	d := digest.Compute(digest.SHA256, []byte("blob"))
	if n := testing.AllocsPerRun(100, func() { newEntry(d, nil, 0) }); n != 1 {
		t.Errorf("indexing a SHA256 blob allocates %v times, want 1 (the entry; no hash string)", n)
	}
}

// TestBlobIndexDigestsThatDoNotPack indexes digests whose hashes are too
// long for an entry's 32 bytes (SHA384, SHA512) or not lowercase hex next
// to ones that pack, and finds each as itself only.
func TestBlobIndexDigestsThatDoNotPack(t *testing.T) {
	x := newBlobIndex()
	sha256 := digest.Compute(digest.SHA256, []byte("a"))
	upper := sha256
	upper.Hash = strings.ToUpper(upper.Hash)
	ds := []digest.Digest{
		sha256, upper,
		digest.Compute(digest.SHA1, []byte("a")), digest.Compute(digest.MD5, []byte("a")),
		digest.Compute(digest.SHA384, []byte("a")), digest.Compute(digest.SHA512, []byte("a")),
		digest.Compute(digest.BLAKE3, []byte("a")),
		{Function: digest.SHA256, Hash: sha256.Hash[:40], Size: 1}, // as long as a SHA1
	}
	for _, d := range ds {
		x.add(newEntry(d, nil, 0))
	}
	if x.len() != len(ds) {
		t.Fatalf("%d entries indexed, want %d", x.len(), len(ds))
	}
	for _, d := range ds {
		e, ok := x.get(d)
		if !ok || e.digest() != d || !x.holds(e) {
			t.Fatalf("%v: found %v, entry of %v", d, ok, e.digest())
		}
		if want := recordLen(d); e.recordLen() != want {
			t.Errorf("%v: record length %d, want %d", d, e.recordLen(), want)
		}
	}
	for _, d := range ds {
		e, _ := x.get(d)
		x.remove(e)
		if _, ok := x.get(d); ok || x.holds(e) {
			t.Fatalf("%v still indexed once removed", d)
		}
		x.remove(e) // twice: nothing more happens
	}
	if x.len() != 0 || x.total != 0 || x.oldest() != nil {
		t.Fatalf("emptied index holds %d blobs, %d bytes", x.len(), x.total)
	}
}

// TestEntryTableAgainstAMap runs random puts and deletes on the index's
// table next to a map: every entry stays findable after the deletes that
// move its neighbours back, and deleted ones are gone.
func TestEntryTableAgainstAMap(t *testing.T) {
	tab := newEntryTable()
	want := map[blobKey]*entry{}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 20000 {
		d := digest.Compute(digest.SHA256, []byte(fmt.Sprint(rng.IntN(3000))))
		k, _ := packKey(d)
		if rng.IntN(3) == 0 {
			tab.del(k)
			delete(want, k)
		} else {
			e := newEntry(d, nil, int64(i))
			tab.put(e)
			want[k] = e
		}
		if i%1000 == 0 || i == 19999 {
			if tab.n != len(want) {
				t.Fatalf("after %d steps the table holds %d, want %d", i, tab.n, len(want))
			}
			for k, e := range want {
				if got := tab.find(k); got != e {
					t.Fatalf("after %d steps %x finds %p, want %p", i, k.sum[:4], got, e)
				}
			}
			// findAll agrees with find, for keys held and keys not.
			var ks []blobKey
			for j := range 3000 {
				k, _ := packKey(digest.Compute(digest.SHA256, []byte(fmt.Sprint(j))))
				ks = append(ks, k)
			}
			found, home := make([]*entry, len(ks)), make([]uint64, len(ks))
			tab.findAll(ks, found, home)
			for j, k := range ks {
				if found[j] != want[k] {
					t.Fatalf("after %d steps findAll gives %x %p, want %p", i, k.sum[:4], found[j], want[k])
				}
			}
		}
	}
	for k := range want {
		tab.del(k)
	}
	for _, e := range tab.slots {
		if e != nil {
			t.Fatal("an entry left in the table after every delete")
		}
	}
}

// TestPackKeyEveryByte puts every byte value at an even and at an odd
// position of a SHA-256 hash: only lowercase hex digits pack, and every
// digest, packed or not, is given back as it was.
func TestPackKeyEveryByte(t *testing.T) {
	base := digest.Compute(digest.SHA256, []byte("a"))
	for c := range 256 {
		for _, pos := range []int{10, 63} {
			d := base
			d.Hash = base.Hash[:pos] + string([]byte{byte(c)}) + base.Hash[pos+1:]
			_, packed := packKey(d)
			if want := c >= '0' && c <= '9' || c >= 'a' && c <= 'f'; packed != want {
				t.Fatalf("byte %#x at %d: packs %v, want %v", c, pos, packed, want)
			}
			if got := newEntry(d, nil, 0).digest(); got != d {
				t.Fatalf("byte %#x at %d: entry gives back %v, want %v", c, pos, got, d)
			}
		}
	}
}
