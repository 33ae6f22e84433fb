package e2e

import (
	"strings"
	"testing"
)

// TestBazelLocalWorkspace builds and tests the workspace with no remote at all. It
// needs no server, and tells a broken workspace or client apart from a Gantry bug.
func TestBazelLocalWorkspace(t *testing.T) {
	forEachBazel(t, func(t *testing.T, c *bazelClient) {
		w := newBazelWorkspace(t, c)
		s := summaryOf(t, w.mustRun("build", "//..."))
		if n := s.Count(kindRemoteCacheHit) + s.Count(kindRemote); n != 0 {
			t.Errorf("a build with no remote had %d remote processes: %s", n, s.Line)
		}
		w.checkOutputs()
		expectTestsPassed(t, w.mustRun("test", "//...", "--test_output=errors"))

		res := w.run("build", "//:expected_failure")
		if res.ExitCode != 1 || !strings.Contains(res.Output, expectedFailureMarker) {
			t.Errorf("building //:expected_failure: exit code %d, want 1 with %s in the output:\n%s",
				res.ExitCode, expectedFailureMarker, res.Output)
		}
	})
}
