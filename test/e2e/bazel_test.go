package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gantry-build/gantry/internal/testutil/bazeltest"
)

const (
	// bazelCommandTimeout bounds every single Bazel invocation.
	bazelCommandTimeout = 5 * time.Minute
	// bazelShutdownTimeout bounds the `bazel shutdown` run when a test ends.
	bazelShutdownTimeout = time.Minute
	// bazelRemoteTimeoutSecs is --remote_timeout; Bazel 2.1.0 takes plain seconds only.
	bazelRemoteTimeoutSecs = 120
)

// bazelClient is one real Bazel release the tests drive.
type bazelClient = bazeltest.Client

// bazelClients returns the clients under test, wherever they are installed or not.
func bazelClients(t testing.TB) []*bazelClient {
	bazel2 := os.Getenv("GANTRY_BAZEL2")
	if bazel2 == "" {
		bazel2 = filepath.Join(repoRoot(t), ".tools", "npm", "node_modules", "@bazel", "bazel-linux_x64", "bazel-2.1.0-linux-x86_64")
	}
	return []*bazelClient{
		bazeltest.Bazel4(),
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
	msg := c.Missing()
	if msg == "" {
		return
	}
	if inCI() {
		t.Fatal(msg + "; CI=true, so a missing client is a failure")
	}
	t.Skip(msg)
}

// bazelWorkspace is a private copy of testdata/bazel for one test, with its own Bazel
// output root (and so its own Bazel server, shut down when the test ends), driven
// with the test's t.
type bazelWorkspace struct {
	bazeltest.Workspace
	t *testing.T
}

// newBazelWorkspace copies testdata/bazel (the workspace and the stand-ins for the
// external repositories it declares) to a temporary directory, so the convenience
// symlinks Bazel creates stay out of the repository.
func newBazelWorkspace(t *testing.T, c *bazelClient) *bazelWorkspace {
	t.Helper()
	ws, err := bazeltest.NewWorkspace(c, filepath.Join(repoRoot(t), "testdata", "bazel"), testDir(t, c.Name))
	if err != nil {
		t.Fatal(err)
	}
	w := &bazelWorkspace{Workspace: *ws, t: t}
	// Registered after testDir's cleanup, so the server stops before its directory goes.
	t.Cleanup(w.shutdown)
	return w
}

func itoa(n int) string { return strconv.Itoa(n) }

// bazelResult is what one Bazel invocation did.
type bazelResult = bazeltest.Result

// run runs `bazel <command> <args>` in the workspace, bounded by bazelCommandTimeout.
// Build and test commands also get the client's flags and the flags every test wants.
// A non-zero exit is not an error here; failing to run Bazel at all is fatal.
func (w *bazelWorkspace) run(command string, args ...string) *bazelResult {
	w.t.Helper()
	return w.runWithTimeout(bazelCommandTimeout, command, args...)
}

func (w *bazelWorkspace) runWithTimeout(timeout time.Duration, command string, args ...string) *bazelResult {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	res, err := w.Run(ctx, command, args...)
	switch {
	case ctx.Err() != nil:
		w.t.Fatalf("%s %s timed out after %v; output:\n%s", w.Client.Name, command, timeout, res.Output)
	case err != nil:
		w.t.Fatal(err)
	}
	summary := ""
	if s, ok := lastProcessSummary(res.Output); ok {
		summary = " | " + s.Line
	}
	w.t.Logf("%s: exit %d in %v%s", strings.Join(append([]string{w.Client.Name, command}, args...), " "),
		res.ExitCode, res.Duration.Round(10*time.Millisecond), summary)
	return res
}

// mustRun is run that fails the test, printing Bazel's output, unless Bazel exits 0.
func (w *bazelWorkspace) mustRun(command string, args ...string) *bazelResult {
	w.t.Helper()
	res := w.run(command, args...)
	if res.ExitCode != 0 {
		w.t.Fatalf("%s (Bazel %s) %s failed with exit code %d%s; output:\n%s",
			w.Client.Name, w.Client.Version, strings.Join(res.Args, " "), res.ExitCode,
			exitCodeHint(res.ExitCode), res.Output)
	}
	return res
}

// exitCodeHint explains the Bazel exit codes these tests meet.
func exitCodeHint(code int) string { return bazeltest.ExitCodeHint(code) }

// shutdown stops the workspace's Bazel server; it runs when the test ends.
func (w *bazelWorkspace) shutdown() {
	if err := w.Shutdown(bazelShutdownTimeout); err != nil {
		w.t.Logf("%s: %v", w.Client.Name, err)
	}
}

// readOutput returns the content of a file under bazel-bin.
func (w *bazelWorkspace) readOutput(rel string) string {
	w.t.Helper()
	s, err := w.ReadOutput(rel)
	if err != nil {
		w.t.Fatal(err)
	}
	return s
}

// checkOutputs checks the outputs of //... in bazel-bin, so that bytes that came back
// from the remote cache or executor are the right ones (and executables still run).
func (w *bazelWorkspace) checkOutputs() {
	w.t.Helper()
	if err := w.CheckOutputs(); err != nil {
		w.t.Error(err)
	}
}

// processSummary is Bazel's "INFO: N processes: ..." line (bazeltest.ProcessSummary).
type processSummary = bazeltest.ProcessSummary

// Kinds of processes in a summary.
const (
	kindRemoteCacheHit = bazeltest.KindRemoteCacheHit
	kindRemote         = bazeltest.KindRemote
	kindInternal       = bazeltest.KindInternal
)

// lastProcessSummary parses the last "INFO: N processes" line of Bazel's output.
func lastProcessSummary(output string) (processSummary, bool) {
	return bazeltest.LastProcessSummary(output)
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
