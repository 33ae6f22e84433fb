package blobstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"

	"github.com/gantry-build/gantry/internal/digest"
)

// spareList returns the spares held, oldest first.
func (s *Disk) spareList() []spare { return s.spares.held() }

// inode returns the inode number of path's file.
func inode(t *testing.T, path string) uint64 {
	t.Helper()
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return info.Sys().(*syscall.Stat_t).Ino
}

// spareStore opens a store that holds eight 2 MiB blobs, so that one such
// blob fits its spares (an eighth of the bound), and fills it.
func spareStore(t *testing.T) (*Disk, []digest.Digest) {
	t.Helper()
	s := openDisk(t, t.TempDir(), 8*spareTestSize+spareTestSize/2)
	var ds []digest.Digest
	for i := range 8 {
		ds = append(ds, mustPut(t, s, blob(fmt.Sprint("fill", i), spareTestSize), digest.SHA256))
	}
	if len(s.spareList()) != 0 {
		t.Fatal("spares before any eviction")
	}
	return s, ds
}

const spareTestSize = 2 << 20

// TestDiskRecyclesEvictedFiles checks that an evicted blob's file becomes
// a spare and that the next large upload is written into it, whether the
// new blob is smaller (the spare is truncated) or larger (it grows).
func TestDiskRecyclesEvictedFiles(t *testing.T) {
	ctx := context.Background()
	s, fill := spareStore(t)
	ino0 := inode(t, s.path(fill[0]))

	// b evicts fill[0]: its file becomes a spare, not unlinked.
	b := blob("b", spareTestSize)
	db := mustPut(t, s, b, digest.SHA256)
	s.settle()
	sp := s.spareList()
	if len(sp) != 1 || sp[0].size != spareTestSize {
		t.Fatalf("spares after an eviction = %+v, want fill[0]'s file", sp)
	}
	if got := inode(t, sp[0].name); got != ino0 {
		t.Fatalf("the spare is inode %d, fill[0]'s file was %d", got, ino0)
	}
	if has, _ := Has(ctx, s, fill[0]); has {
		t.Fatal("fill[0] still indexed after its eviction")
	}
	ino1 := inode(t, s.path(fill[1]))

	// c, smaller, is written into fill[0]'s file and evicts fill[1].
	c := blob("c", spareTestSize*3/4)
	dc := mustPut(t, s, c, digest.SHA256)
	if got := inode(t, s.path(dc)); got != ino0 {
		t.Errorf("c was written to inode %d, not into the spare %d", got, ino0)
	}
	mustGet(t, s, dc, c)
	s.settle()

	// d, larger, is written into fill[1]'s file.
	d := blob("d", spareTestSize*3/2)
	dd := mustPut(t, s, d, digest.SHA256)
	if got := inode(t, s.path(dd)); got != ino1 {
		t.Errorf("d was written to inode %d, not into the spare %d", got, ino1)
	}
	mustGet(t, s, dd, d)
	mustGet(t, s, db, b)
	s.settle()
	assertNoTemp(t, s)

	// A restart drops the spares and keeps every blob.
	s2 := openDisk(t, s.root, s.policy.maxBytes)
	assertNoTemp(t, s2)
	if len(s2.spareList()) != 0 {
		t.Error("spares after a restart")
	}
	for _, x := range []struct {
		d    digest.Digest
		data []byte
	}{{db, b}, {dc, c}, {dd, d}} {
		mustGet(t, s2, x.d, x.data)
	}
}

// TestDiskKeepsFilesInUse checks that an evicted file is not recycled
// while a reader has it open, nor when it has another name: the next
// uploads must not change what they read. A file whose reader has closed
// it is recycled.
func TestDiskKeepsFilesInUse(t *testing.T) {
	ctx := context.Background()
	s, fill := spareStore(t)
	data0 := blob("fill0", spareTestSize)
	data1 := blob("fill1", spareTestSize)
	ino := func(i int) uint64 { return inode(t, s.path(fill[i])) }
	ino0, ino1, ino2 := ino(0), ino(1), ino(2)

	// fill[0] is open; fill[1] has a second name; fill[2]'s reader has
	// closed it (a second Close must not count twice).
	r, err := s.Open(ctx, fill[0], 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Link(s.path(fill[1]), link); err != nil {
		t.Fatal(err)
	}
	r2, err := s.Open(ctx, fill[2], 0)
	if err != nil {
		t.Fatal(err)
	}
	r2.Close()
	r2.Close()
	// Least recently used first: fill[0], fill[1], fill[2], ...
	for _, d := range fill {
		s.FindMissing(ctx, []digest.Digest{d})
	}
	// Each upload evicts one of them; the fourth may take fill[2]'s file.
	var puts []digest.Digest
	for i := range 4 {
		puts = append(puts, mustPut(t, s, blob(fmt.Sprint("new", i), spareTestSize), digest.SHA256))
		s.settle()
	}
	for _, d := range fill[:3] {
		if has, _ := Has(ctx, s, d); has {
			t.Fatalf("%s not evicted; the test needs it gone", d)
		}
	}
	recycled := false
	for _, d := range puts {
		switch inode(t, s.path(d)) {
		case ino0, ino1:
			t.Errorf("a new blob was written into an evicted file still in use")
		case ino2:
			recycled = true
		}
	}
	if !recycled {
		t.Error("fill[2]'s file, closed by its reader, was not recycled")
	}
	got, err := io.ReadAll(r)
	if err != nil || !bytes.Equal(got, data0) {
		t.Errorf("the open reader of fill[0] read %d bytes (%v), not fill[0]", len(got), err)
	}
	if got, err := os.ReadFile(link); err != nil || !bytes.Equal(got, data1) {
		t.Errorf("the other name of fill[1] now holds %d bytes (%v), not fill[1]", len(got), err)
	}
	assertNoTemp(t, s)
}

// TestDiskSpareBounds checks that spares stay within their bounds: at
// most maxSpares files and an eighth of the store's bound, and none for
// blobs that are small or too large for that.
func TestDiskSpareBounds(t *testing.T) {
	s, _ := spareStore(t) // spares: at most 2 MiB and a bit
	for i := range 6 {
		mustPut(t, s, blob(fmt.Sprint("a", i), spareTestSize), digest.SHA256)
		s.settle()
		// A spare is taken by the next upload, so one is held at a time.
		if sp := s.spareList(); len(sp) != 1 {
			t.Fatalf("after eviction %d: %d spares, want 1", i, len(sp))
		}
	}
	// Blobs of other sizes find no spare that fits: the spares are
	// bounded in number and bytes.
	for i := range 4 {
		mustPut(t, s, blob(fmt.Sprint("big", i), spareTestSize*9/8), digest.SHA256)
		s.settle()
	}
	for i := range 6 {
		mustPut(t, s, blob(fmt.Sprint("small", i), spareTestSize/3), digest.SHA256)
		s.settle()
	}
	sp := s.spareList()
	var total int64
	for _, x := range sp {
		total += x.size
		if x.size > s.policy.maxBytes/spareShare {
			t.Errorf("a spare of %d bytes, above the bound's share %d", x.size, s.policy.maxBytes/spareShare)
		}
	}
	if len(sp) > maxSpares || total > s.policy.maxBytes/spareShare {
		t.Errorf("%d spares of %d bytes; at most %d of %d", len(sp), total, maxSpares, s.policy.maxBytes/spareShare)
	}
	assertNoTemp(t, s)
}

// TestDiskChurnRecycling stores, evicts, re-stores and reads large blobs
// of several sizes from several goroutines, so that recycled files race
// with readers and with new copies of their old blob. Every read must
// return the right bytes.
func TestDiskChurnRecycling(t *testing.T) {
	ctx := context.Background()
	const n = 12
	s := openDisk(t, t.TempDir(), 16<<20) // spares: up to 2 MiB
	var blobs [][]byte
	var ds []digest.Digest
	for i := range n {
		blobs = append(blobs, blob(fmt.Sprint("churn", i), (1<<20)+(i%4)*(256<<10)+i))
		ds = append(ds, digest.Compute(digest.SHA256, blobs[i]))
	}
	var wg sync.WaitGroup
	for g := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 40 {
				k := (g*5 + i) % n
				if err := Put(ctx, s, ds[k], blobs[k]); err != nil {
					t.Error(err)
					return
				}
				j := (g + 3*i) % n
				r, err := s.Open(ctx, ds[j], 0)
				if errors.Is(err, ErrNotFound) {
					continue
				}
				if err != nil {
					t.Error(err)
					return
				}
				// Read half, let others evict and recycle, read the rest.
				half := make([]byte, len(blobs[j])/2)
				_, err = io.ReadFull(r, half)
				if err == nil {
					Put(ctx, s, ds[(k+1)%n], blobs[(k+1)%n])
					var rest []byte
					rest, err = io.ReadAll(r)
					half = append(half, rest...)
				}
				r.Close()
				if err != nil || !bytes.Equal(half, blobs[j]) {
					t.Errorf("blob %d read back wrong (%d bytes, %v)", j, len(half), err)
					return
				}
			}
		}()
	}
	wg.Wait()
	s.settle()
	assertNoTemp(t, s)
	files := 0
	for _, d := range ds {
		if s.heldOnDisk(d) {
			files++
		}
	}
	if nb, _ := s.Stats(); files != nb {
		t.Errorf("%d blobs on disk, %d indexed", files, nb)
	}
	if len(s.spareList()) == 0 && s.Evicted() == 0 {
		t.Error("nothing was evicted: the test did not churn")
	}
}

// TestSpareFilesAlone exercises the spares without a store: files kept
// within their bounds (the oldest go first, and from the disk), the
// choice of a spare for a size, and files that are not kept.
func TestSpareFilesAlone(t *testing.T) {
	dir := t.TempDir()
	src := t.TempDir()
	sp := newSpareFiles(dir, 10<<10)
	file := func(name string, size int) string {
		p := filepath.Join(src, name)
		if err := os.WriteFile(p, make([]byte, size), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	if sp.keep(file("big", 11<<10), 11<<10) {
		t.Fatal("kept a file larger than the spares' bound")
	}
	if sp.keep(filepath.Join(src, "gone"), 1<<10) {
		t.Fatal("dealt with a file that does not exist")
	}
	if !sp.keep(file("a", 4<<10), 4<<10) || !sp.keep(file("b", 5<<10), 5<<10) {
		t.Fatal("did not keep files within the bounds")
	}
	if !sp.keep(file("c", 3<<10), 3<<10) {
		t.Fatal("did not keep c")
	}
	held := sp.held()
	if len(held) != maxSpares || held[0].size != 5<<10 || held[1].size != 3<<10 {
		t.Fatalf("held %+v, want b and c (a, the oldest, dropped past %d spares)", held, maxSpares)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != maxSpares {
		t.Fatalf("%d files in the spares' directory, want %d", len(ents), maxSpares)
	}
	if bytes, _ := sp.stats(); bytes != 8<<10 {
		t.Fatalf("spares hold %d bytes, want %d", bytes, 8<<10)
	}
	if _, _, ok := sp.take(20 << 10); ok {
		t.Fatal("took a spare of less than half the size")
	}
	f, size, ok := sp.take(4 << 10) // 5 KiB is the smallest at least as large
	if !ok || size != 5<<10 {
		t.Fatalf("take(4 KiB) = %d, %v; want the 5 KiB spare", size, ok)
	}
	f.Close()
	f, size, ok = sp.take(4 << 10) // only 3 KiB is left: smaller, but more than half
	if !ok || size != 3<<10 {
		t.Fatalf("take(4 KiB) = %d, %v; want the 3 KiB spare", size, ok)
	}
	f.Close()
	if bytes, recycled := sp.stats(); bytes != 0 || recycled != 2 {
		t.Fatalf("stats = %d bytes, %d taken; want 0, 2", bytes, recycled)
	}
	if canRecycle {
		p := file("linked", 2<<10)
		if err := os.Link(p, filepath.Join(src, "other")); err != nil {
			t.Fatal(err)
		}
		if !sp.keep(p, 2<<10) || len(sp.held()) != 0 {
			t.Fatal("kept a file with another name, which someone may read")
		}
	}
}
