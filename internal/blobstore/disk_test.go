package blobstore

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gantry-build/gantry/internal/digest"
)

// assertNoTemp fails if the store left temporary files behind: tmp may
// hold only the spares the store knows of (see spare.go).
func assertNoTemp(t *testing.T, s *Disk) {
	t.Helper()
	ents, err := os.ReadDir(s.tmp)
	if err != nil {
		t.Fatal(err)
	}
	spares := map[string]bool{}
	for _, sp := range s.spareList() {
		spares[filepath.Base(sp.name)] = true
	}
	for _, e := range ents {
		if !spares[e.Name()] {
			t.Errorf("temporary file %s left behind", e.Name())
		}
		delete(spares, e.Name())
	}
	for n := range spares {
		t.Errorf("spare %s is listed but not in %s", n, s.tmp)
	}
}

// openDisk opens a disk store that gives every blob its own file: the
// tests in this file damage and inspect blob files. pack_test.go tests
// packed blobs.
func openDisk(t *testing.T, dir string, maxBytes int64) *Disk {
	t.Helper()
	return openDiskOpts(t, dir, DiskOptions{MaxBytes: maxBytes, PackThreshold: -1})
}

func openDiskOpts(t *testing.T, dir string, opts DiskOptions) *Disk {
	t.Helper()
	s, err := NewDisk(dir, opts)
	if err != nil {
		t.Fatalf("NewDisk(%s): %v", dir, err)
	}
	return s
}

func TestDiskReopen(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := openDisk(t, dir, 0)
	want := map[digest.Digest][]byte{}
	for i, fn := range digest.Supported {
		data := blob(digest.Name(fn), 100*(i+1))
		want[mustPut(t, s, data, fn)] = data
	}
	n1, b1 := s.Stats()

	s2 := openDisk(t, dir, 0)
	if n, b := s2.Stats(); n != n1 || b != b1 {
		t.Errorf("reopened store has %d blobs, %d bytes; want %d, %d", n, b, n1, b1)
	}
	for d, data := range want {
		got, err := Get(ctx, s2, d)
		if err != nil || !bytes.Equal(got, data) {
			t.Errorf("%s after reopen: %d bytes, %v", d, len(got), err)
		}
	}
}

func TestDiskReopenCleansDamage(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := openDisk(t, dir, 0)
	keep := mustPut(t, s, blob("keep", 500), digest.SHA256)
	truncated := mustPut(t, s, blob("truncated", 500), digest.SHA256)
	grown := mustPut(t, s, blob("grown", 500), digest.SHA1)

	// An interrupted write leaves a temporary file; a crash mid-write leaves
	// a file of the wrong size under a blob's name; strangers leave junk.
	if err := os.WriteFile(filepath.Join(s.tmp, "w123456"), []byte("partial"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(s.path(truncated), 499); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(s.path(grown), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte("extra"))
	f.Close()
	prefixDir := filepath.Dir(s.path(keep))
	junk := []string{
		filepath.Join(prefixDir, "not-a-blob"),
		filepath.Join(prefixDir, keep.Hash),                    // no size
		filepath.Join(prefixDir, keep.Hash+"-x"),               // bad size
		filepath.Join(prefixDir, keep.Hash+"-500-1"),           // trailing junk
		filepath.Join(prefixDir, strings.Repeat("a", 40)+"-1"), // SHA1 length in the sha256 tree
		filepath.Join(prefixDir, strings.ToUpper(keep.Hash)+"-500"),
		filepath.Join(dir, "sha256", "zz", strings.Repeat("b", 64)+"-1"), // 1 byte, wrong prefix dir
	}
	for _, p := range junk {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	s2 := openDisk(t, dir, 0)
	assertNoTemp(t, s2)
	if n, b := s2.Stats(); n != 1 || b != 500 {
		t.Errorf("reopened store has %d blobs, %d bytes; want only the intact blob (1, 500)", n, b)
	}
	if got, err := Get(ctx, s2, keep); err != nil || !bytes.Equal(got, blob("keep", 500)) {
		t.Errorf("intact blob: %d bytes, %v", len(got), err)
	}
	for _, d := range []digest.Digest{truncated, grown} {
		if _, err := s2.Open(ctx, d, 0); !errors.Is(err, ErrNotFound) {
			t.Errorf("damaged blob %s: Open = %v, want ErrNotFound", d, err)
		}
		if _, err := os.Stat(s2.path(d)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("damaged blob file %s was not removed: %v", s2.path(d), err)
		}
	}
	for _, p := range junk {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("junk file %s was not removed: %v", p, err)
		}
	}
	// The damaged blobs can be uploaded again.
	mustPut(t, s2, blob("truncated", 500), digest.SHA256)
	if got, err := Get(ctx, s2, truncated); err != nil || !bytes.Equal(got, blob("truncated", 500)) {
		t.Errorf("re-uploaded blob: %d bytes, %v", len(got), err)
	}
}

// TestDiskReopenEvictsOldest checks that the index rebuilt at start keeps
// the most recently written blobs when the bound shrank.
func TestDiskReopenEvictsOldest(t *testing.T) {
	dir := t.TempDir()
	s := openDisk(t, dir, 0)
	names := []string{"old", "middle", "new"}
	ds := make([]digest.Digest, len(names))
	base := time.Now().Add(-time.Hour)
	for i, n := range names {
		ds[i] = mustPut(t, s, blob(n, 1000), digest.SHA256)
		mt := base.Add(time.Duration(i) * time.Minute)
		if err := os.Chtimes(s.path(ds[i]), mt, mt); err != nil {
			t.Fatal(err)
		}
	}
	s2 := openDisk(t, dir, 2500)
	missing, _ := s2.FindMissing(context.Background(), ds)
	if len(missing) != 1 || missing[0] != ds[0] {
		t.Errorf("after reopening with room for two, missing = %v; want only the oldest %v", missing, ds[0])
	}
	if _, err := os.Stat(s2.path(ds[0])); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("evicted blob's file still exists: %v", err)
	}
}

// TestDiskFileRemovedBehindItsBack checks that a blob whose file vanished
// (an operator cleaned the directory) is reported missing, not served.
func TestDiskFileRemovedBehindItsBack(t *testing.T) {
	ctx := context.Background()
	s := openDisk(t, t.TempDir(), 0)
	d := mustPut(t, s, blob("gone", 100), digest.SHA256)
	if err := os.Remove(s.path(d)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Open(ctx, d, 0); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Open = %v, want ErrNotFound", err)
	}
	if missing, _ := s.FindMissing(ctx, []digest.Digest{d}); len(missing) != 1 {
		t.Error("FindMissing still reports the vanished blob as present")
	}
	if n, b := s.Stats(); n != 0 || b != 0 {
		t.Errorf("Stats = %d, %d; want 0, 0", n, b)
	}
	mustPut(t, s, blob("gone", 100), digest.SHA256)
	if got, err := Get(ctx, s, d); err != nil || !bytes.Equal(got, blob("gone", 100)) {
		t.Errorf("re-put: %d bytes, %v", len(got), err)
	}
}

func TestNewDiskErrors(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := NewDisk(filepath.Join(file, "cas"), DiskOptions{}); err == nil {
		t.Error("NewDisk under a regular file succeeded")
	}
}

// TestDiskDamagedBehindItsBack checks that a blob whose file was cut short
// while the store ran is reported missing rather than served short, and
// that a stray file under a blob's name does not block storing the blob.
func TestDiskDamagedBehindItsBack(t *testing.T) {
	ctx := context.Background()
	s := openDisk(t, t.TempDir(), 0)
	data := blob("damaged", 300)
	d := mustPut(t, s, data, digest.SHA256)
	if err := os.Truncate(s.path(d), 100); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Open(ctx, d, 0); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Open of a truncated blob = %v, want ErrNotFound", err)
	}
	if n, _ := s.Stats(); n != 0 {
		t.Errorf("the truncated blob is still indexed")
	}
	// The short file is still there, unindexed; storing the blob replaces it.
	mustPut(t, s, data, digest.SHA256)
	if got, err := Get(ctx, s, d); err != nil || !bytes.Equal(got, data) {
		t.Errorf("after re-put: %d bytes, %v", len(got), err)
	}
}

// An upload that fills the store returns without waiting for the evicted
// files to be unlinked; at most backgroundRemovals are unlinked in the
// background, further evictions by their caller; and a blob stored again
// while its evicted file is still being removed keeps its new file.
func TestDiskEvictionRemovesInTheBackground(t *testing.T) {
	ctx := context.Background()
	const size = 256 << 10
	s := openDisk(t, t.TempDir(), size*5/2) // two blobs fit
	gate := make(chan struct{})
	removals := make(chan bool, 10) // each removal: whether in the background
	s.removeHook = func(background bool) {
		removals <- background
		if background {
			<-gate
		}
	}
	// removal waits for the next removal to start and says where it runs.
	removal := func() bool {
		t.Helper()
		select {
		case bg := <-removals:
			return bg
		case <-time.After(30 * time.Second):
			t.Fatal("no removal started after an eviction")
			return false
		}
	}
	data := map[string][]byte{}
	ds := map[string]digest.Digest{}
	// put stores blob name; it fails the test (instead of hanging) if the
	// Put does not return while background removals are held.
	put := func(name string) {
		t.Helper()
		if data[name] == nil {
			data[name] = blob(name, size)
		}
		done := make(chan digest.Digest, 1)
		go func() { done <- mustPut(t, s, data[name], digest.SHA256) }()
		select {
		case ds[name] = <-done:
		case <-time.After(30 * time.Second):
			t.Fatalf("storing %s waited for the removal of evicted blobs", name)
		}
	}
	exists := func(name string) bool {
		_, err := os.Stat(s.path(ds[name]))
		return err == nil
	}
	put("a")
	put("b")
	put("c") // evicts a: removed in the background, held at the gate
	put("d") // evicts b: the second background removal
	if !removal() || !removal() {
		t.Fatal("the first two evictions were not removed in the background")
	}
	if !exists("a") || !exists("b") {
		t.Fatal("a held background removal has already unlinked its file")
	}
	if missing, _ := s.FindMissing(ctx, []digest.Digest{ds["a"], ds["b"]}); len(missing) != 2 {
		t.Errorf("FindMissing of the evicted blobs = %v, want both missing", missing)
	}
	put("e") // evicts c: both background slots are taken, so its caller unlinks it
	if removal() {
		t.Fatal("a third eviction was removed in the background while two were under way")
	}
	if exists("c") {
		t.Error("c was evicted and removed by its caller, but its file is still there")
	}
	// a again, while its old file's removal is still held: the new copy
	// must wait for it rather than be unlinked by it.
	// (Should it not wait, give it time to finish first, so that the old
	// removal would then unlink the new file.)
	again := make(chan digest.Digest, 1)
	go func() { again <- mustPut(t, s, data["a"], digest.SHA256) }()
	finished := false
	select {
	case <-again:
		finished = true
	case <-time.After(200 * time.Millisecond):
	}
	close(gate)
	if !finished {
		select {
		case <-again:
		case <-time.After(30 * time.Second):
			t.Fatal("storing a again did not finish after the removals were let go")
		}
	}
	s.settle()
	mustGet(t, s, ds["a"], data["a"])
	if !exists("a") {
		t.Error("a was stored again, but its file is gone: the old removal unlinked the new copy")
	}
	if exists("b") {
		t.Error("b was evicted, but its file is still there after the background removals")
	}
	n, total := s.Stats()
	if n != 2 || total != 2*size {
		t.Errorf("Stats = %d blobs, %d bytes; want 2, %d", n, total, 2*size)
	}
	assertNoTemp(t, s)
}
