package fileio

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestReadFile(t *testing.T) {
	dir := t.TempDir()
	for _, size := range []int{0, 1, 511, 512, 513, 4096, 100_000, 1 << 20} {
		want := bytes.Repeat([]byte("0123456789abcdefg"), size/17+1)[:size]
		p := filepath.Join(dir, "f")
		if err := os.WriteFile(p, want, 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := ReadFile(p)
		if err != nil {
			t.Fatalf("size %d: %v", size, err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("size %d: read %d bytes, want %d (or different contents)", size, len(got), len(want))
		}
	}
}

// A /proc file says its size is 0 and reads in pieces: all of it comes back.
func TestReadFileProc(t *testing.T) {
	want, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Skip("no /proc:", err)
	}
	got, err := ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	// The maps change between two reads; both must hold several lines.
	if n, m := bytes.Count(got, []byte("\n")), bytes.Count(want, []byte("\n")); n < m/2 || n < 5 {
		t.Fatalf("ReadFile read %d lines of /proc/self/maps, os.ReadFile %d", n, m)
	}
}

func TestReadFileMissing(t *testing.T) {
	_, err := ReadFile(filepath.Join(t.TempDir(), "nope"))
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("err = %v, want one that is fs.ErrNotExist", err)
	}
	if !strings.Contains(err.Error(), "nope") {
		t.Fatalf("err %q does not name the file", err)
	}
}

func TestHashFile(t *testing.T) {
	dir := t.TempDir()
	for _, size := range []int{0, 1, 1000, bufSize - 1, bufSize, bufSize + 1, 3*bufSize + 7} {
		data := bytes.Repeat([]byte{byte(size)}, size)
		p := filepath.Join(dir, "f")
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		want := sha256.Sum256(data)
		// The right hint, no hint and a wrong one give the same result.
		for _, hint := range []int64{int64(size), 0, int64(size) / 2, int64(size) + 10} {
			h := sha256.New()
			n, err := HashFile(p, h, hint)
			if err != nil {
				t.Fatal(err)
			}
			if n != int64(size) || !bytes.Equal(h.Sum(nil), want[:]) {
				t.Fatalf("size %d hint %d: hashed %d bytes, digest differs: %v", size, hint, n, !bytes.Equal(h.Sum(nil), want[:]))
			}
		}
	}
}

func TestWriteAtomic(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "out")
	if err := os.WriteFile(p, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	old := syscall.Umask(0o077) // a strict umask must not change the mode
	defer syscall.Umask(old)
	umask = func() uint32 { return 0o077 }
	defer func() { umask = readUmask }()
	for _, perm := range []os.FileMode{0o644, 0o755} {
		err := WriteAtomic(p, filepath.Join(dir, ".tmp"), perm, func(w io.Writer) error {
			_, err := io.WriteString(w, "new contents")
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		got, _ := os.ReadFile(p)
		fi, _ := os.Stat(p)
		if string(got) != "new contents" || fi.Mode().Perm() != perm {
			t.Fatalf("after WriteAtomic: %q mode %v, want %q mode %v", got, fi.Mode().Perm(), "new contents", perm)
		}
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("the directory holds %d entries, want only the file", len(entries))
	}
}

func TestWriteAtomicFailure(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "out")
	if err := os.WriteFile(p, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	err := WriteAtomic(p, filepath.Join(dir, ".tmp"), 0o644, func(w io.Writer) error {
		io.WriteString(w, "half")
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v, want the fill's error", err)
	}
	got, _ := os.ReadFile(p)
	entries, _ := os.ReadDir(dir)
	if string(got) != "old" || len(entries) != 1 {
		t.Fatalf("after a failed fill: %q and %d entries, want the old file alone", got, len(entries))
	}
	// A temporary name that exists is an error, not an overwrite.
	if err := os.WriteFile(filepath.Join(dir, ".tmp"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	err = WriteAtomic(p, filepath.Join(dir, ".tmp"), 0o644, func(io.Writer) error { return nil })
	if !errors.Is(err, fs.ErrExist) {
		t.Fatalf("err = %v, want fs.ErrExist", err)
	}
}

func TestUmask(t *testing.T) {
	old := syscall.Umask(0o027)
	syscall.Umask(old)
	if got := readUmask(); got != uint32(old) {
		t.Fatalf("readUmask() = %o, the process's umask is %o", got, old)
	}
}
