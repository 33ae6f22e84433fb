package blobstore

import (
	"os"
	"testing"

	"github.com/gantry-build/gantry/internal/digest"
)

// TestSegmentsAlone exercises the pack segments without a store: appends
// go to the current segment until it is full, the oldest segment is taken
// out (the current one replaced when it is that one), and a reload finds
// every record in order, dropping empty segments.
func TestSegmentsAlone(t *testing.T) {
	dir := t.TempDir()
	record := func(seed string, n int) ([]byte, digest.Digest) {
		data := blob(seed, n)
		d := digest.Compute(digest.SHA256, data)
		rec := make([]byte, recordLen(d))
		hl := recordHeaderLen(d)
		copy(rec[hl:], data)
		putHeader(rec[:hl], d, rec[hl:])
		return rec, d
	}
	p := newSegments(dir, 3000, false)
	if p.current() != nil || len(p.live()) != 0 {
		t.Fatal("segments before the first append")
	}
	var want []digest.Digest
	var offs []int64
	var segs []*segment
	for i, seed := range []string{"a", "b", "c", "d"} {
		rec, d := record(seed, 1000)
		g, off, err := p.append(rec)
		if err != nil {
			t.Fatal(err)
		}
		g.unref()
		want, offs, segs = append(want, d), append(offs, off), append(segs, g)
		if i == 2 && g == segs[0] {
			t.Fatal("a third record of 1 KiB went to a segment of 3,000 bytes holding two")
		}
	}
	if segs[0] != segs[1] || segs[2] != segs[3] || offs[1] != recordLen(want[0]) {
		t.Fatalf("records placed in %v at %v", segs, offs)
	}
	if n := len(p.live()); n != 2 {
		t.Fatalf("%d live segments, want 2", n)
	}
	old := p.dropOldest()
	if old != segs[0] || len(p.live()) != 1 || p.current() != segs[2] {
		t.Fatal("dropOldest did not take the oldest segment out")
	}
	old.unref() // the list's reference: the file goes
	if _, err := os.Stat(old.log.Path()); !os.IsNotExist(err) {
		t.Fatalf("the dropped segment's file is still there: %v", err)
	}
	cur := p.dropOldest() // the current one: a new one takes over
	if cur != segs[2] || p.current() == nil || p.current() == cur {
		t.Fatal("dropping the current segment did not start a new one")
	}
	cur.log.Close() // keep the file, as a crash would

	q := newSegments(dir, 3000, false)
	recs, err := q.load()
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 || recs[0].d != want[2] || recs[1].d != want[3] || recs[1].off != offs[3] {
		t.Fatalf("reload found %v, want blobs c and d of the second segment", recs)
	}
	if n := len(q.live()); n != 1 {
		t.Fatalf("reload kept %d segments, want 1 (the empty one removed)", n)
	}
	rec, _ := record("e", 10)
	g, _, err := q.append(rec)
	if err != nil {
		t.Fatal(err)
	}
	g.unref()
	if g.id <= p.current().id {
		t.Fatalf("a new segment after reload reuses id %d", g.id)
	}
}
