package actioncache

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/gantry-build/gantry/internal/digest"
)

// TestDiskOpensOldLog opens action cache logs written by the code before
// internal/recordlog (internal/recordlog/testdata/fixturegen), intact and
// with a torn tail: every entry of the manifest must read back with its
// latest result, and the torn log must be cut back to its intact length.
func TestDiskOpensOldLog(t *testing.T) {
	fixtures := filepath.Join("..", "recordlog", "testdata", "upgrade")
	var manifest []struct {
		Instance string
		Hash     string
		Size     int64
		ExitCode int32
	}
	b, err := os.ReadFile(filepath.Join(fixtures, "actioncache", "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &manifest); err != nil {
		t.Fatal(err)
	}
	intact, err := os.Stat(filepath.Join(fixtures, "actioncache", "actioncache.log"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"actioncache", "actioncache-torn"} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.CopyFS(dir, os.DirFS(filepath.Join(fixtures, name))); err != nil {
				t.Fatal(err)
			}
			s, err := NewDisk(dir, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			for _, m := range manifest {
				d, err := digest.Parse(digest.SHA256, m.Hash, m.Size)
				if err != nil {
					t.Fatal(err)
				}
				ar, err := s.Get(context.Background(), m.Instance, d)
				if err != nil || ar.ExitCode != m.ExitCode || len(ar.StdoutRaw) != int(m.ExitCode)*13 {
					t.Fatalf("entry %q %v: %v, %v; want exit code %d", m.Instance, d, ar, err, m.ExitCode)
				}
			}
			if n, _, size := s.Stats(); n != len(manifest) || size != intact.Size() {
				t.Fatalf("%d entries in a log of %d bytes; want %d in %d", n, size, len(manifest), intact.Size())
			}
			if got, err := os.Stat(filepath.Join(dir, "actioncache.log")); err != nil || got.Size() != intact.Size() {
				t.Fatalf("log file is %d bytes after open (%v), want %d", got.Size(), err, intact.Size())
			}
		})
	}
}
