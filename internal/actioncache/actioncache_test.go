package actioncache

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/protobuf/proto"

	"github.com/gantry-build/gantry/internal/digest"
)

type backend struct {
	name string
	open func(t *testing.T) Store
}

func backends() []backend {
	return []backend{
		{"memory", func(t *testing.T) Store { return NewMemory(0) }},
		{"disk", func(t *testing.T) Store {
			s, err := NewDisk(t.TempDir(), 0)
			if err != nil {
				t.Fatal(err)
			}
			return s
		}},
	}
}

func action(i int) digest.Digest {
	return digest.Compute(digest.SHA256, fmt.Appendf(nil, "action %d", i))
}

func result(exit int32, stdout string) *repb.ActionResult {
	return &repb.ActionResult{
		ExitCode:     exit,
		StdoutDigest: digest.Compute(digest.SHA256, []byte(stdout)).Proto(),
		OutputFiles: []*repb.OutputFile{{
			Path:   "out/" + stdout,
			Digest: digest.Compute(digest.SHA256, []byte("file "+stdout)).Proto(),
		}},
	}
}

func mustGet(t *testing.T, s Store, instance string, d digest.Digest) *repb.ActionResult {
	t.Helper()
	ar, err := s.Get(context.Background(), instance, d)
	if err != nil {
		t.Fatalf("Get(%q, %s): %v", instance, d, err)
	}
	return ar
}

func TestPutGet(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			ctx := context.Background()
			s := b.open(t)
			if _, err := s.Get(ctx, "", action(1)); !errors.Is(err, ErrNotFound) {
				t.Fatalf("Get on an empty store: %v, want ErrNotFound", err)
			}
			want := result(3, "hello")
			if err := s.Put(ctx, "", action(1), want); err != nil {
				t.Fatal(err)
			}
			if got := mustGet(t, s, "", action(1)); !proto.Equal(got, want) {
				t.Errorf("Get = %v, want %v", got, want)
			}
			// The returned message is the caller's to modify.
			mustGet(t, s, "", action(1)).ExitCode = 99
			if got := mustGet(t, s, "", action(1)); got.ExitCode != 3 {
				t.Errorf("modifying a returned result changed the store: exit code %d", got.ExitCode)
			}
			// Put replaces.
			newer := result(0, "again")
			if err := s.Put(ctx, "", action(1), newer); err != nil {
				t.Fatal(err)
			}
			if got := mustGet(t, s, "", action(1)); !proto.Equal(got, newer) {
				t.Errorf("after replacing, Get = %v, want %v", got, newer)
			}
			if _, err := s.Get(ctx, "", action(2)); !errors.Is(err, ErrNotFound) {
				t.Errorf("Get of another action: %v, want ErrNotFound", err)
			}
		})
	}
}

func TestScoping(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			ctx := context.Background()
			s := b.open(t)
			a := action(7)
			blake := digest.Digest{Function: digest.BLAKE3, Hash: a.Hash, Size: a.Size}
			entries := []struct {
				instance string
				d        digest.Digest
				ar       *repb.ActionResult
			}{
				{"", a, result(0, "default")},
				{"team-a", a, result(1, "team-a")},
				{"team-a/sub", a, result(2, "team-a/sub")},
				{"team-b", a, result(3, "team-b")},
				{"team-a", blake, result(4, "team-a blake3")},
			}
			for _, e := range entries {
				if err := s.Put(ctx, e.instance, e.d, e.ar); err != nil {
					t.Fatal(err)
				}
			}
			for _, e := range entries {
				if got := mustGet(t, s, e.instance, e.d); !proto.Equal(got, e.ar) {
					t.Errorf("Get(%q, %s) = exit %d, want exit %d: entries leak between instances or functions", e.instance, e.d, got.ExitCode, e.ar.ExitCode)
				}
			}
			if _, err := s.Get(ctx, "team-c", a); !errors.Is(err, ErrNotFound) {
				t.Errorf("Get under an unused instance: %v, want ErrNotFound", err)
			}
			if _, err := s.Get(ctx, "", blake); !errors.Is(err, ErrNotFound) {
				t.Errorf("Get of the BLAKE3 digest under the default instance: %v, want ErrNotFound", err)
			}
		})
	}
}

func TestConcurrent(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			ctx := context.Background()
			s := b.open(t)
			var wg sync.WaitGroup
			for g := range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range 50 {
						// All goroutines share the keys, so Puts replace
						// entries that others are reading.
						if err := s.Put(ctx, "i", action(i%5), result(int32(g), "x")); err != nil {
							t.Error(err)
							return
						}
						ar, err := s.Get(ctx, "i", action(i%5))
						if err != nil || ar.StdoutDigest == nil {
							t.Errorf("Get: %v, %v", ar, err)
							return
						}
					}
				}()
			}
			wg.Wait()
		})
	}
}

func TestMemoryBound(t *testing.T) {
	ctx := context.Background()
	s := NewMemory(3)
	for i := range 3 {
		if err := s.Put(ctx, "", action(i), result(int32(i), "x")); err != nil {
			t.Fatal(err)
		}
	}
	mustGet(t, s, "", action(0)) // 0 becomes the most recently used
	if err := s.Put(ctx, "", action(3), result(3, "x")); err != nil {
		t.Fatal(err)
	}
	for i, wantPresent := range []bool{true, false, true, true} {
		_, err := s.Get(ctx, "", action(i))
		if wantPresent && err != nil || !wantPresent && !errors.Is(err, ErrNotFound) {
			t.Errorf("action %d: Get error %v, want present=%v (1 is the least recently used)", i, err, wantPresent)
		}
	}
}

func TestDiskReopen(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := NewDisk(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := result(5, "persisted")
	if err := s.Put(ctx, "inst", action(1), want); err != nil {
		t.Fatal(err)
	}
	// A write interrupted by a crash leaves a temporary file.
	if err := os.WriteFile(filepath.Join(dir, "tmp", "ac123"), []byte("partial"), 0o644); err != nil {
		t.Fatal(err)
	}
	s2, err := NewDisk(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := mustGet(t, s2, "inst", action(1)); !proto.Equal(got, want) {
		t.Errorf("after reopen Get = %v, want %v", got, want)
	}
	if ents, _ := os.ReadDir(filepath.Join(dir, "tmp")); len(ents) != 0 {
		t.Errorf("temporary files survived reopening: %v", ents)
	}
}

func TestDiskCorruptEntry(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := NewDisk(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ctx, "", action(1), result(1, "x")); err != nil {
		t.Fatal(err)
	}
	p := s.path(key("", action(1)))
	if err := os.WriteFile(p, []byte{0xff, 0xff, 0xff}, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, "", action(1)); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get of a corrupt entry: %v, want ErrNotFound", err)
	}
	if _, err := os.Stat(p); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("corrupt entry was not removed: %v", err)
	}
}

// diskBytes sums the sizes of the entries in a Disk store.
func diskBytes(t *testing.T, s *Disk) (total int64, n int) {
	t.Helper()
	filepath.WalkDir(s.root, func(p string, de fs.DirEntry, err error) error {
		if err != nil {
			t.Fatal(err)
		}
		if de.IsDir() && p == s.tmp {
			return filepath.SkipDir
		}
		if !de.IsDir() {
			info, _ := de.Info()
			total += info.Size()
			n++
		}
		return nil
	})
	return total, n
}

func TestDiskSweepBound(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	entry, _ := proto.Marshal(result(0, "x"))
	size := int64(len(entry))
	bound := 20 * size
	s, err := NewDisk(dir, bound)
	if err != nil {
		t.Fatal(err)
	}
	// Entries get distinct, increasing modification times so the LRU order
	// does not depend on the file system's timestamp resolution.
	base := time.Now().Add(-time.Hour)
	put := func(i int) {
		t.Helper()
		if err := s.Put(ctx, "", action(i), result(0, "x")); err != nil {
			t.Fatal(err)
		}
		mt := base.Add(time.Duration(i) * time.Second)
		os.Chtimes(s.path(key("", action(i))), mt, mt)
	}
	for i := range 20 {
		put(i)
	}
	if total, n := diskBytes(t, s); n != 20 || total > bound {
		t.Fatalf("at the bound: %d entries, %d bytes; want 20, <= %d", n, total, bound)
	}
	// A hit refreshes entry 0, so the sweep spares it.
	mustGet(t, s, "", action(0))
	for i := 20; i < 60; i++ {
		put(i)
		if total, _ := diskBytes(t, s); total > bound {
			t.Fatalf("after %d puts the store holds %d bytes, over its bound %d", i+1, total, bound)
		}
	}
	mustGet(t, s, "", action(0))
	mustGet(t, s, "", action(59))
	if _, err := s.Get(ctx, "", action(1)); !errors.Is(err, ErrNotFound) {
		t.Errorf("the least recently used entry survived: %v", err)
	}

	// Reopening with a smaller bound sweeps at once.
	s2, err := NewDisk(dir, 5*size)
	if err != nil {
		t.Fatal(err)
	}
	if total, _ := diskBytes(t, s2); total > 5*size {
		t.Errorf("after reopening with a bound of %d, the store holds %d bytes", 5*size, total)
	}
	mustGet(t, s2, "", action(0)) // the most recently used survives
	removed, err := s2.Sweep()
	if err != nil || removed != 0 {
		t.Errorf("Sweep of a store within its bound removed %d entries, %v", removed, err)
	}
}
