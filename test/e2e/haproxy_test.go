package e2e

import (
	"testing"

	"github.com/gantry-build/gantry/internal/testutil/cluster"
)

// haproxyProc is one HAProxy balancing TCP connections over a set of loopback
// backends (see cluster.HAProxy, shared with test/chaos).
type haproxyProc = cluster.HAProxy

// haproxyBinary returns HAProxy's path; it skips the test when it is missing,
// and fails it under CI=true.
func haproxyBinary(t *testing.T) string { return cluster.HAProxyBinary(t) }

// startHAProxy starts HAProxy on a free loopback port in front of backends and
// waits until its health checks see every backend up. It is stopped when the
// test ends.
func startHAProxy(t *testing.T, backends ...string) *haproxyProc {
	t.Helper()
	return cluster.StartHAProxy(t, testDir(t, "haproxy"), backends...)
}
