package worker

import (
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"testing"
)

func writeFile(t *testing.T, path string, size int) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, make([]byte, size), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestDiskGuardPicksTheWriter checks which action the guard kills: the
// one that wrote most into its exec root (hardlinked inputs do not
// count), one at a time, and none while the disk has room.
func TestDiskGuardPicksTheWriter(t *testing.T) {
	dir := t.TempDir()
	w := &Worker{
		cfg:    Config{WorkDir: dir, MinFreeDisk: 1},
		log:    slog.New(slog.NewTextHandler(io.Discard, nil)),
		logs:   filepath.Join(dir, "logs"),
		leases: map[string]*activeLease{},
	}
	killed := map[string]int{}
	lease := func(id string) *activeLease {
		l := &activeLease{id: id}
		l.disk.root = filepath.Join(dir, "roots", id)
		l.disk.kill = func() { killed[id]++ }
		w.leases[id] = l
		return l
	}
	// a wrote 1MiB; b holds a 4MiB input (a hardlink) and wrote 64KiB.
	a, b := lease("a"), lease("b")
	writeFile(t, filepath.Join(a.disk.root, "out", "big"), 1<<20)
	writeFile(t, filepath.Join(dir, "cache", "input"), 4<<20)
	if err := os.MkdirAll(b.disk.root, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(filepath.Join(dir, "cache", "input"), filepath.Join(b.disk.root, "input")); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(b.disk.root, "small"), 64<<10)

	if err := w.checkDisk(); err != nil {
		t.Fatal(err)
	}
	if len(killed) != 0 {
		t.Fatalf("killed %v with the disk above the reserve", killed)
	}

	w.cfg.MinFreeDisk = math.MaxInt64 // always below the reserve
	w.checkDisk()
	if killed["a"] != 1 || killed["b"] != 0 {
		t.Fatalf("killed %v, want only a (it wrote most; b's input is a hardlink)", killed)
	}
	if !a.disk.killed || a.disk.written < 1<<20 {
		t.Errorf("a's disk state %+v does not record the kill", a.disk)
	}
	// While a is being cleaned up, nobody else is killed.
	w.checkDisk()
	if killed["a"] != 1 || killed["b"] != 0 {
		t.Fatalf("killed %v while a's space was on its way back", killed)
	}
	// a is gone and the disk is still full: b is next.
	delete(w.leases, "a")
	w.checkDisk()
	if killed["b"] != 1 {
		t.Fatalf("killed %v, want b once a is gone and the disk is still below the reserve", killed)
	}
	// Output spilled to the log directory counts as written.
	delete(w.leases, "b")
	c, d := lease("c"), lease("d")
	writeFile(t, filepath.Join(c.disk.root, "f"), 256<<10)
	writeFile(t, logPath(w.logs, "d", "stdout"), 2<<20)
	if err := os.MkdirAll(d.disk.root, 0o755); err != nil {
		t.Fatal(err)
	}
	w.checkDisk()
	if killed["d"] != 1 || killed["c"] != 0 {
		t.Fatalf("killed %v, want d (its stdout spilled 2MiB)", killed)
	}
}

func TestFormatBytes(t *testing.T) {
	for n, want := range map[int64]string{0: "0B", 1023: "1023B", 1024: "1.0KiB", 1536: "1.5KiB", 1 << 30: "1.0GiB", math.MaxInt64: "8.0EiB"} {
		if got := formatBytes(n); got != want {
			t.Errorf("formatBytes(%d) = %q, want %q", n, got, want)
		}
	}
}

// BenchmarkFreeBytes is the disk guard's cost per check.
func BenchmarkFreeBytes(b *testing.B) {
	dir := b.TempDir()
	for b.Loop() {
		if _, err := freeBytes(dir); err != nil {
			b.Fatal(err)
		}
	}
}
