package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := newRootCommand()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(args)
	err := cmd.Execute()
	return out.String(), err
}

func TestVersion(t *testing.T) {
	out, err := run(t, "version")
	if err != nil || !strings.HasPrefix(out, "gantry ") || !strings.Contains(out, "go: go1.") {
		t.Fatalf("version: %q, %v", out, err)
	}
}

// TestVersionFlag: `gantry --version` prints exactly what `gantry version`
// prints.
func TestVersionFlag(t *testing.T) {
	want, err := run(t, "version")
	if err != nil {
		t.Fatal(err)
	}
	got, err := run(t, "--version")
	if err != nil || got != want {
		t.Fatalf("--version: %q, %v; want %q", got, err, want)
	}
}

func TestServeRejectsBadConfigWithKeyPath(t *testing.T) {
	p := filepath.Join(t.TempDir(), "gantry.yaml")
	if err := os.WriteFile(p, []byte("storage:\n  cas:\n    max_size: -5\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := run(t, "serve", "--config", p, "--data-dir", t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "storage.cas.max_size") {
		t.Fatalf("serve with a bad config: %v", err)
	}
}

func TestServeReportsBusyPort(t *testing.T) {
	_, err := run(t, "serve", "--listen", "256.0.0.1:1", "--http-listen", "", "--data-dir", t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "--listen") {
		t.Fatalf("serve on a bad address: %v", err)
	}
}
