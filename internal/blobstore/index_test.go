package blobstore

import (
	"fmt"
	"testing"

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
		e := &entry{d: d(i)}
		if i == 1 {
			e.seg = g
		}
		x.addOldest(e)
	}
	x.stamp()
	if o := x.oldest(); o.d != d(2) || o.used != 1 {
		t.Fatalf("oldest %v used %d, want %v used 1", o.d, o.used, d(2))
	}
	if len(g.entries) != 1 || g.entries[0].d != d(1) {
		t.Fatalf("segment entries %v, want blob 1's", g.entries)
	}
	e2, ok := x.get(d(2))
	if !ok {
		t.Fatal("blob 2 not indexed")
	}
	x.use(e2)
	if o := x.oldest(); o.d != d(1) {
		t.Fatalf("after using blob 2 the oldest is %v, want blob 1", o.d)
	}
	if e2.used != x.clock {
		t.Fatalf("a use stamped %d, the clock is at %d", e2.used, x.clock)
	}
	x.add(&entry{d: d(3)})
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
	if o := x.oldest(); o.d != d(0) {
		t.Fatalf("oldest %v, want blob 0", o.d)
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
