package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestBazelRemoteExecutionInSandbox builds and tests the workspace with
// every action in the bubblewrap sandbox (worker.sandbox.mode: all, no
// network, the rlimit or cgroup limits at their defaults): a normal build
// must not notice. Bazel 4.2.3 only; bwrap missing fails under CI=true.
func TestBazelRemoteExecutionInSandbox(t *testing.T) {
	var c *bazelClient
	for _, bc := range bazelClients(t) {
		if bc.Name == "bazel4" {
			c = bc
		}
	}
	requireBazel(t, c)
	for _, tool := range []string{"bwrap", "prlimit", "setpriv"} {
		if _, err := exec.LookPath(tool); err != nil {
			if inCI() {
				t.Fatalf("%s not found (%v); CI=true, so a missing sandbox tool is a failure (install bubblewrap, util-linux)", tool, err)
			}
			t.Skipf("%s not found: %v", tool, err)
		}
	}
	// The action user must be able to reach the exec roots: make the
	// work directory's ancestors traversable.
	dir := testDir(t, "sandbox")
	for _, d := range []string{tmpRoot, dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cfg := filepath.Join(dir, "gantry.yaml")
	yaml := "worker:\n  work_dir: " + filepath.Join(dir, "work") + "\n  sandbox:\n    mode: all\n"
	if err := os.WriteFile(cfg, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	g := startGantry(t, "--config", cfg)
	w := newBazelWorkspace(t, c)
	flags := []string{
		"--remote_executor=" + g.GRPCURL(),
		"--spawn_strategy=remote",
		"--genrule_strategy=remote",
		"--remote_timeout=" + itoa(bazelRemoteTimeoutSecs),
		"--test_output=errors",
	}
	res := w.mustRun("test", append([]string{"//..."}, flags...)...)
	s := summaryOf(t, res)
	if s.Count(kindRemote) == 0 {
		t.Errorf("no process ran remotely: %s", s.Line)
	}
	expectTestsPassed(t, res)
	w.checkOutputs()
	// The embedded worker has run actions by now, so it has logged how
	// they are isolated.
	if log := readTail(g.LogPath, 64<<10); !strings.Contains(log, "sandbox active for every action") {
		t.Errorf("the server log does not say the sandbox is active:\n%s", log)
	}
}
