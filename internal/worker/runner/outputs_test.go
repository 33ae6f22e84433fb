package runner

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestStdinIsDevNullAndFilesGivenAreUsed checks what an action's
// standard streams are: stdin reads as empty (/dev/null, shared by every
// action, stays open after each), and StdoutFile/StderrFile receive the
// output with nothing opened for the paths.
func TestStdinIsDevNullAndFilesGivenAreUsed(t *testing.T) {
	dir := t.TempDir()
	out, err := os.Create(filepath.Join(dir, "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	errf, err := os.Create(filepath.Join(dir, "err"))
	if err != nil {
		t.Fatal(err)
	}
	defer errf.Close()
	for i := range 3 {
		r := wait(t, start(t, Spec{
			Args: []string{"sh", "-c", `if read line; then echo "stdin gave $line"; else echo stdin-empty; fi; readlink /proc/self/fd/0 >&2`},
			Env:  []string{testPath}, Dir: dir, StdoutFile: out, StderrFile: errf,
			// Paths that must not be created when the files are given.
			Stdout: filepath.Join(dir, "stdout-path"), Stderr: filepath.Join(dir, "stderr-path"),
		}))
		if r.ExitCode != 0 {
			t.Fatalf("run %d: %+v", i, r)
		}
	}
	if got, _ := os.ReadFile(out.Name()); string(got) != strings.Repeat("stdin-empty\n", 3) {
		t.Errorf("stdout = %q, want stdin to read as empty in every run", got)
	}
	if got, _ := os.ReadFile(errf.Name()); string(got) != strings.Repeat("/dev/null\n", 3) {
		t.Errorf("stderr = %q, want stdin to be /dev/null in every run", got)
	}
	for _, p := range []string{"stdout-path", "stderr-path"} {
		if _, err := os.Stat(filepath.Join(dir, p)); err == nil {
			t.Errorf("%s was created although the spec gave a file for that stream", p)
		}
	}
	null, err := devNull()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := null.Stat(); err != nil {
		t.Errorf("the shared /dev/null was closed by a run: %v", err)
	}
}

// TestReadAt reads files of several sizes through readAt, relative to a
// directory descriptor and to the working directory.
func TestReadAt(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []int{0, 1, 511, 512, 513, 5000} {
		want := strings.Repeat("x", n)
		name := filepath.Join(dir, "f")
		if err := os.WriteFile(name, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := readAt(unix.AT_FDCWD, name)
		if err != nil || string(got) != want {
			t.Errorf("readAt of %d bytes = %d bytes, %v", n, len(got), err)
		}
		fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
		if err != nil {
			t.Fatal(err)
		}
		got, err = readAt(fd, "f")
		unix.Close(fd)
		if err != nil || string(got) != want {
			t.Errorf("readAt (relative) of %d bytes = %d bytes, %v", n, len(got), err)
		}
	}
	if _, err := readAt(unix.AT_FDCWD, filepath.Join(dir, "missing")); !os.IsNotExist(err) {
		t.Errorf("readAt of a missing file: %v, want not-exist", err)
	}
	if b, err := readAt(unix.AT_FDCWD, "/proc/self/stat"); err != nil || !strings.Contains(string(b), ")") {
		t.Errorf("readAt(/proc/self/stat) = %q, %v", b, err)
	}
}
