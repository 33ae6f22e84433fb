package remote

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/gantry-build/gantry/internal/server"
	"github.com/gantry-build/gantry/internal/server/servertest"
)

// startServer runs an all-in-one Gantry with an in-process worker on a
// loopback port until the test ends and returns a connection to it.
func startServer(t testing.TB) (*server.Server, *grpc.ClientConn) {
	t.Helper()
	return servertest.Start(t)
}

// newClient starts a server and returns a Client of it.
func newClient(t testing.TB) (*Client, *grpc.ClientConn) {
	t.Helper()
	_, conn := startServer(t)
	c, err := New(testCtx(t), conn, "", Options{})
	if err != nil {
		t.Fatal(err)
	}
	return c, conn
}

// testCtx is a context that ends with the test (or after a minute).
func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// writeFiles creates files (path relative to dir → content) under dir.
func writeFiles(t *testing.T, dir string, files map[string]string) {
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

// readFile returns the content of path, failing the test if it is absent.
func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// runSpec runs spec with c and returns exit code, stdout, stderr and info.
func runSpec(t *testing.T, c *Client, spec Spec) (int, string, string, RunInfo) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code, info, err := c.Run(testCtx(t), spec, &stdout, &stderr, nil)
	if err != nil {
		t.Fatal(err)
	}
	return code, stdout.String(), stderr.String(), info
}

// sh is the argv of a shell script.
func sh(script string) []string { return []string{"/bin/sh", "-c", script} }

// writeFilesB is writeFiles for benchmarks.
func writeFilesB(b *testing.B, dir, p, content string) {
	b.Helper()
	full := filepath.Join(dir, p)
	if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
		b.Fatal(err)
	}
}
