package e2e

import (
	"strings"
	"testing"
)

// expectedFailureMarker is what //:expected_failure writes to stderr before failing.
const expectedFailureMarker = "GANTRY_EXPECTED_FAILURE"

// TestBazelRemoteExecution uses Gantry as remote executor: every action of
// `bazel test //...` must run remotely; a failing action must fail the build with its
// stderr shown; after `bazel clean` everything must come from the action cache.
func TestBazelRemoteExecution(t *testing.T) {
	forEachBazel(t, func(t *testing.T, c *bazelClient) {
		g := startGantry(t)
		w := newBazelWorkspace(t, c)
		flags := []string{
			"--remote_executor=" + g.GRPCURL(),
			"--spawn_strategy=remote",
			"--genrule_strategy=remote",
			"--remote_timeout=" + itoa(bazelRemoteTimeoutSecs),
			"--test_output=errors",
		}
		target := func(label string) []string { return append([]string{label}, flags...) }

		// 1. Everything runs remotely (nothing locally; the odd cache hit of an
		// identical action is fine).
		res := w.mustRun("test", target("//...")...)
		s := summaryOf(t, res)
		if s.Count(kindRemote) == 0 {
			t.Errorf("no process ran remotely: %s", s.Line)
		}
		if other := s.Except(kindRemote, kindRemoteCacheHit, kindInternal); len(other) != 0 {
			t.Errorf("processes ran other than remotely %v: %s", other, s.Line)
		}
		expectTestsPassed(t, res)
		w.checkOutputs()

		// 2. A failing action fails the build, and Bazel shows its stderr.
		res = w.run("build", target("//:expected_failure")...)
		if res.ExitCode != 1 {
			t.Errorf("building //:expected_failure: exit code %d%s, want 1 (build failed); output:\n%s",
				res.ExitCode, exitCodeHint(res.ExitCode), res.Output)
		}
		if !strings.Contains(res.Output, expectedFailureMarker) {
			t.Errorf("building //:expected_failure: %s (the action's stderr) missing from Bazel's output:\n%s",
				expectedFailureMarker, res.Output)
		}

		// 3. After a clean, everything comes from the action cache.
		w.mustRun("clean")
		res = w.mustRun("test", target("//...")...)
		expectAllCacheHits(t, "test after clean", summaryOf(t, res), -1)
		expectTestsPassed(t, res)
		w.checkOutputs()
	})
}
