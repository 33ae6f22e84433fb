package blobstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync"
	"testing"

	"github.com/gantry-build/gantry/internal/digest"
)

// TestMemoryBigBlobAllocatesItsSizeOnce checks that storing a big blob in
// the memory store allocates about its size, whatever the size of the
// writes: no buffer grown by doubling and copied (issue 23: 3.5 GiB of RSS
// held 1.5 GiB of blobs). The bound has 10% of slack for the writer and
// the runtime.
func TestMemoryBigBlobAllocatesItsSizeOnce(t *testing.T) {
	const size = 24<<20 + 12345
	data := blob("big", size)
	d := digest.Compute(digest.SHA256, data)
	for _, write := range []int{16 << 10, 1 << 20, 3<<20 + 1} {
		s := NewMemory(0)
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		w, err := s.Create(context.Background(), d)
		if err != nil {
			t.Fatal(err)
		}
		for off := 0; off < size; off += write {
			if _, err := w.Write(data[off:min(off+write, size)]); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Commit(); err != nil {
			t.Fatal(err)
		}
		runtime.ReadMemStats(&after)
		if got := after.TotalAlloc - before.TotalAlloc; float64(got) > 1.1*size {
			t.Errorf("writes of %d bytes: storing a %d-byte blob allocated %d bytes (%.2fx); want at most 1.1x", write, size, got, float64(got)/size)
		}
	}
}

// TestMemoryReadsAcrossChunks reads a blob held in several chunks from
// offsets around the chunks' edges, with Read (small and large buffers)
// and with WriteTo, and checks every byte.
func TestMemoryReadsAcrossChunks(t *testing.T) {
	const size = 2*memChunkSize + 777
	data := blob("chunks", size)
	d := digest.Compute(digest.SHA256, data)
	s := NewMemory(0)
	if err := Put(context.Background(), s, d, data); err != nil {
		t.Fatal(err)
	}
	if _, n := s.Stats(); n != size {
		t.Fatalf("store holds %d bytes, want %d", n, size)
	}
	for _, off := range []int64{0, 1, memChunkSize - 1, memChunkSize, memChunkSize + 1, 2 * memChunkSize, size - 1, size} {
		for _, how := range []string{"read-4096", "read-3MiB", "writeto"} {
			r, err := s.Open(context.Background(), d, off)
			if err != nil {
				t.Fatal(err)
			}
			var got []byte
			switch how {
			case "writeto":
				var buf bytes.Buffer
				if _, err := r.(io.WriterTo).WriteTo(&buf); err != nil {
					t.Fatal(err)
				}
				got = buf.Bytes()
			case "read-4096":
				got, err = io.ReadAll(r)
			default:
				got = make([]byte, 3<<20)
				var n int
				n, err = io.ReadFull(r, got)
				if err == io.ErrUnexpectedEOF || err == io.EOF {
					err = nil
				}
				got = got[:n]
			}
			r.Close()
			if err != nil {
				t.Fatalf("offset %d, %s: %v", off, how, err)
			}
			if !bytes.Equal(got, data[off:]) {
				t.Errorf("offset %d, %s: got %d bytes, not the blob's %d from there", off, how, len(got), size-off)
			}
		}
	}
}

// TestMemoryBoundCoversUploadsInFlight: an upload into a full store
// evicts for its size when it starts, so the blobs held and the upload
// never add up to more than the bound (issue 43: a full store held 1.29x
// its max_size while a big blob came in, eviction waiting for its
// commit). Nor do the spare chunks kept for later uploads.
func TestMemoryBoundCoversUploadsInFlight(t *testing.T) {
	const size, maxBytes = 3 * memChunkSize, 10 * memChunkSize
	ctx := context.Background()
	s := NewMemory(maxBytes)
	within := func(when string) {
		t.Helper()
		u := s.usage()
		if u.Held+u.Reserved > maxBytes || u.Held+u.Filling+u.Spare > maxBytes {
			t.Fatalf("%s: %+v; want Held+Reserved and Held+Filling+Spare within the bound %d", when, u, maxBytes)
		}
	}
	var d0 digest.Digest
	for i := range 12 {
		data := blob(fmt.Sprint("upload", i), size)
		d := digest.Compute(digest.SHA256, data)
		d0 = d
		w, err := s.Create(ctx, d)
		if err != nil {
			t.Fatal(err)
		}
		if _, held := s.Stats(); held+size > maxBytes {
			t.Fatalf("upload %d started: the store still holds %d bytes, and %d more are coming; want eviction to make room first (bound %d)", i, held, size, maxBytes)
		}
		within(fmt.Sprintf("upload %d started", i))
		if _, err := w.Write(data[:size/2]); err != nil {
			t.Fatal(err)
		}
		within(fmt.Sprintf("upload %d half written", i))
		if _, err := w.Write(data[size/2:]); err != nil {
			t.Fatal(err)
		}
		if err := w.Commit(); err != nil {
			t.Fatal(err)
		}
		w.Close()
		within(fmt.Sprintf("upload %d stored", i))
		if got, err := Get(ctx, s, d); err != nil || !bytes.Equal(got, data) {
			t.Fatalf("upload %d read back: %d bytes, %v; want the blob", i, len(got), err)
		}
	}
	// An upload given up returns its reservation.
	data := blob("abandoned", size)
	w, err := s.Create(ctx, digest.Compute(digest.SHA256, data))
	if err != nil {
		t.Fatal(err)
	}
	w.Write(data[:size/3])
	w.Close()
	if u := s.usage(); u.Reserved != 0 || u.Filling != 0 {
		t.Errorf("after the only upload was closed unfinished: %+v; want nothing reserved or filling", u)
	}
	within("after an abandoned upload")
	// A blob the bound cannot hold evicts nothing before it is stored.
	blobs, _ := s.Stats()
	huge := digest.Digest{Function: digest.SHA256, Hash: d0.Hash, Size: maxBytes}
	w, err = s.Create(ctx, huge)
	if err != nil {
		t.Fatal(err)
	}
	w.Close()
	if after, _ := s.Stats(); after != blobs {
		t.Errorf("starting an upload larger than the bound left %d of %d blobs; want none evicted for it", after, blobs)
	}
}

// TestMemoryFullStoreReusesEvictedChunks: once the store is full, an
// upload fills the chunks of the blobs it evicted instead of allocating
// its size again (issue 43: fresh memory for every upload made the
// memory store slower than the disk store, and left the evicted blobs to
// the collector).
func TestMemoryFullStoreReusesEvictedChunks(t *testing.T) {
	const size, maxBytes = 4 * memChunkSize, 9 * memChunkSize
	ctx := context.Background()
	s := NewMemory(maxBytes)
	blobs := make([][]byte, 8)
	for i := range blobs {
		blobs[i] = blob(fmt.Sprint("reuse", i), size)
	}
	for _, data := range blobs[:3] { // full, and evicting from the third on
		mustPut(t, s, data, digest.SHA256)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for _, data := range blobs[3:] {
		mustPut(t, s, data, digest.SHA256)
	}
	runtime.ReadMemStats(&after)
	perUpload := float64(after.TotalAlloc-before.TotalAlloc) / float64(len(blobs)-3)
	if perUpload > 0.1*size {
		t.Errorf("uploads into a full store allocated %.0f bytes each (%.2fx the blob); want at most 0.1x (the evicted blobs' chunks reused)", perUpload, perUpload/size)
	}
	for _, data := range blobs[len(blobs)-2:] {
		if got, err := Get(ctx, s, digest.Compute(digest.SHA256, data)); err != nil || !bytes.Equal(got, data) {
			t.Fatalf("read back: %d bytes, %v; want the blob", len(got), err)
		}
	}
}

// TestMemoryEvictedBlobStaysWhileRead: a blob evicted while a reader has
// it open, or after GetBatch handed out its bytes, is not overwritten by
// the uploads that reuse evicted chunks.
func TestMemoryEvictedBlobStaysWhileRead(t *testing.T) {
	ctx := context.Background()
	for _, size := range []int{memChunkSize, 3*memChunkSize + 5} {
		for _, how := range []string{"open", "getbatch"} {
			t.Run(fmt.Sprint(how, size), func(t *testing.T) {
				s := NewMemory(int64(2 * size))
				first := blob("first", size)
				d := mustPut(t, s, first, digest.SHA256)
				var read func() ([]byte, error)
				if how == "open" {
					r, err := s.Open(ctx, d, 0)
					if err != nil {
						t.Fatal(err)
					}
					defer r.Close()
					read = func() ([]byte, error) { return io.ReadAll(r) }
				} else {
					data, errs := GetBatch(ctx, s, []digest.Digest{d})
					read = func() ([]byte, error) { return data[0], errs[0] }
				}
				for i := range 4 { // evict first, then fill its chunks if they may be
					mustPut(t, s, blob(fmt.Sprint("other", i), size), digest.SHA256)
				}
				if missing, _ := s.FindMissing(ctx, []digest.Digest{d}); len(missing) != 1 {
					t.Fatal("the first blob was not evicted; the test needs it to be")
				}
				if got, err := read(); err != nil || !bytes.Equal(got, first) {
					t.Errorf("read after the blob's eviction: %d bytes, %v; want the blob unchanged", len(got), err)
				}
			})
		}
	}
}

// TestMemoryClosedReaderFreesChunks: the chunks of a blob evicted while
// read serve later uploads once the reader closes, with every blob read
// back intact.
func TestMemoryClosedReaderFreesChunks(t *testing.T) {
	ctx := context.Background()
	const size = 3 * memChunkSize
	s := NewMemory(2*size + memChunkSize) // room for a spare chunk beside two blobs
	d := mustPut(t, s, blob("first", size), digest.SHA256)
	r, err := s.Open(ctx, d, 0)
	if err != nil {
		t.Fatal(err)
	}
	mustPut(t, s, blob("second", size), digest.SHA256)
	mustPut(t, s, blob("third", size), digest.SHA256) // evicts first
	if u := s.usage(); u.Spare != 0 {
		t.Fatalf("with first still read, %d bytes are spare; want none", u.Spare)
	}
	r.Close()
	r.Close() // twice is harmless
	if u := s.usage(); u.Spare == 0 {
		t.Fatalf("after the reader closed, nothing is spare: %+v", u)
	}
	for i := range 4 {
		data := blob(fmt.Sprint("later", i), size)
		if got, err := Get(ctx, s, mustPut(t, s, data, digest.SHA256)); err != nil || !bytes.Equal(got, data) {
			t.Fatalf("later upload %d read back: %d bytes, %v", i, len(got), err)
		}
	}
}

// TestMemoryConcurrentReadsAndEvictions reads blobs while others are
// uploaded and evict them, reusing their chunks: every read that finds
// its blob gets exactly its bytes (checked against the digest).
func TestMemoryConcurrentReadsAndEvictions(t *testing.T) {
	const size = 2*memChunkSize + 100
	ctx := context.Background()
	s := NewMemory(4 * size)
	var recent sync.Map // int -> digest.Digest
	var wg sync.WaitGroup
	for w := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 12 {
				data := blob(fmt.Sprint("concurrent", w, i), size)
				d := digest.Compute(digest.SHA256, data)
				if err := Put(ctx, s, d, data); err != nil {
					t.Error(err)
					return
				}
				recent.Store(w*100+i, d)
			}
		}()
	}
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 40 {
				recent.Range(func(_, v any) bool {
					d := v.(digest.Digest)
					r, err := s.Open(ctx, d, 0)
					if errors.Is(err, ErrNotFound) {
						return true
					}
					if err != nil {
						t.Error(err)
						return false
					}
					got, err := io.ReadAll(r)
					r.Close()
					if err != nil || digest.Compute(digest.SHA256, got) != d {
						t.Errorf("read of %s while others were stored: %d bytes, %v; not the blob", d, len(got), err)
						return false
					}
					return false // one blob per pass
				})
			}
		}()
	}
	wg.Wait()
}
