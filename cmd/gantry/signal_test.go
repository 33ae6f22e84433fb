package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gantry-build/gantry/internal/testutil"
)

// TestMain lets a test run this test binary as the gantry command in a
// child process (for signals, which must not reach the test process).
func TestMain(m *testing.M) {
	if os.Getenv("GANTRY_TEST_RUN_AS_GANTRY") == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestWorkerSurvivesSIGHUP: operators send SIGHUP to every Gantry process
// after renewing certificates; gantry serve reloads on it, and a worker
// must not die of it (the default for SIGHUP), but say it does not reload.
// SIGTERM still stops it.
func TestWorkerSurvivesSIGHUP(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "worker", "--scheduler", "127.0.0.1:1", "--work-dir", filepath.Join(dir, "work"), "--cores", "1")
	cmd.Env = append(os.Environ(), "GANTRY_TEST_RUN_AS_GANTRY=1")
	var out testutil.SyncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }()
	defer func() {
		cmd.Process.Kill()
		<-exited
	}()
	waitOutput := func(what, want string) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for !strings.Contains(out.String(), want) {
			select {
			case <-exited:
				t.Fatalf("the worker exited (%v) before %s; output:\n%s", waitErr, what, out.String())
			case <-time.After(10 * time.Millisecond):
			}
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s; output:\n%s", what, out.String())
			}
		}
	}
	waitOutput("it started", "worker starting")
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitOutput("the SIGHUP line", "SIGHUP ignored: gantry worker does not reload")
	select {
	case <-exited:
		t.Fatalf("the worker exited after SIGHUP: %v\n%s", waitErr, out.String())
	case <-time.After(300 * time.Millisecond):
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
		// A stop on purpose is a clean exit, also while the worker is
		// still trying to register (no scheduler at 127.0.0.1:1).
		if waitErr != nil {
			t.Fatalf("exit after SIGTERM: %v, want status 0\n%s", waitErr, out.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("the worker did not stop on SIGTERM:\n%s", out.String())
	}
}
