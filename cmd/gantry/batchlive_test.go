package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gantry-build/gantry/internal/testutil"
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
	var stdout, stderr testutil.SyncBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	defer func() { cmd.Process.Kill(); <-exited }()

	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(stderr.String(), "[slow] first\n"); time.Sleep(20 * time.Millisecond) {
		select {
		case <-exited:
			t.Fatalf("gantry batch exited before its job could end; stderr:\n%s", stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("gantry batch --live printed nothing of the running job; stderr:\n%s", stderr.String())
		}
	}
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		t.Fatalf("gantry batch did not end after its job; stderr:\n%s", stderr.String())
	}
	if code := cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("exit %d; stderr:\n%s", code, stderr.String())
	}
}
