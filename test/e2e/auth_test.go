package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestBazelWithAuth: gantry serve with static tokens and a policy; a
// standalone `gantry worker` connects with --token-file, and Bazel builds
// remotely sending its token with --remote_header. Without the token
// Bazel is refused with UNAUTHENTICATED.
//
// Plain text on loopback: Debian's Bazel 4.2.3 on JDK 17 cannot open TLS
// channels at all ("JDK provider does not support ALPN protocol"), so TLS
// and client certificates are tested with Gantry's own clients
// (internal/server/security_test.go, cmd/gantry/clientflags_test.go).
func TestBazelWithAuth(t *testing.T) {
	forEachBazel(t, func(t *testing.T, c *bazelClient) {
		if c.Name != "bazel4" {
			// Both versions send --remote_header the same way; one keeps CI short.
			t.Skip("the header path is the same in every Bazel; run with bazel4 only to keep CI short")
		}
		dir := testDir(t, "auth")
		write := func(name, content string) string {
			p := filepath.Join(dir, name)
			if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
			return p
		}
		token := fmt.Sprintf("bazel-token-%d", time.Now().UnixNano())
		workerToken := write("worker.token", fmt.Sprintf("worker-token-%d\n", time.Now().UnixNano()))
		wt, _ := os.ReadFile(workerToken)
		tokens := write("tokens", "bazel-user "+token+"\ne2e-worker "+strings.TrimSpace(string(wt))+"\n")
		cfg := write("gantry.yaml", fmt.Sprintf(`
worker: {enabled: false}
auth:
  enabled: true
  tokens_file: %q
  # waitWorkers scrapes /metrics without a token: this test is about
  # the gRPC port, so it opts the HTTP port out of auth.
  http_require_token: false
  policy:
    - identities: [bazel-user]
      instances: ["*"]
      permissions: [read, cas.write, execute]
    - identities: [e2e-worker]
      instances: ["*"]
      permissions: [worker, read, cas.write]
`, tokens))
		g := startGantry(t, "--config", cfg)
		startWorker(t, g, "--id", "e2e-auth-worker", "--token-file", workerToken)
		g.waitWorkers(t, 1, 30*time.Second)

		w := newBazelWorkspace(t, c)
		flags := []string{
			"--remote_executor=" + g.GRPCURL(),
			"--spawn_strategy=remote",
			"--genrule_strategy=remote",
			"--remote_timeout=" + itoa(bazelRemoteTimeoutSecs),
		}
		res := w.run("build", append([]string{"//..."}, flags...)...)
		if res.ExitCode == 0 || !strings.Contains(res.Output, "UNAUTHENTICATED") {
			t.Errorf("Bazel without a token: exit code %d, want a failure saying UNAUTHENTICATED; output:\n%s", res.ExitCode, res.Output)
		}
		flags = append(flags, "--remote_header=authorization=Bearer "+token)
		res = w.mustRun("build", append([]string{"//..."}, flags...)...)
		s := summaryOf(t, res)
		if s.Count(kindRemote) == 0 {
			t.Errorf("no process ran remotely: %s", s.Line)
		}
		if other := s.Except(kindRemote, kindRemoteCacheHit, kindInternal); len(other) != 0 {
			t.Errorf("processes ran other than remotely %v: %s", other, s.Line)
		}
		w.checkOutputs()
	})
}
