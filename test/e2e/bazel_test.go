package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

const (
	// bazelCommandTimeout bounds every single Bazel invocation.
	bazelCommandTimeout = 5 * time.Minute
	// bazelShutdownTimeout bounds the `bazel shutdown` run when a test ends.
	bazelShutdownTimeout = time.Minute
	// bazelMaxIdleSecs makes a Bazel server that was somehow not shut down (a killed
	// test process) go away by itself.
	bazelMaxIdleSecs = 900
	// bazelRemoteTimeoutSecs is --remote_timeout; Bazel 2.1.0 takes plain seconds only.
	bazelRemoteTimeoutSecs = 120
)

// bazelClient is one real Bazel release the tests drive.
type bazelClient struct {
	// Name is the subtest name: bazel4 or bazel2.
	Name string
	// Version is the Bazel release, for messages.
	Version string
	// Path is the Bazel binary.
	Path string
	// StartupFlags go before the command of every invocation.
	StartupFlags []string
	// Flags go after the command of every build and test invocation.
	Flags []string
}

// bazelClients returns the clients under test, wherever they are installed or not.
func bazelClients(t testing.TB) []*bazelClient {
	bazel4 := os.Getenv("GANTRY_BAZEL4")
	if bazel4 == "" {
		bazel4 = "/usr/bin/bazel"
	}
	bazel2 := os.Getenv("GANTRY_BAZEL2")
	if bazel2 == "" {
		bazel2 = filepath.Join(repoRoot(t), ".tools", "npm", "node_modules", "@bazel", "bazel-linux_x64", "bazel-2.1.0-linux-x86_64")
	}
	return []*bazelClient{
		{
			Name:    "bazel4",
			Version: "4.2.3",
			Path:    bazel4,
			// Debian's /etc/bazel/bazelrc turns --sandbox_debug on, which leaves the
			// sandboxes of local actions behind.
			Flags: []string{"--nosandbox_debug"},
		},
		{
			Name:    "bazel2",
			Version: "2.1.0",
			Path:    bazel2,
			// One install base for the whole test process instead of one per output
			// root saves extracting the binary (a few seconds) in every test.
			StartupFlags: []string{"--install_base=" + filepath.Join(tmpRoot, "bazel2-install")},
		},
	}
}

// forEachBazel runs f as a subtest per Bazel client. Each subtest skips (or fails,
// under CI=true) when its client is missing, and skips under -short.
func forEachBazel(t *testing.T, f func(t *testing.T, c *bazelClient)) {
	t.Helper()
	for _, c := range bazelClients(t) {
		t.Run(c.Name, func(t *testing.T) {
			requireBazel(t, c)
			f(t, c)
		})
	}
}

// requireBazel skips the test under -short, and when c is not installed skips it on a
// developer machine but fails it in CI.
func requireBazel(t *testing.T, c *bazelClient) {
	t.Helper()
	if testing.Short() {
		t.Skip("real-client end-to-end test: skipped with -short")
	}
	st, err := os.Stat(c.Path)
	if err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
		return
	}
	msg := fmt.Sprintf("Bazel %s not found at %s (run scripts/install-test-deps.sh, or set GANTRY_%s)",
		c.Version, c.Path, strings.ToUpper(c.Name))
	if inCI() {
		t.Fatal(msg + "; CI=true, so a missing client is a failure")
	}
	t.Skip(msg)
}

// bazelWorkspace is a private copy of testdata/bazel for one test, with its own Bazel
// output root (and so its own Bazel server, shut down when the test ends).
type bazelWorkspace struct {
	t      *testing.T
	client *bazelClient
	// Dir is the workspace root (the directory holding WORKSPACE).
	Dir            string
	outputUserRoot string
	logDir         string
	invocations    int
}

// newBazelWorkspace copies testdata/bazel (the workspace and the stand-ins for the
// external repositories it declares) to a temporary directory, so the convenience
// symlinks Bazel creates stay out of the repository.
func newBazelWorkspace(t *testing.T, c *bazelClient) *bazelWorkspace {
	t.Helper()
	dir := testDir(t, c.Name)
	if err := copyTree(filepath.Join(repoRoot(t), "testdata", "bazel"), filepath.Join(dir, "bazel")); err != nil {
		t.Fatalf("copying the workspace: %v", err)
	}
	w := &bazelWorkspace{
		t:              t,
		client:         c,
		Dir:            filepath.Join(dir, "bazel", "workspace"),
		outputUserRoot: filepath.Join(dir, "root"),
		logDir:         filepath.Join(dir, "logs"),
	}
	if err := os.MkdirAll(w.logDir, 0o755); err != nil {
		t.Fatal(err)
	}
	// Registered after testDir's cleanup, so the server stops before its directory goes.
	t.Cleanup(w.shutdown)
	return w
}

func itoa(n int) string { return strconv.Itoa(n) }

// bazelResult is what one Bazel invocation did.
type bazelResult struct {
	Args     []string
	Output   string // stdout and stderr, interleaved
	ExitCode int
	Duration time.Duration
}

// run runs `bazel <command> <args>` in the workspace, bounded by bazelCommandTimeout.
// Build and test commands also get the client's flags and the flags every test wants.
// A non-zero exit is not an error here; failing to run Bazel at all is fatal.
func (w *bazelWorkspace) run(command string, args ...string) *bazelResult {
	w.t.Helper()
	return w.runWithTimeout(bazelCommandTimeout, command, args...)
}

func (w *bazelWorkspace) runWithTimeout(timeout time.Duration, command string, args ...string) *bazelResult {
	w.t.Helper()
	argv := []string{
		"--output_user_root=" + w.outputUserRoot,
		"--max_idle_secs=" + strconv.Itoa(bazelMaxIdleSecs),
		// A developer's ~/.bazelrc must not change what is tested; Debian's system
		// bazelrc stays, since Bazel 4.2.3 needs its install_base.
		"--nohome_rc",
	}
	argv = append(argv, w.client.StartupFlags...)
	argv = append(argv, command)
	switch command {
	case "build", "test":
		argv = append(argv, "--color=no", "--curses=no", "--incompatible_strict_action_env")
		argv = append(argv, w.client.Flags...)
	}
	argv = append(argv, args...)

	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, w.client.Path, argv...)
	cmd.Dir = w.Dir
	cmd.Stdin = nil
	cmd.WaitDelay = 10 * time.Second
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out

	start := time.Now()
	err := cmd.Run()
	res := &bazelResult{Args: argv, Output: out.String(), Duration: time.Since(start)}
	var exitErr *exec.ExitError
	switch {
	case ctx.Err() != nil:
		w.t.Fatalf("%s %s timed out after %v; output:\n%s", w.client.Name, command, timeout, res.Output)
	case errors.As(err, &exitErr):
		res.ExitCode = exitErr.ExitCode()
	case err != nil:
		w.t.Fatalf("running %s: %v", w.client.Path, err)
	}

	w.invocations++
	logPath := filepath.Join(w.logDir, fmt.Sprintf("%02d-%s.log", w.invocations, command))
	_ = os.WriteFile(logPath, []byte(strings.Join(argv, " ")+"\n\n"+res.Output), 0o644)
	summary := ""
	if s, ok := lastProcessSummary(res.Output); ok {
		summary = " | " + s.Line
	}
	w.t.Logf("%s: exit %d in %v%s", strings.Join(append([]string{w.client.Name, command}, args...), " "),
		res.ExitCode, res.Duration.Round(10*time.Millisecond), summary)
	return res
}

// mustRun is run that fails the test, printing Bazel's output, unless Bazel exits 0.
func (w *bazelWorkspace) mustRun(command string, args ...string) *bazelResult {
	w.t.Helper()
	res := w.run(command, args...)
	if res.ExitCode != 0 {
		w.t.Fatalf("%s (Bazel %s) %s failed with exit code %d%s; output:\n%s",
			w.client.Name, w.client.Version, strings.Join(res.Args, " "), res.ExitCode,
			exitCodeHint(res.ExitCode), res.Output)
	}
	return res
}

// exitCodeHint explains the Bazel exit codes these tests meet.
func exitCodeHint(code int) string {
	switch code {
	case 1:
		return " (build failed)"
	case 2:
		return " (command line or environment problem)"
	case 3:
		return " (build OK, some tests failed)"
	case 4:
		return " (build OK, no tests found)"
	case 34:
		return " (remote error: Bazel could not talk to the remote cache or executor)"
	case 36:
		return " (local environmental issue)"
	case 37:
		return " (Bazel crashed: unhandled exception)"
	}
	return ""
}

// shutdown stops the workspace's Bazel server; it runs when the test ends.
func (w *bazelWorkspace) shutdown() {
	if _, err := os.Stat(w.outputUserRoot); err != nil {
		return // Bazel never ran
	}
	res := w.runWithTimeout(bazelShutdownTimeout, "shutdown")
	if res.ExitCode != 0 {
		w.t.Logf("bazel shutdown exited %d:\n%s", res.ExitCode, res.Output)
	}
}

// readOutput returns the content of a file under bazel-bin.
func (w *bazelWorkspace) readOutput(rel string) string {
	w.t.Helper()
	b, err := os.ReadFile(filepath.Join(w.Dir, "bazel-bin", rel))
	if err != nil {
		w.t.Fatalf("reading output: %v", err)
	}
	return string(b)
}

// checkOutputs checks the outputs of //... in bazel-bin, so that bytes that came back
// from the remote cache or executor are the right ones (and executables still run).
func (w *bazelWorkspace) checkOutputs() {
	w.t.Helper()
	want := map[string]string{
		"greeting.txt":          "hello from gantry e2e\n",
		"shout.txt":             "HELLO FROM GANTRY E2E\n",
		"pair_first.txt":        "HELLO FROM GANTRY E2E\n",
		"pair_second.txt":       "22\n",
		"tree/a.txt":            "alpha\n",
		"tree/sub/b.txt":        "beta\n",
		"tree/sub/deeper/c.txt": "gamma\n",
		"tree_listing.txt":      "./a.txt\n./sub/b.txt\n./sub/deeper/c.txt\nalpha\nbeta\ngamma\n",
		"greeter_output.txt":    "hello, gantry (from C)\n",
	}
	keys := make([]string, 0, len(want))
	for k := range want {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if got := w.readOutput(k); got != want[k] {
			w.t.Errorf("bazel-bin/%s = %q, want %q", k, got, want[k])
		}
	}
	out, err := exec.Command(filepath.Join(w.Dir, "bazel-bin", "greeter"), "cache").CombinedOutput()
	if err != nil || string(out) != "hello, cache (from C)\n" {
		w.t.Errorf("running bazel-bin/greeter: %v, output %q", err, out)
	}
}

// processSummary is Bazel's "INFO: N processes: ..." line, which tells how the
// actions of a build ran. Bazel 2.1.0 says, for example,
//
//	INFO: 14 processes: 14 linux-sandbox.
//	INFO: 3 processes: 3 remote cache hit.
//
// and Bazel 4.2.3 also counts internal actions (and its N may disagree with the sum):
//
//	INFO: 29 processes: 15 internal, 14 linux-sandbox.
//	INFO: 7 processes: 5 remote cache hit, 2 internal.
//	INFO: 1 process: 1 internal.
type processSummary struct {
	Line  string
	Total int
	// Counts maps each kind ("remote cache hit", "remote", "internal",
	// "linux-sandbox", "local", ...) to its count.
	Counts map[string]int
}

var (
	processSummaryRE = regexp.MustCompile(`(?m)^INFO: (\d+) process(?:es)?(?:: (.*?))?\.?[ \t\r]*$`)
	processCountRE   = regexp.MustCompile(`^(\d+) (.+)$`)
)

// Kinds of processes in a summary.
const (
	kindRemoteCacheHit = "remote cache hit"
	kindRemote         = "remote"
	kindInternal       = "internal"
)

// lastProcessSummary parses the last "INFO: N processes" line of Bazel's output.
func lastProcessSummary(output string) (processSummary, bool) {
	matches := processSummaryRE.FindAllStringSubmatch(output, -1)
	if len(matches) == 0 {
		return processSummary{}, false
	}
	m := matches[len(matches)-1]
	s := processSummary{Line: strings.TrimSpace(m[0]), Counts: map[string]int{}}
	s.Total, _ = strconv.Atoi(m[1])
	if m[2] == "" {
		return s, true
	}
	for _, part := range strings.Split(m[2], ", ") {
		pm := processCountRE.FindStringSubmatch(strings.TrimSpace(part))
		if pm == nil {
			return processSummary{}, false
		}
		n, _ := strconv.Atoi(pm[1])
		s.Counts[pm[2]] += n
	}
	return s, true
}

// Count returns how many processes of the given kind ran.
func (s processSummary) Count(kind string) int { return s.Counts[kind] }

// Except returns the counts of every kind not listed, with zero counts left out.
func (s processSummary) Except(kinds ...string) map[string]int {
	other := map[string]int{}
	for k, n := range s.Counts {
		if n != 0 && !contains(kinds, k) {
			other[k] = n
		}
	}
	return other
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// summaryOf returns the last process summary of res, failing the test if there is none.
func summaryOf(t *testing.T, res *bazelResult) processSummary {
	t.Helper()
	s, ok := lastProcessSummary(res.Output)
	if !ok {
		t.Fatalf("no parsable \"INFO: N processes\" line in Bazel's output:\n%s", res.Output)
	}
	return s
}

// copyTree copies the regular files, directories and symlinks under src to dst,
// keeping executable bits.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			if strings.HasPrefix(d.Name(), "bazel-") {
				return fs.SkipDir // convenience symlinks followed by accident
			}
			return os.MkdirAll(target, 0o755)
		case info.Mode()&fs.ModeSymlink != 0:
			if strings.HasPrefix(d.Name(), "bazel-") {
				return nil // convenience symlinks of a local run in the repository
			}
			link, err := os.Readlink(path)
			if err != nil {
				return err
			}
			return os.Symlink(link, target)
		case info.Mode().IsRegular():
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			return os.WriteFile(target, b, info.Mode().Perm()|0o200)
		default:
			return nil
		}
	})
}
