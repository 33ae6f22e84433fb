package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// gantry batch --live prints a long job's output, line by line after the
// job's name, while the job still runs (it waits for the test).
func TestBatchLivePrintsOutputAsItComes(t *testing.T) {
	addr := startExecServer(t)
	dir := t.TempDir()
	release := filepath.Join(t.TempDir(), "release")
	writeTree(t, dir, map[string]string{"jobs.yaml": `jobs:
  - name: slow
    command: [sh, -c, "echo first; i=0; while [ ! -e ` + release + ` ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done; echo second"]
`})
	cmd := exec.Command(os.Args[0], "batch", "--live", "--no-cache", "jobs.yaml")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GANTRY_TEST_RUN_AS_GANTRY=1", "GANTRY_SERVER="+addr, "GANTRY_CACHE_DIR="+filepath.Join(dir, ".cache"))
	_, stderr, code := followLive(t, cmd, true, "[slow] first\n", release)
	if code != 0 {
		t.Errorf("exit %d; stderr:\n%s", code, stderr)
	}
}
