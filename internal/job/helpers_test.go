package job

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/gantry-build/gantry/internal/remote"
	"github.com/gantry-build/gantry/internal/server/servertest"
)

// newClient runs an all-in-one Gantry with an in-process worker on a
// loopback port until the test ends and returns a remote.Client of it.
func newClient(t testing.TB) *remote.Client {
	t.Helper()
	_, conn := servertest.Start(t)
	c, err := remote.New(testCtx(t), conn, "", remote.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// testCtx is a context that ends with the test (or after a minute).
func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// needGCC skips a test without gcc, or fails it under CI=true, where the
// compiles' tests must not pass by skipping.
func needGCC(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("gcc"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("gcc is not installed; CI=true, so not skipping")
		}
		t.Skip("gcc is not installed")
	}
}

// writeTree creates files (path -> content) under dir.
func writeTree(t testing.TB, dir string, files map[string]string) {
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
