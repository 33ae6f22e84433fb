package blobstore

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/gantry-build/gantry/internal/digest"
)

// TestPackOpensOldSegments opens pack segments written by the code before
// internal/recordlog (internal/recordlog/testdata/fixturegen), intact and
// with a torn tail: every blob of the manifest must read back whole, and
// the torn segment must be cut back to exactly its intact length.
func TestPackOpensOldSegments(t *testing.T) {
	fixtures := filepath.Join("..", "recordlog", "testdata", "upgrade")
	var manifest []struct {
		Function int32
		Hash     string
		Size     int64
	}
	b, err := os.ReadFile(filepath.Join(fixtures, "pack", "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &manifest); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"pack", "pack-torn"} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.CopyFS(dir, os.DirFS(filepath.Join(fixtures, name))); err != nil {
				t.Fatal(err)
			}
			s, err := NewDisk(dir, DiskOptions{SegmentSize: 8 << 10})
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range manifest {
				d, err := digest.Parse(digest.Function(m.Function), m.Hash, m.Size)
				if err != nil {
					t.Fatal(err)
				}
				r, err := s.Open(context.Background(), d, 0)
				if err != nil {
					t.Fatalf("blob %v: %v", d, err)
				}
				data, err := io.ReadAll(r)
				r.Close()
				if err != nil || digest.Compute(d.Function, data) != d {
					t.Fatalf("blob %v reads back as %d bytes (%v)", d, len(data), err)
				}
			}
			segs, err := filepath.Glob(filepath.Join(dir, "packs", "*.seg"))
			if err != nil || len(segs) != 15 {
				t.Fatalf("%d segments (%v), want 15", len(segs), err)
			}
			newest := filepath.Base(segs[len(segs)-1])
			want, err := os.Stat(filepath.Join(fixtures, "pack", "packs", newest))
			if err != nil {
				t.Fatal(err)
			}
			got, err := os.Stat(filepath.Join(dir, "packs", newest))
			if err != nil || got.Size() != want.Size() {
				t.Fatalf("newest segment is %d bytes after open (%v), want its intact %d", got.Size(), err, want.Size())
			}
		})
	}
}
