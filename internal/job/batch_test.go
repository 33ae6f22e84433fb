package job

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gantry-build/gantry/internal/batch"
	"github.com/gantry-build/gantry/internal/cc"
	"github.com/gantry-build/gantry/internal/remote"
	"github.com/gantry-build/gantry/internal/testutil"
)

// runJobs runs jobs through Batch's steps on c, as gantry batch does.
func runJobs(t testing.TB, c *remote.Client, jobs []*batch.Job, local Local, log *testutil.SyncBuffer) batch.Summary {
	t.Helper()
	settings, err := cc.SettingsFromEnv(func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	settings.CacheDir = ""
	b := NewBatch(BatchConfig{
		Client:     c,
		Invocation: remote.NewInvocation("job-test"),
		Compile:    CompileOptions(settings, os.Environ(), true),
		Local:      local,
		CPUs:       NewProcsGovernor(func(bool) {}, time.Now),
		Log:        log,
		Verbose:    true,
	})
	s, err := batch.New(jobs, b.Steps(), batch.Limits{Uploads: 2, Executes: 2, Downloads: 2, Process: 2}, batch.Options{KeepGoing: true, Progress: batch.NewPlain(log)})
	if err != nil {
		t.Fatal(err)
	}
	return s.Run(testCtx(t))
}

// TestBatchCommandJobs runs job-list jobs through every step: one job's
// output is the next one's input, a failing job fails with its exit code
// and its stderr, and a second run is served from the ActionCache.
func TestBatchCommandJobs(t *testing.T) {
	c := newClient(t)
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{
		"template.in": "hello NAME\n",
		"jobs.yaml": `jobs:
  - name: gen
    command: [sh, -c, "sed s/NAME/gantry/ template.in > gen/hello.h"]
    inputs: [template.in]
    outputs: [gen/hello.h]
  - name: use
    command: [sh, -c, "cat gen/hello.h > out/result.txt"]
    inputs: [gen/hello.h]
    outputs: [out/result.txt]
    deps: [gen]
  - name: bad
    command: [sh, -c, "echo broken >&2; exit 3"]
`,
	})
	jobs, err := batch.ParseFile(filepath.Join(dir, "jobs.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var log testutil.SyncBuffer
	s := runJobs(t, c, jobs, NewLocalProcs(), &log)
	if s.Succeeded != 2 || s.Failed != 1 || s.CacheHits != 0 {
		t.Fatalf("summary %+v; want 2 succeeded and 1 failed, no cache hits\n%s", s, log.String())
	}
	if f := s.Failures[0]; f.Job != "bad" || !strings.Contains(f.Error, "exit code 3") {
		t.Errorf("failure %+v; want bad's exit code 3", f)
	}
	if !strings.Contains(log.String(), "broken") {
		t.Errorf("the failing job's stderr is not shown:\n%s", log.String())
	}
	if got, err := os.ReadFile(filepath.Join(dir, "out", "result.txt")); err != nil || string(got) != "hello gantry\n" {
		t.Fatalf("out/result.txt = %q, %v; want the generated header's content", got, err)
	}

	if err := os.RemoveAll(filepath.Join(dir, "out")); err != nil {
		t.Fatal(err)
	}
	jobs, _ = batch.ParseFile(filepath.Join(dir, "jobs.yaml"))
	s = runJobs(t, c, jobs, NewLocalProcs(), &log)
	if s.Succeeded != 2 || s.CacheHits != 2 {
		t.Errorf("second run %+v; want both good jobs from the cache", s)
	}
	if got, err := os.ReadFile(filepath.Join(dir, "out", "result.txt")); err != nil || string(got) != "hello gantry\n" {
		t.Errorf("out/result.txt after the cached run = %q, %v", got, err)
	}
}

// TestBatchCompileNotSent: a compile the launcher would not send goes to
// the Local step, which runs it here as a process, and the log says why.
func TestBatchCompileNotSent(t *testing.T) {
	c := newClient(t)
	dir := t.TempDir()
	jobs := []*batch.Job{{Name: "link", Kind: batch.Compile, Args: []string{"touch", "bin/prog"}, Dir: dir, Outputs: []string{"bin/prog"}}}
	var log testutil.SyncBuffer
	s := runJobs(t, c, jobs, NewLocalProcs(), &log)
	if s.Succeeded != 1 || s.Local != 1 {
		t.Fatalf("summary %+v; want the job run locally\n%s", s, log.String())
	}
	if !strings.Contains(log.String(), "link runs locally") {
		t.Errorf("log %q; want the reason the job runs locally", log.String())
	}
	if _, err := os.Stat(filepath.Join(dir, "bin", "prog")); err != nil {
		t.Errorf("the local command did not run in the job's directory, or its output's directory was not made: %v", err)
	}
}
