package main

import (
	"bytes"
	"context"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gantry-build/gantry/internal/client"
	"github.com/gantry-build/gantry/internal/config"
)

// lockedBuffer is a bytes.Buffer written by a command running in another
// goroutine and read by the test.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestServePrintsBazelHint: once started, gantry serve says on stderr
// which --remote_executor Bazel needs and where the status page is, with
// the addresses it really listens on (ports picked by the kernel here):
// the gRPC one answers GetCapabilities, the HTTP one serves /status.
func TestServePrintsBazelHint(t *testing.T) {
	var stderr lockedBuffer
	cmd := newRootCommand()
	cmd.SetOut(&stderr)
	cmd.SetErr(&stderr)
	cmd.SetArgs([]string{"serve", "--listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0", "--data-dir", t.TempDir()})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx) }()
	defer func() { cancel(); <-done }()

	hint := regexp.MustCompile(`(?m)^gantry serve: point Bazel at it with: bazel build --remote_executor=grpc://(127\.0\.0\.1:\d+) //\.\.\.\n` +
		`gantry serve: status pages at (http://127\.0\.0\.1:\d+/status)\n`)
	var m []string
	for deadline := time.Now().Add(30 * time.Second); m == nil; {
		select {
		case err := <-done:
			t.Fatalf("serve ended: %v\n%s", err, stderr.String())
		case <-time.After(10 * time.Millisecond):
		}
		if m = hint.FindStringSubmatch(stderr.String()); m == nil && time.Now().After(deadline) {
			t.Fatalf("no Bazel hint on stderr:\n%s", stderr.String())
		}
	}
	conn, err := client.Dial(m[1])
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	cctx, ccancel := context.WithTimeout(ctx, 30*time.Second)
	defer ccancel()
	if _, err := client.GetCapabilities(cctx, conn, ""); err != nil {
		t.Fatalf("the hint's --remote_executor %s: %v", m[1], err)
	}
	resp, err := http.Get(m[2])
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("the hint's status page %s: %s", m[2], resp.Status)
	}
}

// TestServeHintByRole: TLS and auth show in the Bazel line; a scheduler
// node (which Bazel does not talk to) prints only its status page, a
// frontend (which has none) only the Bazel line.
func TestServeHintByRole(t *testing.T) {
	cfg := config.Default()
	cfg.TLS.CertFile, cfg.TLS.KeyFile = "c.pem", "k.pem"
	cfg.Auth.Enabled = true
	got := serveHint(cfg, "127.0.0.1:8980", "127.0.0.1:9090")
	for _, want := range []string{"--remote_executor=grpcs://127.0.0.1:8980 ", `--remote_header="Authorization=Bearer $TOKEN"`, "https://127.0.0.1:9090/status"} {
		if !strings.Contains(got, want) {
			t.Errorf("TLS and auth: %q lacks %q", got, want)
		}
	}
	cfg = config.Default()
	cfg.Role = config.RoleScheduler
	if got := serveHint(cfg, "127.0.0.1:8980", "127.0.0.1:9090"); strings.Contains(got, "bazel") || !strings.Contains(got, "/status") {
		t.Errorf("scheduler: %q", got)
	}
	cfg.Role = config.RoleFrontend
	if got := serveHint(cfg, "127.0.0.1:8980", "127.0.0.1:9090"); !strings.Contains(got, "bazel") || strings.Contains(got, "/status") {
		t.Errorf("frontend: %q", got)
	}
	if got := reachableAddr("0.0.0.0:8980"); strings.HasPrefix(got, "0.0.0.0") || !strings.HasSuffix(got, ":8980") {
		t.Errorf("wildcard address shown as %q", got)
	}
}
