package e2e

import (
	"encoding/json"
	"io"
	"os"
	"path/filepath"
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
	// Bazel's execution log names any action that missed. A rare miss of
	// two test spawns was seen once in CI (2026-11-26, Bazel 2.1.0).
	w.mustRun("clean")
	execLog := filepath.Join(t.TempDir(), "exec.json")
	res = w.mustRun("test", append([]string{"//...", "--test_output=errors", "--execution_log_json_file=" + execLog}, flags...)...)
	if !expectAllCacheHits(t, "test after clean", summaryOf(t, res), -1) {
		logCacheMisses(t, execLog)
	}
	expectTestsPassed(t, res)
	w.checkOutputs()
}

// expectAllCacheHits checks that a summary shows remote cache hits (exactly want of
// them, unless want < 0) and no process that actually ran, locally or remotely.
// It reports whether every check passed.
func expectAllCacheHits(t *testing.T, what string, s processSummary, want int) bool {
	t.Helper()
	failed := t.Failed()
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
	return t.Failed() == failed
}

// logCacheMisses logs the spawns of a Bazel execution log (JSON, one
// object after another) that did not come from the remote cache: what
// ran, where, and its outputs.
func logCacheMisses(t *testing.T, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Logf("no execution log: %v", err)
		return
	}
	defer f.Close()
	dec := json.NewDecoder(f)
	for {
		var spawn struct {
			Mnemonic        string   `json:"mnemonic"`
			ProgressMessage string   `json:"progressMessage"`
			Runner          string   `json:"runner"`
			ListedOutputs   []string `json:"listedOutputs"`
			Remotable       *bool    `json:"remotable"`
			Cacheable       *bool    `json:"cacheable"`
			ExitCode        int      `json:"exitCode"`
		}
		if err := dec.Decode(&spawn); err != nil {
			if err != io.EOF {
				t.Logf("reading the execution log: %v", err)
			}
			return
		}
		// (remoteCacheHit is not set by every Bazel; the runner is.)
		if spawn.Runner != "remote cache hit" {
			t.Logf("cache miss: %s (%s) ran on %q, exit %d, remotable %v, cacheable %v, outputs %v", spawn.Mnemonic, spawn.ProgressMessage, spawn.Runner, spawn.ExitCode, deref(spawn.Remotable), deref(spawn.Cacheable), spawn.ListedOutputs)
		}
	}
}

func deref(b *bool) any {
	if b == nil {
		return "unset"
	}
	return *b
}

// expectTestsPassed checks Bazel's test summary for both tests of //... passing.
func expectTestsPassed(t *testing.T, res *bazelResult) {
	t.Helper()
	if err := res.TestsPassed(); err != nil {
		t.Error(err)
	}
}
