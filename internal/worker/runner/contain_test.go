package runner

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gantry-build/gantry/internal/worker/sandbox"
)

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// mode is a containment mechanism under test.
type mode struct {
	name   string
	cgroup bool
}

var modes = []mode{{"cgroup", true}, {"tracking", false}}

// newSup makes a supervisor of mode m on a new work directory, skipping
// the test when the cgroup mechanism is not available on this host.
func newSup(t *testing.T, m mode, workDir string, log *slog.Logger) *Supervisor {
	t.Helper()
	s, err := newSupervisor(workDir, log, m.cgroup)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if m.cgroup && s.cgDir == "" {
		t.Skip("no cgroup v2 directory can be created on this host; the tracking mode is tested instead")
	}
	if !m.cgroup && s.cgDir != "" {
		t.Fatal("tracking mode made a cgroup")
	}
	return s
}

// requireBwrap skips a test without bubblewrap, except under CI=true,
// where it fails (as the sandbox package's tests do).
func requireBwrap(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("bwrap"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("bwrap is required under CI=true: %v", err)
		}
		t.Skip("bwrap not installed")
	}
}

// escapes are ways for an action to leave processes behind that its
// process group does not hold. Each starts ./M, which says it runs (a file
// "ready") and becomes ./S 600 (sleep, found by the test in /proc by that
// command line and its working directory), and waits for it.
var escapes = []struct{ name, script string }{
	{"setsid", `setsid ./M 600 & wait_for_m`},
	{"double fork", `(./M 600 &) ; wait_for_m`},
	{"nohup", `nohup ./M 600 >/dev/null 2>&1 & wait_for_m`},
	{"setsid double fork", `(setsid ./M 600 &) ; wait_for_m`},
	{"setsid cleared environment", `(env -i setsid ./M 600 &) ; wait_for_m`},
}

// prelude defines wait_for_m: it polls until the pid in "ready" runs
// ./S 600, or gives up after the test's guard.
const prelude = `wait_for_m() { i=0; while :; do p=$(cat ready 2>/dev/null); if [ -n "$p" ] && [ "$(tr '\0' ' ' < /proc/$p/cmdline 2>/dev/null)" = "./S 600 " ]; then return 0; fi; i=$((i+1)); [ $i -lt 6000 ] || { echo no M >&2; exit 99; }; sleep 0.01; done; }
`

// anyProc reports whether one of pids still exists at all (a zombie
// counts: it must be reaped too).
func anyProc(pids []int) bool {
	for _, pid := range pids {
		if _, ok := readProc(pid); ok {
			return true
		}
	}
	return false
}

// execRoot makes a directory with the programs M and S in it.
func execRoot(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(sleep, filepath.Join(dir, "S")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "M"), []byte("#!/bin/sh\necho $$ > ready\nexec ./S \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
}

// markedIn returns the live processes running ./S 600 in dir.
func markedIn(dir string) []int {
	var out []int
	for _, p := range scanProcs() {
		if p.zombie() {
			continue
		}
		b, err := os.ReadFile("/proc/" + strconv.Itoa(p.pid) + "/cmdline")
		if err != nil || string(b) != "./S\x00600\x00" {
			continue
		}
		if cwd, err := os.Readlink("/proc/" + strconv.Itoa(p.pid) + "/cwd"); err == nil && cwd == dir {
			out = append(out, p.pid)
		}
	}
	return out
}

// sandboxWrapper returns the bubblewrap prefix for an action in root.
func sandboxWrapper(t *testing.T, workDir, root string) []string {
	t.Helper()
	requireBwrap(t)
	sb, err := sandbox.New(sandbox.Config{WorkDir: workDir, UID: 61730, GID: 65534})
	if err != nil {
		t.Fatal(err)
	}
	a, err := sb.Prepare(root, "", sandbox.Policy{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Finish() })
	return a.Wrapper
}

// ends are the ways an action ends.
var ends = []string{"exit", "timeout", "cancel"}

func TestEveryProcessEndsWithTheAction(t *testing.T) {
	for _, sandboxed := range []bool{false, true} {
		for _, m := range modes {
			for _, esc := range escapes {
				for _, end := range ends {
					name := fmt.Sprintf("%s/%s/%s/%s", map[bool]string{false: "plain", true: "bubblewrap"}[sandboxed], m.name, esc.name, end)
					t.Run(name, func(t *testing.T) {
						testEscape(t, m, sandboxed, esc.script, end)
					})
				}
			}
		}
	}
}

func testEscape(t *testing.T, m mode, sandboxed bool, script, end string) {
	// Without a sandbox, tracking can tell whose a setsid orphan is only
	// while no other action runs (see track.go): those run one at a time.
	if sandboxed || m.cgroup {
		t.Parallel()
	}
	base := t.TempDir()
	os.Chmod(base, 0o755)
	workDir := filepath.Join(base, "work")
	root := filepath.Join(workDir, "roots", "1")
	execRoot(t, root)
	s := newSup(t, m, workDir, quietLog())
	spec := Spec{Env: []string{testPath}, Dir: root, Stdout: filepath.Join(base, "out"), Stderr: filepath.Join(base, "err")}
	body := prelude + script + "; echo started"
	switch end {
	case "timeout":
		// The action outlives its timeout only after M runs; a slow
		// host makes the test fail (no M), never pass wrongly.
		body += "; sleep 600"
		spec.Timeout = 2 * time.Second
	case "cancel":
		body += "; sleep 600"
	}
	spec.Args = []string{"sh", "-c", body}
	if sandboxed {
		spec.Wrapper = sandboxWrapper(t, workDir, root)
	}
	p := startWith(t, s, spec)
	if end == "cancel" {
		eventually(t, "the escaped process to start", func() bool { return len(markedIn(root)) > 0 })
		p.Cancel()
	}
	r := wait(t, p)
	out, _ := os.ReadFile(spec.Stdout)
	errOut, _ := os.ReadFile(spec.Stderr)
	switch end {
	case "exit":
		if r.ExitCode != 0 || string(out) != "started\n" {
			t.Fatalf("result %+v, stdout %q, stderr %q: want exit 0 after starting the escaped process", r, out, errOut)
		}
	case "timeout":
		if !r.TimedOut || string(out) != "started\n" {
			t.Fatalf("result %+v, stdout %q, stderr %q: want a timeout after starting the escaped process", r, out, errOut)
		}
	case "cancel":
		if !r.Cancelled {
			t.Fatalf("result %+v: want Cancelled", r)
		}
	}
	// The escaped process is killed before Wait returns; the reaper
	// collects its zombie soon after. Under bubblewrap without a cgroup
	// the kernel kills it when the sandbox's PID namespace ends, which
	// may finish just after the outer bwrap exits.
	if sandboxed && !m.cgroup {
		eventually(t, "the sandbox's processes to end", func() bool { return len(markedIn(root)) == 0 })
	} else if left := markedIn(root); len(left) > 0 {
		t.Fatalf("processes %v of the action outlive it", left)
	}
	if !sandboxed {
		// The escaped process wrote its pid (a host pid outside a
		// sandbox): it must be reaped too, not left a zombie.
		b, err := os.ReadFile(filepath.Join(root, "ready"))
		pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || pid <= 0 {
			t.Fatalf("no pid of the escaped process: %q, %v", b, err)
		}
		eventually(t, "the escaped process to be reaped", func() bool { return !anyProc([]int{pid}) })
	}
}

// Suspend reaches processes outside the action's process group too.
func TestSuspendStopsEscapedProcesses(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			base := t.TempDir()
			root := filepath.Join(base, "root")
			execRoot(t, root)
			s := newSup(t, m, filepath.Join(base, "work"), quietLog())
			p := startWith(t, s, Spec{Args: []string{"sh", "-c", prelude + "setsid ./M 600 & wait_for_m; sleep 600"}, Env: []string{testPath}, Dir: root})
			var esc []int
			eventually(t, "the escaped process", func() bool { esc = markedIn(root); return len(esc) == 1 })
			if m.name == "tracking" {
				// Until the worker has seen it under its parent, a setsid
				// process whose parent lives is known by ancestry only.
				eventually(t, "the tracker to record it", func() bool {
					p.mu.Lock()
					defer p.mu.Unlock()
					_, ok := p.known[esc[0]]
					return ok
				})
			}
			if err := p.Suspend(); err != nil {
				t.Fatal(err)
			}
			stopped := func(want bool) func() bool {
				return func() bool {
					st, _, ok := procState(esc[0])
					return ok && (st == 'T') == want
				}
			}
			eventually(t, "the escaped process to stop", stopped(true))
			if err := p.Resume(); err != nil {
				t.Fatal(err)
			}
			eventually(t, "the escaped process to run again", stopped(false))
			p.Cancel()
			wait(t, p)
			eventually(t, "the escaped process to be gone", func() bool { return !anyProc(esc) })
		})
	}
}

// helperEnv makes the test binary act as a worker process (TestMain): it
// starts one action on the work directory named by the variable, says
// "started" and waits to be killed.
const helperEnv = "GANTRY_RUNNER_TEST_WORKER"

func workerHelper() int {
	cfg := strings.Split(os.Getenv(helperEnv), "\x1f") // workDir, root, cgroup, wrapper...
	if len(cfg) < 3 {
		fmt.Fprintln(os.Stderr, "bad helper config")
		return 2
	}
	workDir, root := cfg[0], cfg[1]
	s, err := newSupervisor(workDir, quietLog(), cfg[2] == "cgroup")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	script := prelude + "setsid ./M 600 & (./M 600 &) ; nohup ./M 600 >/dev/null 2>&1 & (env -i setsid ./M 600 &); ./M 600"
	p, err := s.Start(Spec{Args: []string{"sh", "-c", script}, Env: []string{testPath}, Dir: root, Wrapper: cfg[3:]})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	fmt.Printf("started %d %s\n", p.Pid(), s.Describe())
	select {}
}

// logBuffer is a concurrency-safe log sink.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// A worker killed with SIGKILL leaves its action's processes running; the
// next worker on the same work directory kills them before it runs
// anything, and a worker on another work directory leaves them alone.
func TestLeftoversOfAKilledWorkerAreKilledAtStart(t *testing.T) {
	for _, sandboxed := range []bool{false, true} {
		for _, m := range modes {
			t.Run(map[bool]string{false: "plain", true: "bubblewrap"}[sandboxed]+"/"+m.name, func(t *testing.T) {
				base := t.TempDir()
				os.Chmod(base, 0o755)
				workDir := filepath.Join(base, "work")
				root := filepath.Join(workDir, "roots", "1")
				execRoot(t, root)
				if m.cgroup {
					newSup(t, m, filepath.Join(base, "probe"), quietLog()) // skips without cgroups
				}
				cfg := []string{workDir, root, m.name}
				if sandboxed {
					cfg = append(cfg, sandboxWrapper(t, workDir, root)...)
				}
				exe, err := os.Executable()
				if err != nil {
					t.Fatal(err)
				}
				helper := exec.Command(exe, "-test.run=^$")
				helper.Env = append(os.Environ(), helperEnv+"="+strings.Join(cfg, "\x1f"))
				helper.Stderr = os.Stderr
				stdout, _ := helper.StdoutPipe()
				if err := helper.Start(); err != nil {
					t.Fatal(err)
				}
				killed := false
				t.Cleanup(func() {
					if !killed {
						helper.Process.Kill()
						helper.Wait()
					}
				})
				line, err := bufio.NewReader(stdout).ReadString('\n')
				if err != nil || !strings.HasPrefix(line, "started") {
					t.Fatalf("helper worker: %q, %v", line, err)
				}
				var procs []int
				eventually(t, "the action's five processes", func() bool { procs = markedIn(root); return len(procs) == 5 })
				if !m.cgroup {
					// Wait until the helper's tracker has recorded them all.
					eventually(t, "the pid file to name every process", func() bool {
						files, _ := filepath.Glob(filepath.Join(workDir, "procs", "*.pids"))
						var rec pidFileRecord
						for _, f := range files {
							b, _ := os.ReadFile(f)
							rec = parsePidFile(b)
						}
						for _, pid := range procs {
							if _, ok := rec.pids[pid]; !ok {
								return false
							}
						}
						return len(files) == 1
					})
				}
				helper.Process.Kill()
				helper.Wait()
				killed = true
				if sandboxed {
					// bwrap dies with the worker (--die-with-parent) and
					// its PID namespace with it.
					eventually(t, "the sandbox's processes to die with the worker", func() bool { return len(markedIn(root)) == 0 })
				} else {
					// The premise: without a sandbox they outlive the worker.
					if left := markedIn(root); len(left) != 5 {
						t.Fatalf("after the worker's death %v run, want all 5 of %v", left, procs)
					}
					// Another worker, on another work directory, leaves
					// them alone.
					newSup(t, m, filepath.Join(base, "other"), quietLog())
					if left := markedIn(root); len(left) != 5 {
						t.Fatalf("a worker on another work directory killed %v", procs)
					}
				}
				var logs logBuffer
				newSup(t, m, workDir, slog.New(slog.NewTextHandler(&logs, nil)))
				if left := markedIn(root); len(left) > 0 {
					t.Fatalf("processes %v left by the killed worker survive the next worker's start (log: %s)", left, logs.String())
				}
				if !sandboxed && !strings.Contains(logs.String(), "killed processes left running by an earlier worker") {
					t.Errorf("the start did not log what it killed: %s", logs.String())
				}
			})
		}
	}
}

// The reaper reaps orphans while actions and other children of the
// worker start and end around it, and never takes the exit status of a
// process an exec.Cmd waits for.
func TestReaperLeavesExitStatusesAlone(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			s := newSup(t, m, t.TempDir(), quietLog())
			const n = 12
			var wg sync.WaitGroup
			errs := make(chan string, 2*n)
			for i := 0; i < n; i++ {
				wg.Add(2)
				go func() {
					defer wg.Done()
					// Orphans that die at once, in and out of the session.
					p, err := s.Start(Spec{Args: []string{"sh", "-c", fmt.Sprintf("(setsid true &); (true &); exit %d", i)}, Env: []string{testPath}, Dir: t.TempDir()})
					if err != nil {
						errs <- err.Error()
						return
					}
					if r := p.Wait(); r.Err != nil || r.ExitCode != i {
						errs <- fmt.Sprintf("action %d: %+v", i, r)
					}
				}()
				go func() {
					defer wg.Done()
					// A child the worker starts by other means (in its own
					// process group, as pgtest does), left a zombie while the
					// reaper passes.
					cmd := exec.Command("sh", "-c", fmt.Sprintf("exit %d", i+1))
					cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
					if err := cmd.Start(); err != nil {
						errs <- err.Error()
						return
					}
					eventually(t, "the child to exit", func() bool { st, _, ok := procState(cmd.Process.Pid); return st == 'Z' || !ok })
					reapOnce(ownChildren)
					err := cmd.Wait()
					if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != i+1 {
						errs <- fmt.Sprintf("exec.Command %d: %v", i+1, err)
					}
				}()
			}
			wg.Wait()
			close(errs)
			for e := range errs {
				t.Error(e)
			}
		})
	}
}

// Tracking never kills a process another running action may own: an
// orphan that left the session while an earlier action ran is killed
// when that one ends too.
func TestTrackingDefersAmbiguousOrphans(t *testing.T) {
	base := t.TempDir()
	s := newSup(t, mode{"tracking", false}, filepath.Join(base, "work"), quietLog())
	earlier := startWith(t, s, Spec{Args: []string{"sleep", "600"}, Env: []string{testPath}})
	root := filepath.Join(base, "root")
	execRoot(t, root)
	// The orphan is never the child of a process the tracker could see
	// for long: the subshell exits at once.
	r := wait(t, startWith(t, s, Spec{Args: []string{"sh", "-c", prelude + "(setsid ./M 600 &) ; wait_for_m"}, Env: []string{testPath}, Dir: root}))
	if r.ExitCode != 0 {
		t.Fatalf("result %+v", r)
	}
	if left := markedIn(root); len(left) != 1 {
		t.Fatalf("processes %v: want the orphan to live while the earlier action, which might own it, runs", left)
	}
	earlier.Cancel()
	wait(t, earlier)
	if left := markedIn(root); len(left) > 0 {
		t.Fatalf("processes %v outlive every action that might own them", left)
	}
}

func TestParseStat(t *testing.T) {
	line := []byte("4242 (a (weird) name) S 1 4200 4100 0 -1 4194560 99 0 0 0 1 2 0 0 20 0 1 0 123456 1000 100 18446744073709551615")
	p, ok := parseStat(4242, line)
	if !ok || p.ppid != 1 || p.pgid != 4200 || p.sid != 4100 || p.state != 'S' || p.start != 123456 {
		t.Errorf("parseStat = %+v, %v", p, ok)
	}
	if _, ok := parseStat(1, []byte("1 (x) S 0")); ok {
		t.Error("a short line parsed")
	}
}
