package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// gantryBatch runs `gantry batch args...` in-process in dir against
// server and returns its exit code, stdout and stderr.
func gantryBatch(t *testing.T, dir, server string, args ...string) (int, string, string) {
	t.Helper()
	t.Chdir(dir)
	t.Setenv("GANTRY_SERVER", server)
	t.Setenv("GANTRY_CACHE_DIR", filepath.Join(dir, ".cache"))
	return gantryIn(t, dir, append([]string{"batch"}, args...)...)
}

type testSummary struct {
	Total, Succeeded, Failed, Skipped int
	CacheHits                         int `json:"cache_hits"`
	Failures                          []struct{ Job, Queue, Error string }
}

func decodeSummary(t *testing.T, stdout, stderr string) testSummary {
	t.Helper()
	var s testSummary
	if err := json.Unmarshal([]byte(stdout), &s); err != nil {
		t.Fatalf("no JSON summary on stdout (%v):\n%s\nstderr:\n%s", err, stdout, stderr)
	}
	return s
}

const testJobList = `jobs:
  - name: gen
    command: [sh, -c, "sed s/NAME/gantry/ template.in > gen/hello.h"]
    inputs: [template.in]
    outputs: [gen/hello.h]
  - name: use
    command: "sh -c 'cat gen/hello.h main.txt > out/result.txt'"
    inputs: [gen/hello.h, main.txt]
    outputs: [out/result.txt]
    deps: [gen]
  - name: bad
    command: [sh, -c, "echo broken >&2; exit 3"]
  - name: after-bad
    command: [sh, -c, "echo never > never.txt"]
    outputs: [never.txt]
    deps: [bad]
`

// TestBatchJobList runs a job list with dependencies: outputs of one job
// are inputs of the next, a failing job fails alone (with --keep-going)
// and skips its dependant, and a second run is served from the cache.
func TestBatchJobList(t *testing.T) {
	server := startExecServer(t)
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{
		"jobs.yaml":   testJobList,
		"template.in": "hello NAME\n",
		"main.txt":    "main\n",
	})
	code, stdout, stderr := gantryBatch(t, dir, server, "--json", "--keep-going", "jobs.yaml")
	s := decodeSummary(t, stdout, stderr)
	if code != 1 || s.Total != 4 || s.Succeeded != 2 || s.Failed != 1 || s.Skipped != 1 {
		t.Fatalf("exit %d, summary %+v; want exit 1 with 2 succeeded, 1 failed, 1 skipped\n%s", code, s, stderr)
	}
	if len(s.Failures) != 1 || s.Failures[0].Job != "bad" || !strings.Contains(s.Failures[0].Error, "exit code 3") {
		t.Errorf("failures %+v; want bad with exit code 3", s.Failures)
	}
	if !strings.Contains(stderr, "broken") {
		t.Errorf("the failing job's stderr is not shown:\n%s", stderr)
	}
	got, err := os.ReadFile(filepath.Join(dir, "out", "result.txt"))
	if err != nil || string(got) != "hello gantry\nmain\n" {
		t.Fatalf("out/result.txt = %q, %v", got, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "never.txt")); err == nil {
		t.Errorf("the dependant of the failed job ran")
	}

	// Again: the two good jobs come from the cache.
	if err := os.RemoveAll(filepath.Join(dir, "out")); err != nil {
		t.Fatal(err)
	}
	_, stdout, stderr = gantryBatch(t, dir, server, "--json", "--keep-going", "jobs.yaml")
	s = decodeSummary(t, stdout, stderr)
	if s.Succeeded != 2 || s.CacheHits != 2 {
		t.Errorf("second run: %+v; want both good jobs cache hits", s)
	}
	if got, err := os.ReadFile(filepath.Join(dir, "out", "result.txt")); err != nil || string(got) != "hello gantry\nmain\n" {
		t.Errorf("out/result.txt after the cached run = %q, %v", got, err)
	}

	// Without --keep-going the failure lets no new job start; exactly
	// which others ran depends on timing, but never the dependant.
	code, stdout, stderr = gantryBatch(t, dir, server, "--json", "--no-cache", "jobs.yaml")
	s = decodeSummary(t, stdout, stderr)
	if code != 1 || s.Failed != 1 {
		t.Errorf("without --keep-going: exit %d, %+v", code, s)
	}
}

// TestBatchErrors: a bad job file names the line and column and what is
// wrong, an unreachable server is one clear line; both exit 125.
func TestBatchErrors(t *testing.T) {
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{
		"jobs.yaml": "jobs:\n  - name: a\n    comand: [true]\n",
		"good.yaml": "jobs:\n  - name: a\n    command: [true]\n",
	})
	code, _, stderr := gantryBatch(t, dir, "127.0.0.1:1", "jobs.yaml")
	if code != exitOwnFailure || !strings.Contains(stderr, "jobs.yaml:3:5") || !strings.Contains(stderr, "comand") {
		t.Errorf("bad field: exit %d, stderr %q; want 125 and jobs.yaml:3:5 naming the field", code, stderr)
	}
	code, _, stderr = gantryBatch(t, dir, "127.0.0.1:1", "good.yaml")
	if code != exitOwnFailure || !strings.Contains(stderr, "cannot reach Gantry at 127.0.0.1:1") {
		t.Errorf("unreachable server: exit %d, stderr %q; want 125 and the address", code, stderr)
	}
	code, _, stderr = gantryBatch(t, dir, "127.0.0.1:1", "missing.json")
	if code != exitOwnFailure || !strings.Contains(stderr, "missing.json") {
		t.Errorf("missing file: exit %d, stderr %q", code, stderr)
	}
}
