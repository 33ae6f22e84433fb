package main

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/gantry-build/gantry/internal/auth/authtest"
	"github.com/gantry-build/gantry/internal/config"
	"github.com/gantry-build/gantry/internal/server"
)

// TestClientSecurityFlags: the CLI reaches a server with TLS and tokens
// through --tls-ca/--token-file or their environment variables, and
// gets a clear error without them.
func TestClientSecurityFlags(t *testing.T) {
	dir := t.TempDir()
	ca := authtest.NewCA(t, "cli")
	cert, key := ca.Server()
	tok := filepath.Join(dir, "admin.token")
	os.WriteFile(tok, []byte("admin-token-0123456789abcdef\n"), 0o600)
	tokens := filepath.Join(dir, "tokens")
	os.WriteFile(tokens, []byte("ops admin-token-0123456789abcdef\n"), 0o600)
	cfg := config.Default()
	cfg.Listen, cfg.HTTPListen, cfg.Worker.Enabled, cfg.DataDir = "127.0.0.1:0", "", false, dir
	cfg.TLS = config.TLSConfig{CertFile: cert, KeyFile: key}
	cfg.Auth.Enabled = true
	cfg.Auth.TokensFile = tokens
	cfg.Auth.Policy = []config.PolicyRule{{Identities: []string{"ops"}, Instances: []string{"*"}, Permissions: []string{"admin"}}}
	srv, err := server.New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { srv.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	addr := srv.GRPCAddr()

	if out, err := run(t, "quota", "list", "--server", addr, "--tls-ca", ca.CertFile, "--token-file", tok); err != nil {
		t.Fatalf("with --tls-ca and --token-file: %v\n%s", err, out)
	}
	if _, err := run(t, "quota", "list", "--server", addr, "--tls-ca", ca.CertFile); err == nil || !strings.Contains(err.Error(), "Unauthenticated") {
		t.Fatalf("without a token: %v", err)
	}
	if _, err := run(t, "quota", "list", "--server", addr); err == nil {
		t.Fatal("plain text to a TLS server succeeded")
	}
	t.Setenv("GANTRY_TLS_CA", ca.CertFile)
	t.Setenv("GANTRY_TOKEN_FILE", tok)
	if out, err := run(t, "queues", "show", "--server", addr); err != nil {
		t.Fatalf("with GANTRY_TLS_CA and GANTRY_TOKEN_FILE: %v\n%s", err, out)
	}
	if _, err := run(t, "quota", "list", "--server", addr, "--token-file", filepath.Join(dir, "missing")); err == nil || !strings.Contains(err.Error(), "--token-file") {
		t.Fatalf("a missing token file: %v", err)
	}
}

// TestClientConfigDefaults: a config file's client section fills what the
// command line and environment leave empty, never overriding them.
func TestClientConfigDefaults(t *testing.T) {
	root := newRootCommand()
	fs := root.PersistentFlags()
	if err := fs.Parse([]string{"--tls-ca", "flag-ca.pem"}); err != nil {
		t.Fatal(err)
	}
	applyClientConfig(fs, config.ClientConfig{TLSCAFile: "file-ca.pem", TokenFile: "file.token", TLS: true})
	if clientSecurity.CAFile != "flag-ca.pem" || clientSecurity.TokenFile != "file.token" || !clientSecurity.TLS {
		t.Fatalf("merged: %+v", clientSecurity)
	}
}

// TestServerFlagsDefaultToGantryServer: every client command's server
// address (--server, and the worker's --scheduler) defaults to
// GANTRY_SERVER, and to 127.0.0.1:8980 without it.
func TestServerFlagsDefaultToGantryServer(t *testing.T) {
	for _, env := range []string{"", "build.example:9000"} {
		t.Setenv("GANTRY_SERVER", env)
		want := env
		if want == "" {
			want = "127.0.0.1:8980"
		}
		seen := 0
		var walk func(c *cobra.Command)
		walk = func(c *cobra.Command) {
			for _, fs := range []*pflag.FlagSet{c.Flags(), c.PersistentFlags()} {
				fs.VisitAll(func(f *pflag.Flag) {
					if f.Name == "server" || f.Name == "scheduler" {
						seen++
						if f.DefValue != want {
							t.Errorf("GANTRY_SERVER=%q: %s --%s defaults to %q, want %q", env, c.CommandPath(), f.Name, f.DefValue, want)
						}
					}
				})
			}
			for _, sub := range c.Commands() {
				walk(sub)
			}
		}
		walk(newRootCommand())
		// run, worker, bench, queues list/explain, quota, workers,
		// operation, reload.
		if seen < 9 {
			t.Errorf("found only %d server flags; the walk misses commands", seen)
		}
	}
}
