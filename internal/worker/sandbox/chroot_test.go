package sandbox

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/gantry-build/gantry/internal/testutil"
)

// chrootFixture is a work directory the action user can reach and an
// exec root in it holding busybox, reached through absolute symlinks as
// in a real sysroot.
type chrootFixture struct {
	work, root string
}

func newChrootFixture(t *testing.T, withTmp bool) chrootFixture {
	t.Helper()
	busybox := testutil.StaticBusybox(t)
	base := t.TempDir()
	// In chroot mode bwrap runs as the action user and must reach the
	// exec root from the host's view.
	for _, d := range []string{filepath.Dir(base), base} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	work := filepath.Join(base, "work")
	root := filepath.Join(work, "roots", "1")
	dirs := []string{"bin", "usr/bin", "proc", "work/dir", "etc"}
	if withTmp {
		dirs = append(dirs, "tmp")
	}
	for _, d := range dirs {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "bin", "busybox"), busybox, 0o555); err != nil {
		t.Fatal(err)
	}
	for _, l := range []string{"bin/sh", "usr/bin/env", "bin/cat", "bin/grep", "bin/id", "bin/readlink", "bin/test"} {
		if err := os.Symlink("/bin/busybox", filepath.Join(root, l)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "etc", "sysroot-marker"), []byte("sysroot\n"), 0o444); err != nil {
		t.Fatal(err)
	}
	return chrootFixture{work: work, root: root}
}

// run runs script with sh from the input root under a's wrapper.
func (c chrootFixture) run(t *testing.T, a *Action, script string) (string, error) {
	t.Helper()
	argv := append(append([]string{}, a.Wrapper...), "/bin/sh", "-c", script)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = c.root
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func TestChrootRunsWithTheInputRootAsSlash(t *testing.T) {
	requireBwrap(t)
	c := newChrootFixture(t, false)
	s, err := New(Config{Chroot: true, WorkDir: c.work, UID: 61730, GID: 65534, TmpSize: 16 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(s.Describe(), "input root as /") {
		t.Errorf("Describe() = %q does not say actions run with the input root as /", s.Describe())
	}
	a, err := s.Prepare(c.root, filepath.Join(c.root, "work", "dir"), Policy{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Finish()
	if a.Dir != "/work/dir" || len(a.Mounts) != 1 || a.Mounts[0] != (Bind{Src: c.root, Dst: "/"}) {
		t.Errorf("the action's view: dir %q, mounts %v; want /work/dir with the exec root at /", a.Dir, a.Mounts)
	}
	marker := "gantry-chroot-test-" + strconv.Itoa(os.Getpid())
	script := `set -e
test "$(readlink /proc/$$/exe)" = /bin/busybox
test "$(pwd)" = /work/dir
cat /etc/sysroot-marker
test ! -e /etc/debian_version
test ! -e /usr/bin/go
for n in null zero full random urandom tty; do test -c /dev/$n; done
grep -q ' /tmp tmpfs ' /proc/mounts
echo scratch > /tmp/scratch
test "$(grep -c : /proc/net/dev)" = 1
echo made > /` + marker + `
id -u`
	out, err := c.run(t, a, script)
	if err != nil {
		t.Fatalf("the action failed in the chroot: %v\n%s", err, out)
	}
	if !strings.Contains(out, "sysroot") {
		t.Errorf("the input root's /etc was not the action's: %q", out)
	}
	if os.Geteuid() == 0 && !strings.Contains(out, "61730") {
		t.Errorf("a root worker's action ran as %q, want uid 61730", out)
	}
	if b, err := os.ReadFile(filepath.Join(c.root, marker)); err != nil || string(b) != "made\n" {
		t.Errorf("the action's /%s is not in the exec root: %q, %v", marker, b, err)
	}
	if _, err := os.Stat("/" + marker); err == nil {
		os.Remove("/" + marker)
		t.Errorf("/%s appeared on the host", marker)
	}
	if _, err := os.Stat(filepath.Join(c.root, "tmp", "scratch")); err == nil {
		t.Error("/tmp was not a tmpfs of its own: its file landed in the exec root")
	}
}

func TestChrootKeepsTheInputRootsTmp(t *testing.T) {
	requireBwrap(t)
	c := newChrootFixture(t, true)
	s, err := New(Config{Chroot: true, WorkDir: c.work, UID: 61731, GID: 65534})
	if err != nil {
		t.Fatal(err)
	}
	a, err := s.Prepare(c.root, "", Policy{Network: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Finish()
	if slices.Contains(a.Wrapper, "--unshare-net") || slices.Contains(a.Wrapper, "--tmpfs") {
		t.Errorf("network on, input root with tmp: %v", a.Wrapper)
	}
	if out, err := c.run(t, a, "echo kept > /tmp/kept"); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if b, err := os.ReadFile(filepath.Join(c.root, "tmp", "kept")); err != nil || string(b) != "kept\n" {
		t.Errorf("the input root's tmp was not the action's /tmp: %q, %v", b, err)
	}
}

// The input root's dev and proc are mounted over: as a symlink bwrap
// would follow it on the host's side, so such an input root is refused,
// saying what to change.
func TestChrootRefusesDevAsSymlink(t *testing.T) {
	requireBwrap(t)
	c := newChrootFixture(t, false)
	s, err := New(Config{Chroot: true, WorkDir: c.work, UID: 61732, GID: 65534})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc", filepath.Join(c.root, "dev")); err != nil {
		t.Fatal(err)
	}
	_, err = s.Prepare(c.root, "", Policy{}, nil)
	var bad *InputRootError
	if !errors.As(err, &bad) || !strings.Contains(err.Error(), "make dev an empty directory") {
		t.Errorf("err = %v, want an InputRootError saying to make dev an empty directory", err)
	}
}

// A root worker drops to the action's uid before bwrap (whose prlimit and
// setpriv would not be found inside the input root), with the fallback
// limits set in front of it.
func TestChrootArgvDropsRootBeforeBwrap(t *testing.T) {
	requireBwrap(t)
	c := newChrootFixture(t, false)
	s, err := New(Config{Chroot: true, WorkDir: c.work, UID: 61733, GID: 65534})
	if err != nil {
		t.Fatal(err)
	}
	a, err := s.Prepare(c.root, "", Policy{PidsLimit: 64}, []Bind{{Src: c.work, Dst: filepath.Join(c.root, "usr")}})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Finish()
	bw := slices.Index(a.Wrapper, s.bwrap)
	if bw < 0 {
		t.Fatalf("no bwrap in %v", a.Wrapper)
	}
	before, after := strings.Join(a.Wrapper[:bw], " "), strings.Join(a.Wrapper[bw:], " ")
	if !s.CgroupActive() && !strings.Contains(before, "--nproc=64") {
		t.Errorf("the fallback limits are not set before bwrap: %v", a.Wrapper)
	}
	if os.Geteuid() == 0 && !strings.Contains(before, "--reuid=61733") {
		t.Errorf("a root worker does not drop to the action's uid before bwrap: %v", a.Wrapper)
	}
	for _, want := range []string{"--bind " + c.root + " /", "--ro-bind " + c.work + " /usr", "--unshare-user", "--unshare-net", "--die-with-parent"} {
		if !strings.Contains(after, want) {
			t.Errorf("bwrap's arguments lack %q: %s", want, after)
		}
	}
	if strings.Contains(after, "--ro-bind / /") {
		t.Errorf("the host's root is mounted in chroot mode: %s", after)
	}
	if a.Mounts[1] != (Bind{Src: c.work, Dst: "/usr"}) {
		t.Errorf("the bound input directory as the action sees it: %v", a.Mounts)
	}
}
