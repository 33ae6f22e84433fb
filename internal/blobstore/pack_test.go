package blobstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/gantry-build/gantry/internal/digest"
)

// heldOnDisk reports whether d is on disk as the index says: an intact
// file of its own, or an intact record in a live segment file.
func (s *Disk) heldOnDisk(d digest.Digest) bool {
	if info, err := os.Stat(s.path(d)); err == nil && info.Size() == d.Size {
		return true
	}
	s.mu.Lock()
	e, ok := s.idx.get(d)
	if !ok || e.seg == nil {
		s.mu.Unlock()
		return false
	}
	g, off := e.seg, e.off
	g.refs.Add(1)
	s.mu.Unlock()
	defer g.unref()
	if _, err := os.Stat(g.log.Path()); err != nil {
		return false
	}
	rec := make([]byte, recordLen(d))
	_, err := g.log.ReadAt(rec, off)
	return err == nil && checkRecord(rec, d)
}

// location returns the segment (nil: a file) and offset of an indexed d.
func (s *Disk) location(t *testing.T, d digest.Digest) (*segment, int64) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.idx.get(d)
	if !ok {
		t.Fatalf("%s is not indexed", d)
	}
	return e.seg, e.off
}

// segmentFiles lists the segment files on disk.
func segmentFiles(t *testing.T, s *Disk) []string {
	t.Helper()
	ents, err := os.ReadDir(s.packs.dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

func mustGet(t *testing.T, s Store, d digest.Digest, want []byte) {
	t.Helper()
	got, err := Get(context.Background(), s, d)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("Get %s = %d bytes, %v; want the %d bytes put", d, len(got), err, len(want))
	}
}

func TestPackPutGet(t *testing.T) {
	ctx := context.Background()
	s := openDiskOpts(t, t.TempDir(), DiskOptions{PackThreshold: 4096})
	sizes := []int{1, 100, 4095, 4096, 4097, 100 << 10, smallBlob + 1}
	ds := map[int]digest.Digest{}
	for _, size := range sizes {
		data := blob(fmt.Sprint("mixed", size), size)
		d := mustPut(t, s, data, digest.SHA256)
		ds[size] = d
		seg, _ := s.location(t, d)
		if packed := seg != nil; packed != (size <= 4096) {
			t.Errorf("blob of %d bytes: packed = %v, threshold 4096", size, packed)
		}
		_, err := os.Stat(s.path(d))
		if hasFile := err == nil; hasFile != (size > 4096) {
			t.Errorf("blob of %d bytes: own file = %v", size, hasFile)
		}
		mustGet(t, s, d, data)
		for _, off := range []int64{1, int64(size) / 2, int64(size), int64(size) + 5} {
			got, err := readAt(t, s, d, off)
			if want := data[min(off, int64(size)):]; err != nil || !bytes.Equal(got, want) {
				t.Errorf("size %d, Open at %d: %d bytes, %v; want %d", size, off, len(got), err, len(want))
			}
		}
	}
	if files := segmentFiles(t, s); len(files) != 1 {
		t.Errorf("segment files %v, want one", files)
	}
	// A duplicate write is a no-op: the segment does not grow.
	before := s.packs.current().log.Size()
	mustPut(t, s, blob("another", 100), digest.SHA256)
	mustPut(t, s, blob(fmt.Sprint("mixed", 100), 100), digest.SHA256)
	after := s.packs.current().log.Size()
	if want := before + recordLen(digest.Compute(digest.SHA256, blob("another", 100))); after != want {
		t.Errorf("segment grew from %d to %d bytes, want %d (one new blob, one duplicate)", before, after, want)
	}
	var total int64
	for _, size := range sizes {
		total += int64(size)
	}
	if n, b := s.Stats(); n != len(sizes)+1 || b != total+100 {
		t.Errorf("Stats = %d, %d; want %d, %d", n, b, len(sizes)+1, total+100)
	}
	missing, _ := s.FindMissing(ctx, []digest.Digest{ds[1], digest.Compute(digest.SHA256, []byte("absent")), ds[4096]})
	if len(missing) != 1 {
		t.Errorf("FindMissing = %v, want only the absent blob", missing)
	}
	// Packing disabled: every blob gets its own file.
	s2 := openDiskOpts(t, t.TempDir(), DiskOptions{PackThreshold: -1})
	d := mustPut(t, s2, []byte("tiny"), digest.SHA256)
	if seg, _ := s2.location(t, d); seg != nil {
		t.Error("PackThreshold -1 still packs")
	}
}

func TestPackReopen(t *testing.T) {
	dir := t.TempDir()
	opts := DiskOptions{SegmentSize: 8 << 10}
	s := openDiskOpts(t, dir, opts)
	want := map[digest.Digest][]byte{}
	for i := range 40 {
		fn := digest.Supported[i%len(digest.Supported)]
		size := 1 + i*317
		if i%10 == 9 {
			size = 100 << 10 // own file
		}
		data := blob(fmt.Sprint("reopen", i), size)
		want[mustPut(t, s, data, fn)] = data
	}
	if files := segmentFiles(t, s); len(files) < 3 {
		t.Fatalf("only %d segments; the test wants several", len(files))
	}
	n1, b1 := s.Stats()
	s2 := openDiskOpts(t, dir, opts)
	if n, b := s2.Stats(); n != n1 || b != b1 {
		t.Errorf("reopened store has %d blobs, %d bytes; want %d, %d", n, b, n1, b1)
	}
	for d, data := range want {
		mustGet(t, s2, d, data)
	}
	// New blobs go to a new segment, after the old ones.
	d := mustPut(t, s2, blob("after reopen", 50), digest.SHA256)
	if seg, _ := s2.location(t, d); seg == nil || seg.id != s.packs.current().id+1 {
		t.Errorf("new blob's segment %v, want a new one after %d", seg, s.packs.current().id)
	}
	s3 := openDiskOpts(t, dir, opts)
	if n, _ := s3.Stats(); n != n1+1 {
		t.Errorf("second reopen: %d blobs, want %d", n, n1+1)
	}
}

func TestPackTornTail(t *testing.T) {
	dir := t.TempDir()
	s := openDiskOpts(t, dir, DiskOptions{})
	var ds []digest.Digest
	for i := range 3 {
		ds = append(ds, mustPut(t, s, blob(fmt.Sprint("torn", i), 1000), digest.SHA256))
	}
	seg, off2 := s.location(t, ds[2])
	path := seg.log.Path()

	// Garbage after the last record (a crash during an append of
	// something that never finished): cut off, the blobs stay.
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte("GPK1\x01 partial header"))
	f.Close()
	s2 := openDiskOpts(t, dir, DiskOptions{})
	if n, _ := s2.Stats(); n != 3 {
		t.Errorf("after garbage tail: %d blobs, want 3", n)
	}
	if info, _ := os.Stat(path); info.Size() != off2+recordLen(ds[2]) {
		t.Errorf("segment is %d bytes, want the garbage cut off (%d)", info.Size(), off2+recordLen(ds[2]))
	}

	// A record cut short: it goes, those before it stay.
	if err := os.Truncate(path, off2+recordLen(ds[2])-10); err != nil {
		t.Fatal(err)
	}
	s3 := openDiskOpts(t, dir, DiskOptions{})
	if n, b := s3.Stats(); n != 2 || b != 2000 {
		t.Errorf("after torn record: Stats = %d, %d; want 2, 2000", n, b)
	}
	if info, _ := os.Stat(path); info.Size() != off2 {
		t.Errorf("segment is %d bytes, want truncated at the torn record (%d)", info.Size(), off2)
	}
	mustGet(t, s3, ds[0], blob("torn0", 1000))
	mustGet(t, s3, ds[1], blob("torn1", 1000))
	if _, err := s3.Open(context.Background(), ds[2], 0); !errors.Is(err, ErrNotFound) {
		t.Errorf("torn blob: Open = %v, want ErrNotFound", err)
	}
	// It can be stored again.
	mustPut(t, s3, blob("torn2", 1000), digest.SHA256)
	mustGet(t, s3, ds[2], blob("torn2", 1000))

	// A segment whose first header is damaged is left empty and removed.
	_, off0 := s3.location(t, ds[0])
	seg0, _ := s3.location(t, ds[0])
	flipByte(t, seg0.log.Path(), off0+1)
	s4 := openDiskOpts(t, dir, DiskOptions{})
	if _, err := os.Stat(seg0.log.Path()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("segment with a damaged first header still exists: %v", err)
	}
	if n, _ := s4.Stats(); n != 1 {
		t.Errorf("after damaged first header: %d blobs, want only the one in the newer segment", n)
	}
}

func flipByte(t *testing.T, path string, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x40
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

func TestPackCorruptRecord(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	opts := DiskOptions{SegmentSize: 4 << 10}
	s := openDiskOpts(t, dir, opts)
	var ds []digest.Digest
	for i := range 8 {
		ds = append(ds, mustPut(t, s, blob(fmt.Sprint("corrupt", i), 1000), digest.SHA256))
	}
	// Damage a data byte of a blob in a sealed segment.
	victim := ds[1]
	seg, off := s.location(t, victim)
	if seg == s.packs.current() {
		t.Fatal("the victim should be in a sealed segment")
	}
	flipByte(t, seg.log.Path(), off+recordHeaderLen(victim)+500)
	if _, err := s.Open(ctx, victim, 0); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Open of a damaged record = %v, want ErrNotFound", err)
	}
	if missing, _ := s.FindMissing(ctx, []digest.Digest{victim}); len(missing) != 1 {
		t.Error("the damaged blob is still indexed")
	}
	if n, b := s.Stats(); n != 7 || b != 7000 {
		t.Errorf("Stats = %d, %d; want 7, 7000", n, b)
	}
	mustGet(t, s, ds[0], blob("corrupt0", 1000)) // its neighbour is fine
	mustGet(t, s, ds[2], blob("corrupt2", 1000))

	// Only header CRCs are checked at start in sealed segments: the
	// damaged record is indexed again, and dropped at its first read.
	s2 := openDiskOpts(t, dir, opts)
	if n, _ := s2.Stats(); n != 8 {
		t.Errorf("reopened: %d blobs, want 8 (sealed segments' data is checked on read)", n)
	}
	if _, err := s2.Open(ctx, victim, 0); !errors.Is(err, ErrNotFound) {
		t.Errorf("Open after reopen = %v, want ErrNotFound", err)
	}
	mustPut(t, s2, blob("corrupt1", 1000), digest.SHA256)
	mustGet(t, s2, victim, blob("corrupt1", 1000))

	// In the newest segment, data CRCs are checked at start: a damaged
	// record truncates the segment there.
	last := ds[7]
	seg, off = s2.location(t, digest.Compute(digest.SHA256, blob("corrupt1", 1000)))
	_ = last
	flipByte(t, seg.log.Path(), off+recordHeaderLen(victim)+10)
	s3 := openDiskOpts(t, dir, opts)
	if _, err := s3.Open(ctx, victim, 0); !errors.Is(err, ErrNotFound) {
		t.Errorf("Open of a blob damaged in the newest segment, after reopen = %v, want ErrNotFound", err)
	}
	if info, _ := os.Stat(seg.log.Path()); info != nil && info.Size() > off {
		t.Errorf("newest segment is %d bytes, want truncated at %d", info.Size(), off)
	}
}

func TestPackSegmentEviction(t *testing.T) {
	ctx := context.Background()
	// Segments of 9 records of 1000-byte blobs; room for 160 blobs.
	s := openDiskOpts(t, t.TempDir(), DiskOptions{MaxBytes: 160_000, SegmentSize: 10_000})
	var ds []digest.Digest
	put := func(i int) {
		ds = append(ds, mustPut(t, s, blob(fmt.Sprint("evict", i), 1000), digest.SHA256))
	}
	for i := range 160 {
		put(i)
	}
	first, _ := s.location(t, ds[0])
	if seg, _ := s.location(t, ds[8]); seg != first {
		t.Fatal("blobs 0-8 should share the first segment")
	}
	if seg, _ := s.location(t, ds[9]); seg == first {
		t.Fatal("blob 9 should be in the second segment")
	}
	// Use blobs 0-2 (Open, FindMissing): they must survive the eviction of
	// the first segment; 3-8 are the least recently used and go.
	mustGet(t, s, ds[0], blob("evict0", 1000))
	s.FindMissing(ctx, ds[1:3])
	put(160)
	for i, d := range ds[:9] {
		has, _ := Has(ctx, s, d)
		if has != (i < 3) {
			t.Errorf("blob %d: present = %v, want %v", i, has, i < 3)
		}
	}
	for i := 0; i < 3; i++ {
		mustGet(t, s, ds[i], blob(fmt.Sprint("evict", i), 1000))
		if seg, _ := s.location(t, ds[i]); seg == first {
			t.Errorf("blob %d still in the evicted segment", i)
		}
	}
	if _, err := os.Stat(first.log.Path()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("evicted segment file still exists: %v", err)
	}
	if n, b := s.Stats(); n != 155 || b != 155_000 {
		t.Errorf("Stats = %d, %d; want 155, 155000", n, b)
	}
	if ev := s.Evicted(); ev != 6 {
		t.Errorf("Evicted = %d, want 6", ev)
	}
	// Keep writing: the bound holds, and recently written blobs stay.
	for i := 161; i < 400; i++ {
		put(i)
		if _, b := s.Stats(); b > 160_000 {
			t.Fatalf("after blob %d, %d bytes held; bound 160000", i, b)
		}
	}
	for i := 380; i < 400; i++ {
		mustGet(t, s, ds[i], blob(fmt.Sprint("evict", i), 1000))
	}
	for _, d := range ds {
		if has, _ := Has(ctx, s, d); has && !s.heldOnDisk(d) {
			t.Errorf("%s indexed but not on disk", d)
		}
	}
	// Files and packed blobs share the bound, and LRU order.
	big := mustPut(t, s, blob("big", 100<<10), digest.SHA256)
	if seg, _ := s.location(t, big); seg != nil {
		t.Fatal("a 100 KiB blob should get its own file")
	}
	if _, b := s.Stats(); b > 160_000 {
		t.Errorf("%d bytes held after a large blob; bound 160000", b)
	}
	mustGet(t, s, big, blob("big", 100<<10))
	for i := 400; i < 500; i++ {
		put(i)
	}
	if has, _ := Has(ctx, s, big); has {
		t.Error("the large blob, least recently used, survived 100 KB of new blobs")
	}
}

// TestPackReadDuringEviction checks that a read holding a segment
// reference gets the data even if the segment is evicted meanwhile, and
// that the file goes when the last reference does.
func TestPackReadDuringEviction(t *testing.T) {
	s := openDiskOpts(t, t.TempDir(), DiskOptions{MaxBytes: 20_000, SegmentSize: 5_000})
	data := blob("held", 1000)
	d := mustPut(t, s, data, digest.SHA256)
	e, g, off := s.touch(d) // as Open does: a reference on the segment
	for i := range 40 {
		mustPut(t, s, blob(fmt.Sprint("filler", i), 1000), digest.SHA256)
	}
	if has, _ := Has(context.Background(), s, d); has {
		t.Fatal("the blob survived; the test needs its segment evicted")
	}
	if !g.dead {
		t.Fatal("segment not evicted")
	}
	if _, err := os.Stat(g.log.Path()); err != nil {
		t.Errorf("segment file removed while a reader holds it: %v", err)
	}
	r, err := s.readPacked(d, e, g, off, 0)
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(data))
	if n, _ := r.Read(got); n != len(data) || !bytes.Equal(got, data) {
		t.Errorf("read from an evicted segment: %d bytes", n)
	}
	if _, err := os.Stat(g.log.Path()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("segment file kept after its last reference: %v", err)
	}
}

// TestPackConcurrentEviction stores, reads and evicts packed blobs from
// several goroutines (run it with -race): every read returns the right
// bytes or ErrNotFound.
func TestPackConcurrentEviction(t *testing.T) {
	for _, fsync := range []bool{false, true} {
		t.Run(fmt.Sprint("fsync=", fsync), func(t *testing.T) {
			ctx := context.Background()
			s := openDiskOpts(t, t.TempDir(), DiskOptions{MaxBytes: 64 << 10, SegmentSize: 8 << 10, Fsync: fsync})
			const writers, readers = 4, 4
			perWriter := 300
			if fsync {
				perWriter = 40 // an fsync costs milliseconds
			}
			var wg, wwg sync.WaitGroup
			data := func(i int) []byte { return blob(fmt.Sprint("conc", i), 200+i*37%1500) }
			for w := range writers {
				wwg.Add(1)
				go func() {
					defer wwg.Done()
					for i := range perWriter {
						k := w*perWriter + i
						if err := Put(ctx, s, digest.Compute(digest.SHA256, data(k)), data(k)); err != nil {
							t.Error(err)
							return
						}
					}
				}()
			}
			var stop atomic.Bool
			var found atomic.Int64
			for r := range readers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rng := rand.New(rand.NewPCG(uint64(r), 1))
					for !stop.Load() {
						k := rng.IntN(writers * perWriter)
						want := data(k)
						got, err := Get(ctx, s, digest.Compute(digest.SHA256, want))
						switch {
						case err == nil && !bytes.Equal(got, want):
							t.Errorf("blob %d read back wrong", k)
							return
						case err == nil:
							found.Add(1)
						case !errors.Is(err, ErrNotFound):
							t.Error(err)
							return
						}
					}
				}()
			}
			wwg.Wait()
			stop.Store(true)
			wg.Wait()
			n, b := s.Stats()
			if b > 64<<10 {
				t.Errorf("%d bytes held, bound %d", b, 64<<10)
			}
			held := 0
			for k := range writers * perWriter {
				d := digest.Compute(digest.SHA256, data(k))
				if has, _ := Has(ctx, s, d); has {
					held++
					if !s.heldOnDisk(d) {
						t.Errorf("blob %d indexed but not on disk", k)
					}
				}
			}
			if held != n {
				t.Errorf("%d blobs found, Stats says %d", held, n)
			}
			if s.Evicted() == 0 {
				t.Error("nothing was evicted; the test needs eviction")
			}
			t.Logf("%d reads found their blob; %d evicted; %d segment files", found.Load(), s.Evicted(), len(segmentFiles(t, s)))
			// No segment file is left behind that the store does not know.
			live := map[string]bool{}
			for _, g := range s.packs.live() {
				live[filepath.Base(g.log.Path())] = true
			}
			for _, name := range segmentFiles(t, s) {
				if !live[name] {
					t.Errorf("segment file %s left behind", name)
				}
			}
		})
	}
}

// TestPackEvictionCopiesMany covers copying many blobs forward at once
// (the whole segment is read in one go).
func TestPackEvictionCopiesMany(t *testing.T) {
	ctx := context.Background()
	s := openDiskOpts(t, t.TempDir(), DiskOptions{MaxBytes: 800_000, SegmentSize: 50_000})
	var ds []digest.Digest
	for i := range 8000 {
		ds = append(ds, mustPut(t, s, blob(fmt.Sprint("many", i), 100), digest.SHA256))
	}
	first, _ := s.location(t, ds[0])
	perSeg := 0
	for _, d := range ds {
		if seg, _ := s.location(t, d); seg == first {
			perSeg++
		}
	}
	if perSeg < 300 {
		t.Fatalf("only %d blobs in the first segment", perSeg)
	}
	s.FindMissing(ctx, ds[:perSeg-5]) // all but the last five are used
	mustPut(t, s, blob("many-more", 100), digest.SHA256)
	missing, _ := s.FindMissing(ctx, ds[:perSeg])
	if len(missing) != 5 || missing[0] != ds[perSeg-5] {
		t.Errorf("%d of the first segment's %d blobs missing, want the 5 unused", len(missing), perSeg)
	}
	for i := 0; i < perSeg-5; i += 37 {
		mustGet(t, s, ds[i], blob(fmt.Sprint("many", i), 100))
	}
	if _, err := os.Stat(first.log.Path()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("evicted segment still on disk: %v", err)
	}
}
