package job

import (
	"context"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/gantry-build/gantry/internal/client"
	"github.com/gantry-build/gantry/internal/config"
	"github.com/gantry-build/gantry/internal/remote"
	"github.com/gantry-build/gantry/internal/server"
)

// newClient runs an all-in-one Gantry with an in-process worker on a
// loopback port until the test ends and returns a remote.Client of it.
func newClient(t testing.TB) *remote.Client {
	t.Helper()
	cfg := config.Default()
	cfg.Listen = "127.0.0.1:0"
	cfg.HTTPListen = ""
	cfg.DataDir = t.TempDir()
	cfg.Worker.Cores = 2
	srv, err := server.New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { srv.Run(ctx); close(done) }()
	conn, err := client.Dial(srv.GRPCAddr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(); cancel(); <-done })
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
