package e2e

import (
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"
)

const (
	// platformWorkersTimeout bounds the wait for both workers to register.
	platformWorkersTimeout = 30 * time.Second
	// platformUnsatisfiableWait is scheduler.unsatisfiable_wait for the routing test:
	// how long an action no worker can run stays queued before it fails.
	platformUnsatisfiableWait = "3s"
	// platformUnsatisfiableTimeout bounds the build that must fail that way.
	platformUnsatisfiableTimeout = 2 * time.Minute
)

// platformOutputs maps each output of //... in testdata/bazel/platforms to what it must
// hold: the pool of the worker that ran each action (written by that worker's "tag"
// process wrapper), one line per action in the chain.
var platformOutputs = map[string]string{
	// No exec_properties: --remote_default_exec_properties sends them to pool a.
	"default_1.txt": "a\n",
	"default_2.txt": "a\n",
	"a_1.txt":       "a\n",
	"a_2.txt":       "a\n",
	"a_3.txt":       "a\n",
	"b_1.txt":       "b\n",
	"b_2.txt":       "b\n",
	"b_3.txt":       "b\n",
	// Inputs made on the other worker.
	"b_after_a.txt": "a\nb\n",
	"a_after_b.txt": "b\na\n",
}

// TestBazelPlatformRouting runs two workers with different platforms, the server's
// embedded one offering pool=a and a standalone `gantry worker` offering pool=b, both
// refusing properties they do not declare. A Bazel build whose genrules carry
// exec_properties for either pool (and targets with none, which get
// --remote_default_exec_properties) must run every action remotely on the right worker;
// each worker runs its actions through its own "tag" process wrapper, which tells the
// action which worker it is on. A target asking for pool=c, which no worker offers, must
// fail after scheduler.unsatisfiable_wait with Gantry's explanation.
//
// Bazel 2.1.0 accepts the exec_properties attribute on genrule and sends it (in the
// Command's platform only; 4.2.3 also puts it in the Action's), so both clients build
// the same workspace with the same flags: no per-invocation workaround is needed.
func TestBazelPlatformRouting(t *testing.T) {
	forEachBazel(t, func(t *testing.T, c *bazelClient) {
		cfgDir := testDir(t, "config")
		serverCfg := writeFile(t, filepath.Join(cfgDir, "server.yaml"), `
scheduler:
  unsatisfiable_wait: `+platformUnsatisfiableWait+`
  startup_grace: 0s
worker:
  enabled: true
  id: worker-a
  properties:
    pool: a
  accept_unknown_properties: false
  process_wrappers:
    tag: [/usr/bin/env, GANTRY_TEST_WORKER=a]
`)
		workerCfg := writeFile(t, filepath.Join(cfgDir, "worker.yaml"), `
worker:
  properties:
    pool: b
  accept_unknown_properties: false
  process_wrappers:
    tag: [/usr/bin/env, GANTRY_TEST_WORKER=b]
`)
		g := startGantry(t, "--config", serverCfg)
		startWorker(t, g, "--config", workerCfg, "--id", "worker-b")
		g.waitWorkers(t, 2, platformWorkersTimeout)

		w := newPlatformsWorkspace(t, c)
		flags := []string{
			"--remote_executor=" + g.GRPCURL(),
			"--spawn_strategy=remote",
			"--genrule_strategy=remote",
			"--remote_timeout=" + itoa(bazelRemoteTimeoutSecs),
			// For targets without exec_properties; a target's exec_properties
			// replace these as a whole.
			"--remote_default_exec_properties=pool=a",
			"--remote_default_exec_properties=process-wrapper=tag",
		}

		// 1. Every action runs remotely, on the worker its platform names.
		res := w.mustRun("build", append([]string{"//..."}, flags...)...)
		s := summaryOf(t, res)
		if got := s.Count(kindRemote); got != len(platformOutputs) {
			t.Errorf("%d processes ran remotely, want %d (one per genrule): %s", got, len(platformOutputs), s.Line)
		}
		if other := s.Except(kindRemote, kindInternal); len(other) != 0 {
			t.Errorf("processes ran other than remotely %v: %s", other, s.Line)
		}
		names := make([]string, 0, len(platformOutputs))
		for k := range platformOutputs {
			names = append(names, k)
		}
		sort.Strings(names)
		for _, name := range names {
			if got := w.readOutput(name); got != platformOutputs[name] {
				t.Errorf("bazel-bin/%s = %q, want %q (the pools of the workers that ran the actions; \"unset\": no process wrapper ran)",
					name, got, platformOutputs[name])
			}
		}

		// 2. An action no worker can ever run fails with the scheduler's analysis. Gantry
		// fails the operation (ExecuteResponse.status FAILED_PRECONDITION); both Bazel
		// versions report a non-OK execution status as a remote execution failure, exit
		// code 34, quoting the status message. 4.2.3 spells the code "Failed
		// Precondition", 2.1.0 "FAILED_PRECONDITION".
		start := time.Now()
		res = w.runWithTimeout(platformUnsatisfiableTimeout, "build", append([]string{"//:pool_c"}, flags...)...)
		if res.ExitCode != 34 {
			t.Errorf("building //:pool_c: exit code %d%s, want 34 (remote execution failure); output:\n%s",
				res.ExitCode, exitCodeHint(res.ExitCode), res.Output)
		}
		if wait, _ := time.ParseDuration(platformUnsatisfiableWait); time.Since(start) < wait {
			t.Errorf("building //:pool_c failed after %v, before scheduler.unsatisfiable_wait (%v)", time.Since(start), wait)
		}
		for _, want := range []*regexp.Regexp{
			regexp.MustCompile(`(?i)failed[ _]precondition`),
			regexp.MustCompile(`no worker can run this action \(queue "default", platform \{pool=c\}\)`),
			// Either worker is as close as the other: each is kept out by its pool.
			regexp.MustCompile(`the closest worker, worker-[ab], is kept out by: value mismatch pool \(action: c, offered: [ab]\)`),
		} {
			if !want.MatchString(res.Output) {
				t.Errorf("building //:pool_c: nothing matches %q in Bazel's output:\n%s", want, res.Output)
			}
		}
		if _, err := os.Stat(filepath.Join(w.Dir, "bazel-bin", "pool_c.txt")); err == nil {
			t.Errorf("bazel-bin/pool_c.txt exists, but no worker should have run //:pool_c")
		}
	})
}

// newPlatformsWorkspace is newBazelWorkspace for testdata/bazel/platforms: the copy of
// testdata/bazel holds every workspace, and Bazel has not run yet, so pointing Dir at
// the sibling is all it takes (the output root and shutdown stay the same).
func newPlatformsWorkspace(t *testing.T, c *bazelClient) *bazelWorkspace {
	t.Helper()
	w := newBazelWorkspace(t, c)
	w.Dir = filepath.Join(filepath.Dir(w.Dir), "platforms")
	if _, err := os.Stat(filepath.Join(w.Dir, "WORKSPACE")); err != nil {
		t.Fatalf("platforms workspace: %v", err)
	}
	return w
}

// writeFile writes content to path and returns path.
func writeFile(t *testing.T, path, content string) string {
	t.Helper()
	if err := os.WriteFile(path, []byte(strings.TrimLeft(content, "\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}
