package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gantry-build/gantry/internal/config"
	"github.com/gantry-build/gantry/internal/server"
	"github.com/gantry-build/gantry/internal/testutil"
)

// startExecServer runs an all-in-one Gantry with an in-process worker
// until the test ends and returns its address.
func startExecServer(t *testing.T) string {
	t.Helper()
	return startExecServerWith(t, nil).GRPCAddr()
}

// startExecServerWith is startExecServer with the config changed by mod
// (nil: none), returning the server.
func startExecServerWith(t *testing.T, mod func(*config.Config)) *server.Server {
	t.Helper()
	cfg := config.Default()
	cfg.Listen = "127.0.0.1:0"
	cfg.HTTPListen = ""
	cfg.DataDir = t.TempDir()
	cfg.Worker.Cores = 2
	if mod != nil {
		mod(&cfg)
	}
	srv, err := server.New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { srv.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return srv
}

// gantryRun runs `gantry run args...` in-process in dir and returns its
// exit code (as main would exit), stdout and stderr.
func gantryRun(t *testing.T, dir string, args ...string) (int, string, string) {
	t.Helper()
	return gantryIn(t, dir, append([]string{"run"}, args...)...)
}

// gantryIn runs `gantry args...` in-process in dir and returns its exit
// code (as main would exit), stdout and stderr.
func gantryIn(t *testing.T, dir string, args ...string) (int, string, string) {
	t.Helper()
	t.Chdir(dir)
	cmd := newRootCommand()
	var stdout, stderr bytes.Buffer
	cmd.SetOut(&stdout)
	cmd.SetErr(&stderr)
	cmd.SetArgs(args)
	err := cmd.Execute()
	code := 0
	if err != nil {
		code = 1
		var st *exitStatus
		if errors.As(err, &st) {
			code = st.code
		}
		if st == nil || st.err != nil {
			stderr.WriteString("gantry: " + err.Error() + "\n")
		}
	}
	return code, stdout.String(), stderr.String()
}

// writeTree creates files (path relative to dir → content) under dir.
func writeTree(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for p, content := range files {
		full := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestRunCommand: gantry run sends inputs from nested directories and
// from `..`, runs in the current directory, brings back output files and
// directories, replays stdout and stderr and exits with the action's
// code; the second time it is a cache hit (-v) that uploads nothing.
func TestRunCommand(t *testing.T) {
	addr := startExecServer(t)
	proj := t.TempDir()
	writeTree(t, proj, map[string]string{
		"include/lib.h":     "lib\n",
		"src/main.c":        "main\n",
		"src/sub/deep/x.c":  "x\n",
		"unrelated/big.txt": "not sent\n",
	})
	src := filepath.Join(proj, "src")
	args := []string{"--server", addr, "-v",
		"--input", "main.c", "--input", "sub", "--input", "../include/lib.h",
		"--output", "out/all.txt", "--output-dir", "gen", "--env", "PATH=/usr/bin:/bin",
		"--", "sh", "-c", `cat main.c sub/deep/x.c ../include/lib.h > out/all.txt
test -e ../unrelated || echo unrelated-not-sent >> out/all.txt
mkdir -p gen/d && echo g > gen/d/g.txt
echo out; echo err >&2`}
	code, stdout, stderr := gantryRun(t, src, args...)
	if code != 0 || stdout != "out\n" || !strings.HasPrefix(stderr, "err\n") {
		t.Fatalf("code %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if !strings.Contains(stderr, "gantry run: executed; action ") || !strings.Contains(stderr, "; operation ") {
		t.Errorf("-v does not describe an executed action: %q", stderr)
	}
	for p, want := range map[string]string{"src/out/all.txt": "main\nx\nlib\nunrelated-not-sent\n", "src/gen/d/g.txt": "g\n"} {
		if got, err := os.ReadFile(filepath.Join(proj, p)); err != nil || string(got) != want {
			t.Errorf("%s = %q (%v), want %q", p, got, err, want)
		}
	}

	code, stdout, stderr = gantryRun(t, src, args...)
	if code != 0 || stdout != "out\n" || !strings.HasPrefix(stderr, "err\n") {
		t.Fatalf("second run: code %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if !strings.Contains(stderr, "gantry run: cache hit (ActionCache)") || !strings.Contains(stderr, "up 0 bytes (0 of ") {
		t.Errorf("second run is not a cache hit without uploads: %q", stderr)
	}

	// --no-cache runs it again: an executed action, the same inputs
	// (already in the CAS) not uploaded again.
	code, _, stderr = gantryRun(t, src, append([]string{"--no-cache"}, args...)...)
	if code != 0 || !strings.Contains(stderr, "gantry run: executed") {
		t.Errorf("--no-cache: code %d, stderr %q", code, stderr)
	}
	if strings.Contains(stderr, "lib.h") {
		t.Errorf("--no-cache: stderr mentions an input: %q", stderr)
	}

	// A failing command: its exit code and stderr, no gantry message.
	code, _, stderr = gantryRun(t, src, "--server", addr, "--", "sh", "-c", "echo broken >&2; exit 7")
	if code != 7 || stderr != "broken\n" {
		t.Errorf("failing command: code %d, stderr %q", code, stderr)
	}
}

// TestRunUploadsOnlyWhatTheCASLacks: a new action whose inputs the
// CAS already has (from the first run) uploads only its new Command,
// Action and root Directory.
func TestRunUploadsOnlyWhatTheCASLacks(t *testing.T) {
	addr := startExecServer(t)
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{"data.txt": strings.Repeat("0123456789", 10000)})
	code, _, stderr := gantryRun(t, dir, "--server", addr, "-v", "--input", "data.txt", "--", "wc", "-c", "data.txt")
	if code != 0 || upBytes(t, stderr) < 100000 {
		t.Fatalf("first run: code %d, stderr %q", code, stderr)
	}
	code, stdout, stderr := gantryRun(t, dir, "--server", addr, "-v", "--input", "data.txt", "--", "md5sum", "data.txt")
	if code != 0 || !strings.Contains(stdout, "data.txt") {
		t.Fatalf("second run: code %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	// Only the Command, the Action and nothing else: data.txt and the
	// root Directory are the same as before.
	if !strings.Contains(stderr, "(2 of 4 blobs)") {
		t.Errorf("the second action uploaded more than its Command and Action: %q", stderr)
	}
	up := upBytes(t, stderr)
	if up >= 10000 {
		t.Errorf("the second action uploaded %d bytes; data.txt was sent again", up)
	}
}

// upBytes extracts N from -v's "up N bytes".
func upBytes(t *testing.T, stderr string) int {
	t.Helper()
	_, after, ok := strings.Cut(stderr, "up ")
	if !ok {
		t.Fatalf("no upload figure in %q", stderr)
	}
	n, err := strconv.Atoi(strings.Fields(after)[0])
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestRunErrors: gantry's own failures exit 125 with one clear line.
func TestRunErrors(t *testing.T) {
	addr := startExecServer(t)
	dir := t.TempDir()
	code, _, stderr := gantryRun(t, dir, "--server", addr, "--input", "missing.h", "--", "true")
	if code != exitOwnFailure || !strings.Contains(stderr, filepath.Join(dir, "missing.h")+" does not exist") {
		t.Errorf("missing input: code %d, stderr %q", code, stderr)
	}
	code, _, stderr = gantryRun(t, dir, "--server", "127.0.0.1:1", "--", "true")
	if code != exitOwnFailure || !strings.Contains(stderr, "cannot reach Gantry at 127.0.0.1:1") || !strings.Contains(stderr, "gantry serve") || strings.Count(stderr, "\n") != 1 {
		t.Errorf("unreachable server: code %d, stderr %q", code, stderr)
	}
	// Without --server, GANTRY_SERVER says where the server is.
	t.Setenv("GANTRY_SERVER", "127.0.0.1:1")
	code, _, stderr = gantryRun(t, dir, "--", "true")
	if code != exitOwnFailure || !strings.Contains(stderr, "cannot reach Gantry at 127.0.0.1:1") {
		t.Errorf("GANTRY_SERVER: code %d, stderr %q", code, stderr)
	}
	t.Setenv("GANTRY_SERVER", addr)
	code, stdout, _ := gantryRun(t, dir, "--", "echo", "via-env")
	if code != 0 || stdout != "via-env\n" {
		t.Errorf("GANTRY_SERVER to a live server: code %d, stdout %q", code, stdout)
	}
}

// TestRunInterruptCancelsTheOperation: Ctrl-C (SIGINT) during a remote
// action cancels its operation on the server (the process is killed) and
// gantry run exits 130.
func TestRunInterruptCancelsTheOperation(t *testing.T) {
	addr := startExecServer(t)
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "pid")
	cmd := exec.Command(os.Args[0], "run", "--server", addr, "--no-cache", "--", "sh", "-c", "sleep 120 & echo $! > "+pidFile+"; wait")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GANTRY_TEST_RUN_AS_GANTRY=1")
	var out testutil.SyncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	defer func() { cmd.Process.Kill(); <-exited }()

	pid := 0
	for deadline := time.Now().Add(30 * time.Second); pid == 0; {
		if b, err := os.ReadFile(pidFile); err == nil && strings.HasSuffix(string(b), "\n") {
			pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		}
		if time.Now().After(deadline) {
			t.Fatalf("the action did not start; output:\n%s", out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		t.Fatalf("gantry run did not exit after SIGINT; output:\n%s", out.String())
	}
	if code := cmd.ProcessState.ExitCode(); code != exitInterrupted || !strings.Contains(out.String(), "cancelled") {
		t.Errorf("exit code %d, output %q; want 130 and the operation cancelled", code, out.String())
	}
	for deadline := time.Now().Add(30 * time.Second); syscall.Kill(pid, 0) == nil; {
		if time.Now().After(deadline) {
			t.Fatalf("the action's process %d still runs after the cancel", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
