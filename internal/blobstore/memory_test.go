package blobstore

import (
	"bytes"
	"context"
	"io"
	"runtime"
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
