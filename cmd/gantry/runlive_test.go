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
	stdout, stderr, code := followLive(t, cmd, false, "first\n", release)
	if code != 0 || stdout != "first\nsecond\n" || stderr != "warn\n" {
		t.Errorf("exit %d, stdout %q, stderr %q; want 0, each line once", code, stdout, stderr)
	}
}

// followLive starts cmd (this test binary acting as gantry) and waits
// until its stdout (its stderr with onStderr) holds want while the action
// still runs, which waits for release to exist; then it creates release,
// waits for cmd to exit, and returns what cmd printed and its exit code.
func followLive(t *testing.T, cmd *exec.Cmd, onStderr bool, want, release string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errOut testutil.SyncBuffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	watched := &out
	if onStderr {
		watched = &errOut
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	defer func() { cmd.Process.Kill(); <-exited }()

	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(watched.String(), want); time.Sleep(20 * time.Millisecond) {
		select {
		case <-exited:
			t.Fatalf("%s exited before the action could end; stdout %q, stderr %q", cmd.Args[1], out.String(), errOut.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s printed no %q while the action ran; stdout %q, stderr %q", cmd.Args[1], want, out.String(), errOut.String())
		}
	}
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not end after the action; stdout %q, stderr %q", cmd.Args[1], out.String(), errOut.String())
	}
	return out.String(), errOut.String(), cmd.ProcessState.ExitCode()
}
