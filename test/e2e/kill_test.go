package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/longrunning/autogen/longrunningpb"

	adminpb "github.com/gantry-build/gantry/api/admin/v1"
	"github.com/gantry-build/gantry/internal/client"
)

// killWaitTimeout bounds each wait of TestBazelAfterKill.
const killWaitTimeout = 2 * time.Minute

// TestBazelAfterKill records what each Bazel client does when an operator
// kills its running action (docs/OPERATIONS.md, "Kill"). Bazel 4.2.3 and
// 2.1.0 alike: after a plain kill the client gets CANCELLED, submits the
// action again as a new operation, and the build succeeds once it runs;
// after a kill with refuse_seconds the resubmission is refused and the
// build fails with exit code 34 (remote error), showing the refusal.
func TestBazelAfterKill(t *testing.T) {
	forEachBazel(t, func(t *testing.T, c *bazelClient) {
		g := startGantry(t)
		w := newBazelWorkspace(t, c)
		w.Dir = filepath.Join(filepath.Dir(w.Dir), "kill")
		conn, err := client.Dial(g.GRPCAddr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		for _, sc := range []struct {
			name   string
			refuse int64
		}{{"plain kill", 0}, {"kill with refuse", 600}} {
			t.Run(strings.ReplaceAll(sc.name, " ", "_"), func(t *testing.T) {
				// A directory of its own also makes the action new (its
				// environment names the directory).
				dir := testDir(t, "kill")
				res := make(chan *bazelResult, 1)
				go func() {
					res <- w.runWithTimeout(2*killWaitTimeout, "build", "//:stuck",
						"--remote_executor="+g.GRPCURL(), "--spawn_strategy=remote", "--genrule_strategy=remote",
						"--remote_timeout="+itoa(bazelRemoteTimeoutSecs), "--action_env=GANTRY_KILL_DIR="+dir)
				}()
				starts := func() int {
					b, _ := os.ReadFile(filepath.Join(dir, "log"))
					return strings.Count(string(b), "start")
				}
				waitUntil(t, "the action to start", func() bool { return starts() >= 1 })
				ctx, cancel := context.WithTimeout(context.Background(), killWaitTimeout)
				defer cancel()
				ops, err := longrunningpb.NewOperationsClient(conn).ListOperations(ctx, &longrunningpb.ListOperationsRequest{})
				if err != nil {
					t.Fatal(err)
				}
				var running []string
				for _, op := range ops.Operations {
					if !op.Done {
						running = append(running, op.Name)
					}
				}
				if len(running) != 1 {
					t.Fatalf("%d unfinished operations, want the one running action: %v", len(running), running)
				}
				if _, err := adminpb.NewAdminClient(conn).KillOperation(ctx, &adminpb.KillOperationRequest{
					Name: running[0], Reason: "e2e kill", RefuseSeconds: sc.refuse}); err != nil {
					t.Fatal(err)
				}
				if sc.refuse == 0 {
					// Bazel runs the action again; let that run finish.
					waitUntil(t, "Bazel to submit the killed action again", func() bool { return starts() >= 2 })
				}
				if err := os.WriteFile(filepath.Join(dir, "release"), nil, 0o644); err != nil {
					t.Fatal(err)
				}
				var r *bazelResult
				select {
				case r = <-res:
				case <-time.After(3 * killWaitTimeout):
					t.Fatal("the build did not end")
				}
				t.Logf("%s: bazel exit %d after %d executions; output:\n%s", sc.name, r.ExitCode, starts(), errorLines(r.Output))
				switch {
				case sc.refuse == 0 && r.ExitCode != 0:
					t.Errorf("after a plain kill the build failed (exit %d%s); output:\n%s", r.ExitCode, exitCodeHint(r.ExitCode), r.Output)
				case sc.refuse > 0 && r.ExitCode != 34:
					// Both clients report an Execute error as a remote error.
					t.Errorf("after a kill with refuse the build ended with exit %d%s, want 34 (remote error); output:\n%s", r.ExitCode, exitCodeHint(r.ExitCode), r.Output)
				case sc.refuse > 0 && !strings.Contains(r.Output, "killed by an operator"):
					t.Errorf("after a kill with refuse Bazel's output does not show the refusal:\n%s", r.Output)
				case sc.refuse > 0 && starts() != 1:
					t.Errorf("after a kill with refuse the action ran %d times, want once", starts())
				}
			})
		}
	})
}

// waitUntil polls cond every 100 ms for up to killWaitTimeout.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(killWaitTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
