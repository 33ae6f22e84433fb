package sandbox

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gantry-build/gantry/internal/platform"
)

func TestParsePolicy(t *testing.T) {
	lim := Limits{AllowNetwork: false, MemoryLimit: 1 << 30, MaxMemoryLimit: 4 << 30, PidsLimit: 100, MaxPidsLimit: 1000}
	tests := []struct {
		props []Property
		want  Policy
		err   string
	}{
		{nil, Policy{false, 1 << 30, 100}, ""},
		{[]Property{{"OSFamily", "linux"}, {"network", "on"}}, Policy{true, 1 << 30, 100}, ""},
		{[]Property{{"dockerNetwork", "standard"}}, Policy{true, 1 << 30, 100}, ""},
		{[]Property{{"dockerNetwork", "off"}}, Policy{false, 1 << 30, 100}, ""},
		{[]Property{{"memory-limit", "512MiB"}, {"pids-limit", "64"}}, Policy{false, 512 << 20, 64}, ""},
		{[]Property{{"memory-limit", "4GiB"}}, Policy{false, 4 << 30, 100}, ""},
		{[]Property{{"memory-limit", "5GiB"}}, Policy{}, "exceeds this worker's cap"},
		{[]Property{{"pids-limit", "1001"}}, Policy{}, "max_pids_limit"},
		{[]Property{{"pids-limit", "0"}}, Policy{}, "positive whole number"},
		{[]Property{{"memory-limit", "12 parsecs"}}, Policy{}, "positive number of bytes"},
		{[]Property{{"network", "sometimes"}}, Policy{}, "use on or off"},
		{[]Property{{"network", "on"}, {"network", "off"}}, Policy{}, "given twice"},
	}
	for _, tc := range tests {
		got, err := ParsePolicy(tc.props, lim)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%v: err %v, want one containing %q", tc.props, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%v: got %+v, %v; want %+v", tc.props, got, err, tc.want)
		}
	}
}

func TestParseBytes(t *testing.T) {
	for in, want := range map[string]int64{"0": 0, "17": 17, "1k": 1024, "2MiB": 2 << 20, "3 GB": 3 << 30, "1TiB": 1 << 40} {
		if got, err := ParseBytes(in); err != nil || got != want {
			t.Errorf("ParseBytes(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "MiB", "-1", "1.5G", "1 parsec", "99999999999999999999", "9999999999TiB"} {
		if _, err := ParseBytes(in); err == nil {
			t.Errorf("ParseBytes(%q) accepted", in)
		}
	}
}

func TestParseOOMKills(t *testing.T) {
	ev := "low 0\nhigh 0\nmax 12\noom 3\noom_kill 2\noom_group_kill 0\n"
	if got := parseOOMKills(strings.NewReader(ev)); got != 2 {
		t.Errorf("oom_kill = %d, want 2", got)
	}
	if got := parseOOMKills(strings.NewReader("oom 1\noom_kill 0\n")); got != 0 {
		t.Errorf("oom_kill = %d, want 0", got)
	}
}

// The cgroup files are plain files: check against an ordinary directory
// that limits are written and an OOM kill is reported (the kernel side is
// exercised by the server tests when a cgroup parent is available).
func TestCgroupFilesAndOOMReport(t *testing.T) {
	parent := t.TempDir()
	a := &Action{s: &Sandbox{cgroup: parent}, pol: Policy{MemoryLimit: 64 << 20, PidsLimit: 32}, CgroupFD: -1}
	if err := a.makeCgroup(); err != nil {
		t.Fatal(err)
	}
	for f, want := range map[string]string{"memory.max": "67108864", "pids.max": "32"} {
		b, err := os.ReadFile(filepath.Join(a.Cgroup, f))
		if err != nil || string(b) != want {
			t.Errorf("%s = %q, %v; want %q", f, b, err, want)
		}
	}
	if !a.UseCgroupFD || a.CgroupFD < 0 {
		t.Error("no cgroup fd to start the process in")
	}
	os.WriteFile(filepath.Join(a.Cgroup, "memory.events"), []byte("oom 1\noom_kill 1\n"), 0o644)
	os.WriteFile(filepath.Join(a.Cgroup, "memory.peak"), []byte("50331648\n"), 0o644)
	out := a.finishCgroup()
	if out.PeakMemory != 48<<20 {
		t.Errorf("peak memory %d, want %d from memory.peak", out.PeakMemory, 48<<20)
	}
	if !out.OOMKilled || !strings.Contains(out.Message, "OUT OF MEMORY") || !strings.Contains(out.Message, "67108864") || !strings.Contains(out.Message, PropMemoryLimit) {
		t.Errorf("outcome %+v: want an OUT OF MEMORY report naming the limit and how to raise it", out)
	}
}

func TestCgroupParentMustBeCgroup2(t *testing.T) {
	err := setupCgroupParent(t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "not on a cgroup v2 filesystem") {
		t.Errorf("err = %v", err)
	}
}

func TestNewReportsMissingBwrap(t *testing.T) {
	_, err := New(Config{Bwrap: "/nonexistent/bwrap", WorkDir: t.TempDir(), UID: 65534, GID: 65534})
	if err == nil || !strings.Contains(err.Error(), "install it") {
		t.Errorf("err = %v, want a message saying to install bubblewrap", err)
	}
}

func TestNewRejectsUIDOverflow(t *testing.T) {
	requireBwrap(t)
	_, err := New(Config{WorkDir: t.TempDir(), UID: 1<<32 - 2, GID: 65534, UIDCount: 3})
	if err == nil || !strings.Contains(err.Error(), "largest uid") {
		t.Errorf("err = %v: uids wrapping round to 0 (root) must be refused", err)
	}
}

func requireBwrap(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("bwrap"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("bwrap is required under CI=true: %v", err)
		}
		t.Skip("bwrap not installed")
	}
}

func TestArgvHidesWorkDirAndBindsExecRoot(t *testing.T) {
	requireBwrap(t)
	base := t.TempDir()
	os.Chmod(filepath.Dir(base), 0o755)
	os.Chmod(base, 0o755)
	wd := filepath.Join(base, "work")
	extra := filepath.Join(base, "data")
	os.MkdirAll(filepath.Join(wd, "roots", "1"), 0o755)
	os.MkdirAll(extra, 0o755)
	s, err := New(Config{WorkDir: wd, HiddenPaths: []string{extra}, UID: 61710, GID: 65534, UIDCount: 2, Limits: Limits{PidsLimit: 50}})
	if err != nil {
		t.Fatal(err)
	}
	a, err := s.Prepare(filepath.Join(wd, "roots", "1"), "", Policy{PidsLimit: 50}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Finish()
	args := strings.Join(a.Wrapper, " ")
	for _, want := range []string{"--ro-bind / /", "--tmpfs /tmp", "--unshare-pid", "--unshare-net", "--die-with-parent", "--new-session", "--bind " + filepath.Join(wd, "roots", "1") + " " + filepath.Join(wd, "roots", "1")} {
		if !strings.Contains(args, want) {
			t.Errorf("wrapper lacks %q: %s", want, args)
		}
	}
	if !s.CgroupActive() && !strings.Contains(args, "--nproc=50") {
		t.Errorf("rlimit fallback without --nproc: %s", args)
	}
	if os.Geteuid() == 0 {
		if !strings.Contains(args, "--reuid=61710") && !strings.Contains(args, "--reuid=61711") {
			t.Errorf("root worker does not drop to the sandbox uid: %s", args)
		}
		info, _ := os.Stat(filepath.Join(wd, "roots", "1"))
		if st := info.Sys(); st == nil {
			t.Fatal("no stat")
		}
		// A second concurrent action gets the other uid.
		b, err := s.Prepare(filepath.Join(wd, "roots", "1"), "", Policy{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if slices.Equal(a.Wrapper, b.Wrapper) {
			t.Error("two concurrent actions got the same uid")
		}
		b.Finish()
	}
	// Network on drops --unshare-net.
	c, err := s.Prepare(filepath.Join(wd, "roots", "1"), "", Policy{Network: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Finish()
	if slices.Contains(c.Wrapper, "--unshare-net") {
		t.Error("network=on still unshares the network")
	}
	if !strings.Contains(s.Describe(), "bubblewrap") {
		t.Errorf("Describe() = %q", s.Describe())
	}
}

func TestNewRejectsUntraversableWorkDir(t *testing.T) {
	requireBwrap(t)
	if os.Geteuid() != 0 {
		t.Skip("only a root worker drops to another uid")
	}
	base := untraversableBase(t)
	os.Chmod(base, 0o700)
	wd := filepath.Join(base, "work")
	os.MkdirAll(wd, 0o755)
	_, err := New(Config{WorkDir: wd, UID: 65534, GID: 65534})
	if err == nil || !strings.Contains(err.Error(), "cannot be traversed") {
		t.Errorf("err = %v, want one about traversal", err)
	}
}

// untraversableBase makes a new directory outside /tmp for a work dir
// whose ancestors the action user cannot traverse: the sandbox's /tmp is
// private, so paths under it are always recreated traversable and the
// premise would not hold there (a checkout under the temp directory). It
// tries the package directory, then /var/tmp and the home and cache
// directories, and skips the test, saying why, when none will do.
func untraversableBase(t *testing.T) string {
	t.Helper()
	var tried []string
	cands := []string{".", "/var/tmp"}
	if h, err := os.UserHomeDir(); err == nil {
		cands = append(cands, h)
	}
	if c, err := os.UserCacheDir(); err == nil {
		cands = append(cands, c)
	}
	for _, c := range cands {
		abs, err := filepath.Abs(c)
		if err != nil {
			continue
		}
		if real, err := filepath.EvalSymlinks(abs); err == nil {
			abs = real
		}
		if inPrivateTmp(abs) {
			tried = append(tried, abs+" (under /tmp)")
			continue
		}
		base, err := os.MkdirTemp(abs, "untraversable-")
		if err != nil {
			tried = append(tried, fmt.Sprintf("%s (%v)", abs, err))
			continue
		}
		t.Cleanup(func() { os.RemoveAll(base) })
		return base
	}
	t.Skipf("no writable directory outside /tmp to build an untraversable work dir in; tried %s", strings.Join(tried, ", "))
	return ""
}

func FuzzParsePolicy(f *testing.F) {
	f.Add("network", "on", "memory-limit", "512MiB")
	f.Add("pids-limit", "64", "dockerNetwork", "standard")
	f.Add("memory-limit", "99999999999999999999TiB", "pids-limit", "-0")
	lim := Limits{MemoryLimit: 1 << 20, MaxMemoryLimit: 1 << 40, PidsLimit: 10, MaxPidsLimit: 1 << 20}
	f.Fuzz(func(t *testing.T, n1, v1, n2, v2 string) {
		pol, err := ParsePolicy([]Property{{n1, v1}, {n2, v2}}, lim)
		if err != nil {
			if len(err.Error()) > 512 {
				t.Fatalf("unbounded error message (%d bytes)", len(err.Error()))
			}
			return
		}
		if pol.MemoryLimit <= 0 || pol.MemoryLimit > lim.MaxMemoryLimit || pol.PidsLimit <= 0 || pol.PidsLimit > lim.MaxPidsLimit {
			t.Fatalf("policy %+v outside the worker's caps", pol)
		}
	})
}

func FuzzParseBytes(f *testing.F) {
	for _, s := range []string{"1", "1KiB", "3 GB", "9223372036854775807", "1TiB", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseBytes(s)
		if err == nil && n < 0 {
			t.Fatalf("ParseBytes(%q) = %d", s, n)
		}
	})
}

func FuzzParseOOMKills(f *testing.F) {
	f.Add("oom 1\noom_kill 2\n")
	f.Add("oom_kill -5\noom_kill 9999999999999999999999")
	f.Fuzz(func(t *testing.T, s string) {
		if n := parseOOMKills(strings.NewReader(s)); n < 0 {
			t.Fatalf("negative count %d", n)
		}
	})
}

// The scheduler must treat the sandbox properties as requests, not as
// labels a worker has to declare.
func TestPropertiesAreSpecialToTheScheduler(t *testing.T) {
	for _, p := range []string{PropNetwork, PropDockerNetwork, PropMemoryLimit, PropPidsLimit} {
		if !platform.IsSpecial(p) {
			t.Errorf("platform.IsSpecial(%q) = false", p)
		}
	}
}

// procState returns the state letter of every process whose command line
// contains marker.
func procState(marker string) map[int]string {
	out := map[int]string{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmd, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if !strings.Contains(string(cmd), marker) || strings.Contains(string(cmd), "bwrap") {
			continue
		}
		st, _ := os.ReadFile("/proc/" + e.Name() + "/stat")
		if i := strings.LastIndexByte(string(st), ')'); i > 0 && i+2 < len(st) {
			out[pid] = string(st[i+2])
		}
	}
	return out
}

func TestFreezeStopsTheActionInsideItsSession(t *testing.T) {
	requireBwrap(t)
	base := t.TempDir()
	root := filepath.Join(base, "roots", "1")
	os.MkdirAll(root, 0o755)
	s, err := New(Config{WorkDir: base, UID: 61720, GID: 65534})
	if err != nil {
		t.Fatal(err)
	}
	a, err := s.Prepare(root, "", Policy{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Finish()
	marker := "gantry-freeze-test-" + strconv.Itoa(os.Getpid())
	argv := append(append([]string{}, a.Wrapper...), "/bin/sh", "-c", "while :; do sleep 0.01; done; : "+marker)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	// waitFor polls (bounded) until every marked process is in a state
	// accepted by ok.
	waitFor := func(what string, ok func(string) bool) {
		t.Helper()
		var states map[int]string
		for i := 0; i < 200; i++ {
			states = procState(marker)
			all := len(states) > 0
			for _, st := range states {
				all = all && ok(st)
			}
			if all {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Fatalf("%s: process states %v", what, states)
	}
	waitFor("running", func(st string) bool { return st != "T" && st != "t" })
	a.Freeze(cmd.Process.Pid)
	// A process waiting for a child it started with vfork (posix_spawn)
	// sits in D while that child is stopped before its exec: it makes no
	// progress either. At least one process must be stopped.
	waitFor("frozen", func(st string) bool { return st == "T" || st == "t" || st == "D" })
	stopped := false
	for _, st := range procState(marker) {
		stopped = stopped || st == "T" || st == "t"
	}
	if !stopped {
		t.Fatalf("frozen: no process is stopped: %v", procState(marker))
	}
	a.Thaw(cmd.Process.Pid)
	waitFor("thawed", func(st string) bool { return st != "T" && st != "t" })
}
