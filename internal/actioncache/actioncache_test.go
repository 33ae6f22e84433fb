package actioncache

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

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

func openDisk(t *testing.T, dir string, bound int64) *Disk {
	t.Helper()
	s, err := NewDisk(dir, bound)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestDiskReopen(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := openDisk(t, dir, 0)
	want := result(5, "persisted")
	if err := s.Put(ctx, "inst", action(1), want); err != nil {
		t.Fatal(err)
	}
	// A later entry for the same key replaces the earlier one.
	newer := result(0, "newer")
	if err := s.Put(ctx, "inst", action(2), want); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ctx, "inst", action(2), newer); err != nil {
		t.Fatal(err)
	}
	s.Close()
	// A crash in the middle of an append leaves a torn record at the end.
	log := filepath.Join(dir, "actioncache.log")
	good, _ := os.Stat(log)
	f, _ := os.OpenFile(log, os.O_WRONLY|os.O_APPEND, 0)
	f.Write(makeRecord(rawKey("inst", action(3)), []byte("truncated record"))[:30])
	f.Close()

	s2 := openDisk(t, dir, 0)
	if got := mustGet(t, s2, "inst", action(1)); !proto.Equal(got, want) {
		t.Errorf("after reopen Get = %v, want %v", got, want)
	}
	if got := mustGet(t, s2, "inst", action(2)); !proto.Equal(got, newer) {
		t.Errorf("after reopen the older value came back: %v", got)
	}
	if info, _ := os.Stat(log); info.Size() != good.Size() {
		t.Errorf("torn tail not cut off: log is %d bytes, want %d", info.Size(), good.Size())
	}
	// Appends after the repair are readable after another reopen.
	if err := s2.Put(ctx, "inst", action(4), want); err != nil {
		t.Fatal(err)
	}
	s2.Close()
	mustGet(t, openDisk(t, dir, 0), "inst", action(4))
}

func TestDiskCorruptEntry(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := openDisk(t, dir, 0)
	for i := range 3 {
		if err := s.Put(ctx, "", action(i), result(1, "x")); err != nil {
			t.Fatal(err)
		}
	}
	// Flip a byte inside the second record's data.
	e := s.index[rawKey("", action(1))].Value.(*diskEntry)
	b := make([]byte, 1)
	f, err := os.OpenFile(s.path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.ReadAt(b, e.off+recordHeader+2)
	b[0] ^= 0xff
	f.WriteAt(b, e.off+recordHeader+2)
	f.Close()
	if _, err := s.Get(ctx, "", action(1)); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get of a corrupt entry: %v, want ErrNotFound", err)
	}
	if n, _, _ := s.Stats(); n != 2 {
		t.Errorf("corrupt entry still indexed: %d entries", n)
	}
	mustGet(t, s, "", action(0))
	mustGet(t, s, "", action(2))
	// At reopen the log is cut at the damaged record.
	s.Close()
	s2 := openDisk(t, dir, 0)
	mustGet(t, s2, "", action(0))
	if _, err := s2.Get(ctx, "", action(2)); !errors.Is(err, ErrNotFound) {
		t.Errorf("record after a damaged one survived reopening: %v", err)
	}
}

func TestDiskBoundAndCompaction(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	rec := int64(len(makeRecord([32]byte{}, mustMarshal(t, result(0, "x")))))
	bound := 20 * rec
	s := openDisk(t, dir, bound)
	for i := range 20 {
		if err := s.Put(ctx, "", action(i), result(0, "x")); err != nil {
			t.Fatal(err)
		}
	}
	if n, live, _ := s.Stats(); n != 20 || live > bound {
		t.Fatalf("at the bound: %d entries, %d bytes; want 20, <= %d", n, live, bound)
	}
	mustGet(t, s, "", action(0)) // a hit makes entry 0 the most recently used
	for i := 20; i < 60; i++ {
		if err := s.Put(ctx, "", action(i), result(0, "x")); err != nil {
			t.Fatal(err)
		}
		if _, live, _ := s.Stats(); live > bound {
			t.Fatalf("after %d puts the store holds %d live bytes, over its bound %d", i+1, live, bound)
		}
		mustGet(t, s, "", action(0))
	}
	mustGet(t, s, "", action(59))
	if _, err := s.Get(ctx, "", action(1)); !errors.Is(err, ErrNotFound) {
		t.Errorf("the least recently used entry survived: %v", err)
	}
	// Compaction keeps exactly the live entries, in LRU order.
	before, live, _ := s.Stats()
	if err := s.Compact(); err != nil {
		t.Fatal(err)
	}
	after, live2, size := s.Stats()
	if after != before || live2 != live || size != live {
		t.Errorf("compaction changed the live set: %d/%d entries, %d/%d bytes, log %d", before, after, live, live2, size)
	}
	mustGet(t, s, "", action(0))
	mustGet(t, s, "", action(59))
	// Reopening with a smaller bound keeps the most recently used.
	s.Close()
	s2 := openDisk(t, dir, 5*rec)
	if n, live, _ := s2.Stats(); n != 5 || live > 5*rec {
		t.Errorf("after reopening with a bound of 5 entries: %d entries, %d bytes", n, live)
	}
	mustGet(t, s2, "", action(0)) // written last by the compaction: most recent
}

func TestDiskCompactsWhenDeadRecordsDominate(t *testing.T) {
	ctx := context.Background()
	s := openDisk(t, t.TempDir(), 0)
	big := &repb.ActionResult{StdoutRaw: make([]byte, 256<<10)}
	// Rewriting one key over and over leaves only dead records behind.
	for i := 0; i < 2*compactMin/(256<<10)+2; i++ {
		if err := s.Put(ctx, "", action(0), big); err != nil {
			t.Fatal(err)
		}
	}
	if s.compactions == 0 {
		t.Fatal("the log was never compacted")
	}
	if _, live, size := s.Stats(); size > 2*max(live, compactMin) {
		t.Errorf("log is %d bytes for %d live", size, live)
	}
	if got := mustGet(t, s, "", action(0)); len(got.StdoutRaw) != 256<<10 {
		t.Error("entry lost by compaction")
	}
}

func mustMarshal(t *testing.T, m proto.Message) []byte {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
