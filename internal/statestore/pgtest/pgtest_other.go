//go:build !linux

package pgtest

import (
	"os"
	"testing"
)

// Options tunes the server.
type Options struct{ Durable bool }

// Start skips: the harness runs Debian's server binaries, on Linux only.
func Start(t testing.TB) string { return StartWith(t, Options{}) }

// StartWith skips: the harness runs Debian's server binaries, on Linux only.
func StartWith(t testing.TB, _ Options) string {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatal("pgtest: PostgreSQL tests run on Linux only; CI=true, so not skipping")
	}
	t.Skip("pgtest: PostgreSQL tests run on Linux only")
	return ""
}

// CreateDatabase is unreachable: Start skips.
func CreateDatabase(t testing.TB, dsn string) string {
	t.Helper()
	t.Skip("pgtest: Linux only")
	return ""
}

// Server is unreachable off Linux: StartServer skips.
type Server struct{ DSN string }

// StartServer skips: the harness runs Debian's server binaries, on Linux only.
func StartServer(t testing.TB) *Server { StartWith(t, Options{}); return &Server{} }

// Stop is unreachable: StartServer skips.
func (s *Server) Stop(kill bool) {}

// Restart is unreachable: StartServer skips.
func (s *Server) Restart() {}
