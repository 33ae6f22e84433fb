package blobstore

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gantry-build/gantry/internal/digest"
)

// rebooted makes the store code see another boot id until the test ends.
func rebooted(t *testing.T) {
	another := func() string { return "another-boot" }
	real := bootIDSource.Swap(&another)
	t.Cleanup(func() { bootIDSource.Store(real) })
}

// damage overwrites a byte in the middle of path's file, keeping its size:
// what a blob written over an older one looks like when only part of it
// reached the disk before a power loss.
func damage(t *testing.T, path string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt([]byte{0xff, 0x00, 0xff}, 1<<20); err != nil {
		t.Fatal(err)
	}
}

// TestDiskHashesRecentFilesAfterReboot checks start-up after a power loss:
// large blob files renamed since the last seal are hashed and dropped if
// wrong; after a mere process restart (same boot) and for files older
// than the seal nothing is hashed.
func TestDiskHashesRecentFilesAfterReboot(t *testing.T) {
	if !canRecycle {
		t.Skip("no spares, so no seals, on this system")
	}
	ctx := context.Background()
	dir := t.TempDir()
	s := openDisk(t, dir, 0)
	a, b := blob("a", 2<<20), blob("b", 2<<20)
	da := mustPut(t, s, a, digest.SHA256)
	db := mustPut(t, s, b, digest.SHA256)
	small := mustPut(t, s, blob("small", 1000), digest.SHA256)
	damage(t, s.path(db))

	// The same boot: the page cache survived a process crash, nothing
	// is hashed.
	if s2 := openDisk(t, dir, 0); s2.verified != 0 {
		t.Errorf("after a restart in the same boot %d files were hashed, want 0", s2.verified)
	}

	// Another boot, and the record from before both blobs (written when
	// the store was first opened): both are hashed and the damaged one
	// dropped.
	rebooted(t)
	s3 := openDisk(t, dir, 0)
	if s3.verified != 2 {
		t.Errorf("after a reboot %d files were hashed, want the 2 large ones", s3.verified)
	}
	mustGet(t, s3, da, a)
	if has, _ := Has(ctx, s3, db); has {
		t.Error("the damaged blob is still served after the reboot")
	}
	if has, _ := Has(ctx, s3, small); !has {
		t.Error("the small blob is gone")
	}
	assertNoTemp(t, s3)

	// A damaged record: every large file is hashed (one is left), and
	// the record is written anew.
	if err := os.WriteFile(filepath.Join(dir, sealFile), []byte("garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	s5 := openDisk(t, dir, 0)
	if s5.verified != 1 {
		t.Errorf("with a damaged seal record %d files were hashed, want 1", s5.verified)
	}
	if _, at, ok := s5.sealer.readSeal(); !ok || at.IsZero() {
		t.Error("the damaged seal record was not replaced")
	}

	// A seal after the blobs: nothing older than it is hashed.
	if err := s3.sealer.seal(time.Now().Add(sealMargin + time.Second)); err != nil {
		t.Fatal(err)
	}
	damage(t, s3.path(da))
	if s4 := openDisk(t, dir, 0); s4.verified != 0 {
		t.Errorf("%d files older than the seal were hashed, want 0", s4.verified)
	}
}

// TestDiskSealsAfterCommits checks that committing large files schedules
// a seal that records this boot and a time after the commit, also when
// no file was written into a spare (the record only moves on), and that
// a store without spares' risk (fsync) records none.
func TestDiskSealsAfterCommits(t *testing.T) {
	if !canRecycle {
		t.Skip("no spares, so no seals, on this system")
	}
	waitSeal := func(s *Disk, after time.Time) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			boot, at, ok := s.sealer.readSeal()
			if ok && boot == orUnknown(bootID()) && at.After(after) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("no seal after %v (record: %q %v %v)", after, boot, at, ok)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	// Eight 2 MiB blobs in a store that holds eight and a half (as
	// spareStore), sealing 10 ms after a commit.
	s := openDisk(t, t.TempDir(), 8*spareTestSize+spareTestSize/2)
	s.sealer.every = 10 * time.Millisecond
	for i := range 8 {
		mustPut(t, s, blob(fmt.Sprint("fill", i), spareTestSize), digest.SHA256)
	}
	before := time.Now()
	mustPut(t, s, blob("new", spareTestSize), digest.SHA256) // evicts, keeps a spare
	waitSeal(s, before)
	s.settle()
	if len(s.spareList()) != 1 {
		t.Fatal("no spare to reuse")
	}
	before = time.Now()
	mustPut(t, s, blob("reused", spareTestSize), digest.SHA256)
	if _, n := s.Spares(); n != 1 {
		t.Fatalf("%d uploads written into spares, want 1", n)
	}
	waitSeal(s, before)

	fs := openDiskOpts(t, t.TempDir(), DiskOptions{Fsync: true, PackThreshold: -1})
	fs.sealer.every = 10 * time.Millisecond
	mustPut(t, fs, blob("fsync", spareTestSize), digest.SHA256)
	time.Sleep(100 * time.Millisecond)
	if _, _, ok := fs.sealer.readSeal(); ok {
		t.Error("a store that flushes every blob wrote a seal record")
	}
}

// TestSealerAlone exercises the sealer without a store: the record it
// keeps, what it asks to hash after a reboot, and the seal a commit
// schedules.
func TestSealerAlone(t *testing.T) {
	if !canRecycle {
		t.Skip("no spares, so no seals, on this system")
	}
	root := t.TempDir()
	sl := newSealer(root, root, false)
	sl.every = 10 * time.Millisecond
	if _, _, found := sl.readSeal(); found {
		t.Fatal("a record before any was written")
	}
	if _, verify := sl.verifyCutoff(); verify {
		t.Fatal("a new store asks for files to be hashed")
	}
	if err := sl.recordSeal(); err != nil {
		t.Fatal(err)
	}
	_, first, found := sl.readSeal()
	if !found || first.IsZero() {
		t.Fatal("recordSeal wrote no record")
	}
	if _, verify := sl.verifyCutoff(); verify {
		t.Fatal("files to hash in the boot that wrote the record")
	}
	sl.committingLarge(true)
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, at, _ := sl.readSeal()
		if at.After(first) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no seal after a large file was committed")
		}
		time.Sleep(5 * time.Millisecond)
	}
	_, at, _ := sl.readSeal()
	rebooted(t)
	if cutoff, verify := sl.verifyCutoff(); !verify || !cutoff.Equal(at.Add(-sealMargin)) {
		t.Fatalf("after a reboot: cutoff %v, %v; want %v", cutoff, verify, at.Add(-sealMargin))
	}
	if err := os.WriteFile(filepath.Join(root, sealFile), []byte("garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	if cutoff, verify := sl.verifyCutoff(); !verify || !cutoff.IsZero() {
		t.Fatalf("a damaged record: cutoff %v, %v; want every large file hashed", cutoff, verify)
	}

	off := newSealer(t.TempDir(), t.TempDir(), true)
	if err := off.recordSeal(); err != nil {
		t.Fatal(err)
	}
	off.committingLarge(true)
	if _, _, found := off.readSeal(); found {
		t.Fatal("a store that flushes every blob keeps a seal record")
	}
}
