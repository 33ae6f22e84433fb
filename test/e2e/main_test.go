// Package e2e holds Gantry's end-to-end tests with real REAPI clients: Bazel 4.2.3 and
// Bazel 2.1.0 build testdata/bazel/workspace against a `gantry serve` subprocess.
//
// The clients are installed by scripts/install-test-deps.sh. Where a client is missing
// the tests skip on a developer machine but fail when CI=true, since a green CI run that
// skipped the real clients proves nothing. `go test -short` skips them all.
//
// Environment:
//
//	GANTRY_BAZEL4      path of Bazel 4.2.3 (default /usr/bin/bazel)
//	GANTRY_BAZEL2      path of Bazel 2.1.0 (default <repo>/.tools/npm/.../bazel-2.1.0-linux-x86_64)
//	GANTRY_E2E_BINARY  a prebuilt gantry binary to test instead of building ./cmd/gantry
//	GANTRY_E2E_EXEC=1  also run TestBazelRemoteExecution
//	GANTRY_E2E_KEEP=1  keep the temporary directories of failed tests
package e2e

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// tmpRoot holds everything this test process creates: the gantry binary, and a
// directory per test for workspaces, Bazel output roots and server data.
var tmpRoot string

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "gantry-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	tmpRoot = dir
	code := m.Run()
	if keepTemp() && code != 0 {
		fmt.Fprintf(os.Stderr, "e2e: GANTRY_E2E_KEEP set: kept %s\n", dir)
		return code
	}
	if err := removeAll(dir); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: cleaning %s: %v\n", dir, err)
	}
	return code
}

func keepTemp() bool { return os.Getenv("GANTRY_E2E_KEEP") == "1" }

// inCI tells whether missing prerequisites must fail the tests instead of skipping them.
func inCI() bool { return os.Getenv("CI") == "true" }

var (
	repoRootOnce sync.Once
	repoRootDir  string
	repoRootErr  error
)

// repoRoot returns the directory holding go.mod, found by walking up from the
// package directory (the working directory of `go test`).
func repoRoot(t testing.TB) string {
	t.Helper()
	repoRootOnce.Do(func() {
		dir, err := os.Getwd()
		if err != nil {
			repoRootErr = err
			return
		}
		for {
			if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
				repoRootDir = dir
				return
			}
			parent := filepath.Dir(dir)
			if parent == dir {
				repoRootErr = errors.New("no go.mod above the working directory")
				return
			}
			dir = parent
		}
	})
	if repoRootErr != nil {
		t.Fatalf("finding the repository root: %v", repoRootErr)
	}
	return repoRootDir
}

var (
	gantryBuildOnce sync.Once
	gantryBinary    string
	gantryBuildErr  error
)

// gantryBin returns the gantry binary under test, building ./cmd/gantry once per test
// process on first use (so tests that need no server, such as the local workspace
// check, run even while the server does not build).
func gantryBin(t testing.TB) string {
	t.Helper()
	root := repoRoot(t)
	gantryBuildOnce.Do(func() {
		if p := os.Getenv("GANTRY_E2E_BINARY"); p != "" {
			gantryBinary = p
			return
		}
		out := filepath.Join(tmpRoot, "gantry")
		start := time.Now()
		args := []string{"build", "-o", out}
		if raceEnabled {
			args = append(args, "-race")
		}
		args = append(args, "./cmd/gantry")
		cmd := exec.Command("go", args...)
		cmd.Dir = root
		if b, err := cmd.CombinedOutput(); err != nil {
			gantryBuildErr = fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, b)
			return
		}
		fmt.Fprintf(os.Stderr, "e2e: go %s took %v\n", strings.Join(args, " "), time.Since(start).Round(time.Millisecond))
		gantryBinary = out
	})
	if gantryBuildErr != nil {
		t.Fatal(gantryBuildErr)
	}
	return gantryBinary
}

// testDir makes a fresh directory for one test under tmpRoot. It is removed when the
// test ends (Bazel leaves read-only trees, so it is made writable first), unless the
// test failed and GANTRY_E2E_KEEP=1.
func testDir(t *testing.T, prefix string) string {
	t.Helper()
	dir, err := os.MkdirTemp(tmpRoot, prefix+"-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() && keepTemp() {
			t.Logf("kept %s", dir)
			return
		}
		if err := removeAll(dir); err != nil {
			t.Logf("cleaning %s: %v", dir, err)
		}
	})
	return dir
}

// removeAll removes dir even when Bazel left read-only directories in it.
func removeAll(dir string) error {
	if err := os.RemoveAll(dir); err == nil {
		return nil
	}
	_ = filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = os.Chmod(path, 0o755)
		}
		return nil
	})
	return os.RemoveAll(dir)
}

var (
	launcherBuildOnce sync.Once
	launcherBinary    string
	launcherBuildErr  error
)

// launcherBin returns a gantry binary for commands a build starts once per
// compile (`gantry cc` under make): built without -race even when the tests
// run with it, since a race-instrumented process costs ~10x the CPU to start
// and a build starts hundreds. The launcher's own code is race-tested in
// process by cmd/gantry's tests; the server under test stays instrumented.
func launcherBin(t testing.TB) string {
	t.Helper()
	if !raceEnabled || os.Getenv("GANTRY_E2E_BINARY") != "" {
		return gantryBin(t)
	}
	root := repoRoot(t)
	launcherBuildOnce.Do(func() {
		out := filepath.Join(tmpRoot, "gantry-launcher")
		start := time.Now()
		cmd := exec.Command("go", "build", "-o", out, "./cmd/gantry")
		cmd.Dir = root
		if b, err := cmd.CombinedOutput(); err != nil {
			launcherBuildErr = fmt.Errorf("go build -o %s ./cmd/gantry: %v\n%s", out, err, b)
			return
		}
		fmt.Fprintf(os.Stderr, "e2e: go build of the launcher took %v\n", time.Since(start).Round(time.Millisecond))
		launcherBinary = out
	})
	if launcherBuildErr != nil {
		t.Fatal(launcherBuildErr)
	}
	return launcherBinary
}
