// Package deploytest holds what the deployment tests share: finding the
// artifacts scripts/package.sh built, finding tools, and free ports.
package deploytest

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
)

// CI reports whether the tests run in CI, where a missing tool or artifact
// is a failure instead of a reason to skip.
func CI() bool { return os.Getenv("CI") == "true" }

// Missing skips the test, or fails it under CI=true.
func Missing(t *testing.T, format string, args ...any) {
	t.Helper()
	if CI() {
		t.Fatalf(format, args...)
	}
	t.Skipf(format, args...)
}

// RepoRoot is the repository's top directory.
func RepoRoot(t *testing.T) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", "..", ".."))
}

// Dist returns the directory scripts/package.sh wrote (GANTRY_DIST, set by
// scripts/test-deploy.sh), holding name.
func Dist(t *testing.T, name string) string {
	t.Helper()
	dir := os.Getenv("GANTRY_DIST")
	if dir == "" {
		Missing(t, "GANTRY_DIST is not set: run scripts/test-deploy.sh, which builds the packages with scripts/package.sh and runs these tests")
	}
	p := filepath.Join(dir, name)
	if matches, _ := filepath.Glob(p); len(matches) == 1 {
		return matches[0]
	}
	t.Fatalf("%s: no single file matches in GANTRY_DIST=%s; run scripts/package.sh", name, dir)
	return ""
}

// Tool returns the path of an executable on PATH or in the repository's
// .tools/bin (where scripts/install-test-deps.sh puts what it builds).
func Tool(t *testing.T, name, installHint string) string {
	t.Helper()
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	p := filepath.Join(RepoRoot(t), ".tools", "bin", name)
	if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
		return p
	}
	Missing(t, "%s is not installed (%s; scripts/install-test-deps.sh does it)", name, installHint)
	return ""
}

// RequireRoot skips the test, or fails it under CI=true, unless it runs as
// root.
func RequireRoot(t *testing.T, why string) {
	t.Helper()
	if os.Geteuid() != 0 {
		Missing(t, "needs root: %s", why)
	}
}

// FreePort returns a loopback port that was free a moment ago.
func FreePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
