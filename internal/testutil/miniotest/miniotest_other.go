//go:build !linux

package miniotest

import (
	"os"
	"testing"

	"github.com/minio/minio-go/v7"
)

// Server is one MinIO server; on this platform none can be started.
type Server struct {
	Endpoint, AccessKey, SecretKey, Dir string
}

// Start skips: the harness supervises the server with Linux process
// controls only.
func Start(t testing.TB) *Server {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatal("miniotest: MinIO tests run on Linux only; CI=true, so not skipping")
	}
	t.Skip("miniotest: MinIO tests run on Linux only")
	return nil
}

// Env is unreachable: Start skips.
func (s *Server) Env() []string { return nil }

// Setenv is unreachable: Start skips.
func (s *Server) Setenv(t testing.TB) {}

// Client is unreachable: Start skips.
func (s *Server) Client() *minio.Client { return nil }

// Bucket is unreachable: Start skips.
func (s *Server) Bucket(t testing.TB) string { t.Helper(); t.Skip("miniotest: Linux only"); return "" }

// Stop is unreachable: Start skips.
func (s *Server) Stop() {}

// Kill is unreachable: Start skips.
func (s *Server) Kill() {}

// Restart is unreachable: Start skips.
func (s *Server) Restart() {}
