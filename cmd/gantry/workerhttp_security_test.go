package main

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	workerpb "github.com/gantry-build/gantry/api/worker/v1"
	"github.com/gantry-build/gantry/internal/auth/authtest"
	"github.com/gantry-build/gantry/internal/client"
	"github.com/gantry-build/gantry/internal/config"
	"github.com/gantry-build/gantry/internal/server"
	"github.com/gantry-build/gantry/internal/worker"
)

// newIdleWorker returns a worker that is never run: its HTTP port is
// what is tested. The connection is never used (gRPC dials lazily).
func newIdleWorker(t *testing.T) *worker.Worker {
	t.Helper()
	conn, err := client.Dial("127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	w, err := worker.New(conn, workerpb.NewWorkersClient(conn), server.WorkerConfig(config.WorkerConfig{ID: "w1", Cores: 1, WorkDir: t.TempDir(), CacheMaxSize: 1 << 20}, log))
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// securedConfig is a config whose tls and auth sections secure an HTTP
// port: identity "scraper" holds status, "builder" only execute. It says
// nothing about auth.http_require_token: auth.enabled alone requires a
// token.
func securedConfig(t *testing.T) (cfg config.Config, ca *authtest.CA, scraperToken, builderToken string) {
	t.Helper()
	dir := t.TempDir()
	ca = authtest.NewCA(t, "worker-http")
	cert, key := ca.Server()
	scraperToken, builderToken = "scraper-token-0123456789abcdef", "builder-token-0123456789abcdef"
	tokens := filepath.Join(dir, "tokens")
	if err := os.WriteFile(tokens, []byte("scraper "+scraperToken+"\nbuilder "+builderToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg = config.Default()
	cfg.TLS = config.TLSConfig{CertFile: cert, KeyFile: key}
	cfg.Auth.Enabled = true
	cfg.Auth.TokensFile = tokens
	cfg.Auth.Policy = []config.PolicyRule{
		{Identities: []string{"scraper"}, Instances: []string{"*"}, Permissions: []string{"status"}},
		{Identities: []string{"builder"}, Instances: []string{"*"}, Permissions: []string{"execute"}},
	}
	return cfg, ca, scraperToken, builderToken
}

func TestStandaloneWorkerHTTPTLSAndToken(t *testing.T) {
	cfg, ca, scraper, builder := securedConfig(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	addr, stop, err := serveWorkerHTTP("127.0.0.1:0", cfg, newIdleWorker(t), log)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	pool := x509.NewCertPool()
	pem, err := os.ReadFile(ca.CertFile)
	if err != nil || !pool.AppendCertsFromPEM(pem) {
		t.Fatalf("CA certificate: %v", err)
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}, Timeout: 30 * time.Second}
	get := func(path, token string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", "https://"+addr+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		if resp.TLS == nil || len(resp.TLS.VerifiedChains) == 0 {
			t.Errorf("GET %s: not over a verified TLS connection", path)
		}
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("/metrics", ""); code != http.StatusUnauthorized {
		t.Errorf("/metrics without a token: %d %q, want 401", code, body)
	}
	if code, body := get("/metrics", "not-a-token"); code != http.StatusUnauthorized {
		t.Errorf("/metrics with an unknown token: %d %q, want 401", code, body)
	}
	if code, body := get("/metrics", builder); code != http.StatusForbidden || !strings.Contains(body, "status") {
		t.Errorf("/metrics as an identity without the status permission: %d %q, want 403 naming it", code, body)
	}
	if code, body := get("/metrics", scraper); code != http.StatusOK || !strings.Contains(body, "gantry_worker_input_cache_max_bytes") {
		t.Errorf("/metrics with the status permission: %d, %d bytes", code, len(body))
	}
	if code, body := get("/healthz", ""); code != http.StatusOK || strings.TrimSpace(body) != "ok" {
		t.Errorf("/healthz without a token: %d %q (probes need it open)", code, body)
	}
	// Plain text gets no metrics from a TLS port.
	if resp, err := (&http.Client{Timeout: 30 * time.Second}).Get("http://" + addr + "/metrics"); err == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if strings.Contains(string(b), "gantry_worker") {
			t.Errorf("plain-text request got metrics: %d", resp.StatusCode)
		}
	}
	// A client that does not trust the CA fails the handshake.
	if _, err := (&http.Client{Timeout: 30 * time.Second}).Get("https://" + addr + "/healthz"); err == nil {
		t.Error("TLS handshake succeeded without trusting the CA")
	}
}

// Without TLS the token requirement still holds on loopback, and is
// refused elsewhere (the token would cross the network in plain text).
func TestStandaloneWorkerHTTPTokenWithoutTLS(t *testing.T) {
	cfg, _, scraper, _ := securedConfig(t)
	cfg.TLS = config.TLSConfig{}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	w := newIdleWorker(t)
	for _, bad := range []string{"0.0.0.0:0", ":0", "[::]:0"} {
		if _, _, err := serveWorkerHTTP(bad, cfg, w, log); err == nil || !strings.Contains(err.Error(), "plain text") || !strings.Contains(err.Error(), "tls.cert_file") || !strings.Contains(err.Error(), "auth.http_require_token: false") {
			t.Errorf("token without TLS on %s: err %v, want a refusal naming tls.cert_file and the opt-out", bad, err)
		}
	}
	addr, stop, err := serveWorkerHTTP("127.0.0.1:0", cfg, w, log)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	for _, tc := range []struct {
		token string
		want  int
	}{{"", http.StatusUnauthorized}, {scraper, http.StatusOK}} {
		req, _ := http.NewRequest("GET", "http://"+addr+"/metrics", nil)
		if tc.token != "" {
			req.Header.Set("Authorization", "Bearer "+tc.token)
		}
		resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("/metrics with token %q: %d, want %d", tc.token, resp.StatusCode, tc.want)
		}
	}
}

// The worker command applies its --config's tls and auth sections to
// --http-listen: here the refusal shows they were read.
func TestWorkerCommandSecuresHTTPPortFromConfig(t *testing.T) {
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens")
	if err := os.WriteFile(tokens, []byte("scraper scraper-token-0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfgPath := filepath.Join(dir, "worker.yaml")
	yaml := "auth:\n  enabled: true\n  tokens_file: " + tokens + "\n  policy:\n    - identities: [scraper]\n      instances: [\"*\"]\n      permissions: [status]\n"
	if err := os.WriteFile(cfgPath, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	// Were the sections ignored, the worker would start and run until
	// stopped: wait a bounded time for the refusal.
	done := make(chan error, 1)
	go func() {
		_, err := run(t, "worker", "--config", cfgPath, "--scheduler", "127.0.0.1:1", "--work-dir", filepath.Join(dir, "work"), "--http-listen", "0.0.0.0:0")
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "auth.http_require_token") {
			t.Fatalf("worker with a token requirement on a plain-text public port: %v, want a refusal", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the worker started with a token requirement on a plain-text public port")
	}
}

// With auth on, auth.http_require_token: false opts the worker's port out
// explicitly: /metrics is open, and the worker says so in a warning.
func TestStandaloneWorkerHTTPOptOutWarns(t *testing.T) {
	cfg, _, _, _ := securedConfig(t)
	cfg.TLS = config.TLSConfig{}
	open := false
	cfg.Auth.HTTPRequireToken = &open
	var logs strings.Builder
	log := slog.New(slog.NewTextHandler(&logs, nil))
	addr, stop, err := serveWorkerHTTP("127.0.0.1:0", cfg, newIdleWorker(t), log)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("/metrics without a token, opted out: %d, want 200", resp.StatusCode)
	}
	if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "auth.http_require_token: false leaves the worker's HTTP port open") {
		t.Errorf("no warning about the opt-out in the log:\n%s", logs.String())
	}
}
