// Package servertest runs a real Gantry for other packages' tests: an
// all-in-one server with its in-process worker on a loopback port.
package servertest

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"google.golang.org/grpc"

	"github.com/gantry-build/gantry/internal/client"
	"github.com/gantry-build/gantry/internal/config"
	"github.com/gantry-build/gantry/internal/server"
)

// Start runs an all-in-one Gantry (a fresh data directory, no HTTP port,
// a worker of 2 cores) until the test ends and returns it with a
// connection to its gRPC port.
func Start(t testing.TB) (*server.Server, *grpc.ClientConn) {
	t.Helper()
	return StartWith(t, nil)
}

// StartWith is Start with the configuration changed by edit (nil: none)
// before the server starts.
func StartWith(t testing.TB, edit func(*config.Config)) (*server.Server, *grpc.ClientConn) {
	t.Helper()
	cfg := config.Default()
	cfg.Listen = "127.0.0.1:0"
	cfg.HTTPListen = ""
	cfg.DataDir = t.TempDir()
	cfg.Worker.Cores = 2
	if edit != nil {
		edit(&cfg)
	}
	srv, err := server.New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { srv.Run(ctx); close(done) }()
	conn, err := client.Dial(srv.GRPCAddr())
	if err != nil {
		cancel()
		<-done
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(); cancel(); <-done })
	return srv, conn
}
