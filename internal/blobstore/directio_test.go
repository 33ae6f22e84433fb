package blobstore

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/gantry-build/gantry/internal/digest"
)

// TestDirectIOWrites writes blobs of sizes around the alignment and the
// write buffer through O_DIRECT, in requests of several sizes, and reads
// them back: the partial last block and writes that straddle buffers
// must come out intact.
func TestDirectIOWrites(t *testing.T) {
	dir := t.TempDir()
	s, err := NewDisk(dir, DiskOptions{DirectIOThreshold: 1})
	if err != nil {
		t.Fatal(err)
	}
	if runtime.GOOS == "linux" {
		// The test's file system must take O_DIRECT, or this test
		// would only exercise the fallback.
		f, ok, err := openDirect(filepath.Join(t.TempDir(), "probe"))
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			t.Fatalf("the temporary directory's file system refuses O_DIRECT; run the test on one that takes it (ext4, xfs)")
		}
		f.Close()
	}
	sizes := []int{1<<20 + 1, 2 << 20, 2<<20 + directIOAlign, 3<<20 + 12345, 5<<20 - 1}
	chunks := []int{16 << 10, 1 << 20, 3<<20 + 7, 100003}
	for i, size := range sizes {
		for j, chunk := range chunks {
			data := blob(string(rune('a'+i))+string(rune('A'+j)), size)
			d := digest.Compute(digest.SHA256, data)
			w, err := s.Create(context.Background(), d)
			if err != nil {
				t.Fatal(err)
			}
			dw := w.(*checkedWriter).tw.(*diskWriter)
			if runtime.GOOS == "linux" && !dw.fw.direct {
				t.Fatalf("blob of %d bytes was not written with O_DIRECT", size)
			}
			for p := data; len(p) > 0; {
				k := min(chunk, len(p))
				if _, err := w.Write(p[:k]); err != nil {
					t.Fatal(err)
				}
				p = p[k:]
			}
			if err := w.Commit(); err != nil {
				t.Fatalf("size %d chunk %d: %v", size, chunk, err)
			}
			got, err := readAt(t, s, d, 0)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, data) {
				t.Fatalf("size %d chunk %d: read back differs", size, chunk)
			}
		}
	}
	if s.noDirect.Load() {
		t.Fatal("the store gave up O_DIRECT")
	}
	// Nothing is left in the temporary directory.
	left, _ := os.ReadDir(filepath.Join(dir, "tmp"))
	if len(left) != 0 {
		t.Fatalf("%d temporary files left", len(left))
	}
	// An abandoned direct write leaves nothing behind either.
	data := blob("abandoned", 2<<20+5)
	w, err := s.Create(context.Background(), digest.Compute(digest.SHA256, data))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(w, bytes.NewReader(data[:1<<20+3])); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	left, _ = os.ReadDir(filepath.Join(dir, "tmp"))
	if len(left) != 0 {
		t.Fatalf("%d temporary files left after Close", len(left))
	}
}
