package loadgen

import (
	"testing"

	"google.golang.org/grpc"

	"github.com/gantry-build/gantry/internal/server/servertest"
)

// startServer runs an all-in-one Gantry with an in-process worker on a
// loopback port until the test ends and returns a connection to it.
func startServer(t testing.TB) *grpc.ClientConn {
	t.Helper()
	_, conn := servertest.Start(t)
	return conn
}
