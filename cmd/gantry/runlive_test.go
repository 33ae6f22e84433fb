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

// gantry run prints the first line of a long action while the action
// still runs (it waits for the test), and each line once in all.
func TestRunPrintsOutputAsItComes(t *testing.T) {
	addr := startExecServer(t)
	dir := t.TempDir()
	release := filepath.Join(t.TempDir(), "release")
	script := "echo first; echo warn >&2; i=0; while [ ! -e " + release + " ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done; echo second"
	cmd := exec.Command(os.Args[0], "run", "--server", addr, "--no-cache", "--", "sh", "-c", script)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GANTRY_TEST_RUN_AS_GANTRY=1")
	var stdout, stderr testutil.SyncBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	defer func() { cmd.Process.Kill(); <-exited }()

	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(stdout.String(), "first\n"); time.Sleep(20 * time.Millisecond) {
		select {
		case <-exited:
			t.Fatalf("gantry run exited before the action could end; stdout %q, stderr %q", stdout.String(), stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("gantry run printed nothing while the action ran; stdout %q, stderr %q", stdout.String(), stderr.String())
		}
	}
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		t.Fatalf("gantry run did not end after the action; stdout %q", stdout.String())
	}
	if code := cmd.ProcessState.ExitCode(); code != 0 || stdout.String() != "first\nsecond\n" || stderr.String() != "warn\n" {
		t.Errorf("exit %d, stdout %q, stderr %q; want 0, each line once", code, stdout.String(), stderr.String())
	}
}
