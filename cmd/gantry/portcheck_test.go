package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gantry-build/gantry/internal/auth/authtest"
	"github.com/gantry-build/gantry/internal/config"
	"github.com/gantry-build/gantry/internal/server"
)

// TestClientAtHTTPPort: client commands pointed at Gantry's HTTP port
// say so and name the gRPC port (what the server really listens on),
// instead of an HTTP/2 framing error; pointed at some other HTTP server,
// they say the address does not speak gRPC.
func TestClientAtHTTPPort(t *testing.T) {
	srv := startServer(t, func(cfg *config.Config) { cfg.HTTPListen = "127.0.0.1:0" })
	httpAddr, grpcAddr := srv.HTTPAddr(), srv.GRPCAddr()

	want := fmt.Sprintf("%s is Gantry's HTTP port (status pages, metrics); the gRPC port is %s", httpAddr, grpcAddr)
	for _, args := range [][]string{
		{"run", "--server", httpAddr, "--", "true"},
		{"queues", "show", "--server", httpAddr},
		{"bench", "--server", httpAddr, "--actions", "1"},
		{"workers", "list", "--server", httpAddr},
	} {
		_, err := run(t, args...)
		// What main prints: the explanation alone.
		if wp := asWrongPort(err); wp == nil || !strings.HasPrefix(wp.Error(), want) {
			t.Errorf("gantry %s: %v; want it to start with %q", strings.Join(args, " "), err, want)
		}
	}

	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "hello") }))
	defer other.Close()
	addr := other.Listener.Addr().String()
	_, err := run(t, "queues", "show", "--server", addr)
	if wp := asWrongPort(err); wp == nil || !strings.HasPrefix(wp.Error(), addr+" does not speak gRPC") || !strings.Contains(wp.Error(), "GANTRY_SERVER") {
		t.Errorf("gantry queues show at a plain HTTP server: %v", err)
	}
}

// TestClientAtTLSHTTPPort: with TLS on both ports, a client with --tls-ca
// pointed at the HTTP port is told the gRPC port too (the HTTP port
// refuses HTTP/2 in the TLS handshake, and the probe speaks HTTPS).
func TestClientAtTLSHTTPPort(t *testing.T) {
	ca := authtest.NewCA(t, "cli")
	cert, key := ca.Server()
	cfg := config.Default()
	cfg.Listen, cfg.HTTPListen, cfg.DataDir, cfg.Worker.Enabled = "127.0.0.1:0", "127.0.0.1:0", t.TempDir(), false
	cfg.TLS = config.TLSConfig{CertFile: cert, KeyFile: key}
	srv, err := server.New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { srv.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	_, err = run(t, "queues", "show", "--server", srv.HTTPAddr(), "--tls-ca", ca.CertFile)
	want := fmt.Sprintf("%s is Gantry's HTTP port (status pages, metrics); the gRPC port is %s", srv.HTTPAddr(), srv.GRPCAddr())
	if wp := asWrongPort(err); wp == nil || !strings.HasPrefix(wp.Error(), want) {
		t.Errorf("gantry queues show --tls-ca at the HTTPS port: %v; want %q", err, want)
	}
}
