// Package chaos holds Gantry's fault loop (issue 39): a whole cluster on
// loopback (HAProxy, two frontends on MinIO, two schedulers on PostgreSQL,
// three standalone workers) under a continuous load whose every answer the
// test can compute, while a seeded random schedule kills, pauses, stops and
// cuts its parts. See TestChaos.
//
//	go test ./test/chaos -run Chaos -chaos.duration 30m -timeout 40m
//	go test ./test/chaos -run Chaos -chaos.seed 1234   # replay a schedule
//
// scripts/chaos.sh runs it for operators. MinIO, PostgreSQL, HAProxy and
// bubblewrap must be installed (scripts/install-test-deps.sh): missing, the
// test skips on a developer machine and fails under CI=true.
//
// Environment: GANTRY_E2E_BINARY, a prebuilt gantry binary to test instead
// of building ./cmd/gantry; GANTRY_CHAOS_KEEP=1 keeps the directories of a
// failed run.
package chaos

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

var (
	flagDuration = flag.Duration("chaos.duration", 3*time.Minute, "how long faults are injected under load (per seed)")
	flagSeed     = flag.Int64("chaos.seed", 0, "seed of the fault schedule and the load (0: the fixed seed, then a random one)")
)

// fixedSeed is the seed of the first of the two runs that CI does.
const fixedSeed = 39

// tmpRoot holds the gantry binary and a directory per run.
var tmpRoot string

func TestMain(m *testing.M) {
	flag.Parse()
	dir, err := os.MkdirTemp("", "gantry-chaos-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		os.Exit(1)
	}
	// Sandboxed actions run as nobody and must reach their exec roots.
	os.Chmod(dir, 0o755)
	tmpRoot = dir
	code := m.Run()
	if code != 0 && os.Getenv("GANTRY_CHAOS_KEEP") == "1" {
		fmt.Fprintf(os.Stderr, "chaos: GANTRY_CHAOS_KEEP set: kept %s\n", dir)
		os.Exit(code)
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

var (
	buildOnce sync.Once
	binary    string
	buildErr  error
)

// gantryBin returns the gantry binary under test, built once (with -race
// when the test runs with it).
func gantryBin(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		if p := os.Getenv("GANTRY_E2E_BINARY"); p != "" {
			binary = p
			return
		}
		root, err := repoRoot()
		if err != nil {
			buildErr = err
			return
		}
		out := filepath.Join(tmpRoot, "gantry")
		args := []string{"build", "-o", out}
		if raceEnabled {
			args = append(args, "-race")
		}
		args = append(args, "./cmd/gantry")
		cmd := exec.Command("go", args...)
		cmd.Dir = root
		if b, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, b)
			return
		}
		binary = out
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binary
}

func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = parent
	}
}
