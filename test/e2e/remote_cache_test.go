package e2e

import (
	"strings"
	"testing"
)

// TestBazelRemoteCache uses Gantry as a remote cache only: Bazel runs every action
// locally and uploads its results; after `bazel clean` the same build must come
// entirely from the cache, with the same bytes.
func TestBazelRemoteCache(t *testing.T) {
	instances := []struct {
		name     string
		instance string
	}{
		{"default_instance", ""},
		{"multi_segment_instance", "some/multi/segment"},
	}
	forEachBazel(t, func(t *testing.T, c *bazelClient) {
		for _, inst := range instances {
			t.Run(inst.name, func(t *testing.T) {
				g := startGantry(t)
				w := newBazelWorkspace(t, c)
				flags := []string{
					"--remote_cache=" + g.GRPCURL(),
					"--remote_timeout=" + itoa(bazelRemoteTimeoutSecs),
				}
				if inst.instance != "" {
					flags = append(flags, "--remote_instance_name="+inst.instance)
				}
				checkCacheRoundTrip(t, w, flags)
			})
		}
	})
}

// checkCacheRoundTrip builds and tests //... twice around a `bazel clean` with the
// given remote flags, and checks that the second round was all remote cache hits.
func checkCacheRoundTrip(t *testing.T, w *bazelWorkspace, flags []string) {
	t.Helper()
	// 1. Cold build against an empty server: everything runs locally and is uploaded.
	cold := summaryOf(t, w.mustRun("build", append([]string{"//..."}, flags...)...))
	if n := cold.Count(kindRemoteCacheHit); n != 0 {
		t.Errorf("cold build against an empty server had %d remote cache hits: %s", n, cold.Line)
	}
	ran := 0
	for _, n := range cold.Except(kindInternal) {
		ran += n
	}
	if ran == 0 {
		t.Fatalf("cold build ran no action: %s", cold.Line)
	}

	// 2. Clean, then build again: all from the cache.
	w.mustRun("clean")
	warm := summaryOf(t, w.mustRun("build", append([]string{"//..."}, flags...)...))
	expectAllCacheHits(t, "build after clean", warm, ran)
	w.checkOutputs()

	// 3. Tests run locally (the build is up to date) and upload their results...
	res := w.mustRun("test", append([]string{"//...", "--test_output=errors"}, flags...)...)
	expectTestsPassed(t, res)

	// 4. ...so after another clean, building and testing is all cache hits too.
	w.mustRun("clean")
	res = w.mustRun("test", append([]string{"//...", "--test_output=errors"}, flags...)...)
	expectAllCacheHits(t, "test after clean", summaryOf(t, res), -1)
	expectTestsPassed(t, res)
	w.checkOutputs()
}

// expectAllCacheHits checks that a summary shows remote cache hits (exactly want of
// them, unless want < 0) and no process that actually ran, locally or remotely.
func expectAllCacheHits(t *testing.T, what string, s processSummary, want int) {
	t.Helper()
	hits := s.Count(kindRemoteCacheHit)
	if hits == 0 {
		t.Errorf("%s: no remote cache hit: %s", what, s.Line)
	}
	if want >= 0 && hits != want {
		t.Errorf("%s: %d remote cache hits, want %d (the actions the cold build ran): %s", what, hits, want, s.Line)
	}
	if other := s.Except(kindRemoteCacheHit, kindInternal); len(other) != 0 {
		t.Errorf("%s: processes ran instead of coming from the cache %v: %s", what, other, s.Line)
	}
}

// expectTestsPassed checks Bazel's test summary for both tests of //... passing.
func expectTestsPassed(t *testing.T, res *bazelResult) {
	t.Helper()
	if !strings.Contains(res.Output, "2 tests pass") {
		t.Errorf("Bazel's output does not say \"2 tests pass\":\n%s", res.Output)
	}
}
