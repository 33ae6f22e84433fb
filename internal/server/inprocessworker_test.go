package server

import (
	"context"
	"testing"
	"time"

	"github.com/gantry-build/gantry/internal/digest"
)

// TestEmbeddedWorkerCallsTheSchedulerDirectly runs an action on the
// embedded worker of a role-all server and checks, in the per-method
// gRPC metrics, that the worker's Register, Poll, Heartbeat and Complete
// never went through the gRPC port: they are calls on the worker service
// in the process (execution.InProcess).
func TestEmbeddedWorkerCallsTheSchedulerDirectly(t *testing.T) {
	f := observedFarm(t, quietLogger(), nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp := f.run(ctx, digest.Empty(digest.SHA256), shCmd("echo hi > out", "out"))
	if resp.GetResult().GetExitCode() != 0 || len(resp.GetResult().GetOutputFiles()) != 1 {
		t.Fatalf("the action did not run as expected: %v", resp)
	}
	fams := scrape(t, f.srv.HTTPAddr())
	for _, m := range []string{"Register", "Poll", "Complete", "Heartbeat"} {
		if n := sample(fams, "gantry_grpc_requests_total", "method", "/gantry.worker.v1.Workers/"+m); n != 0 {
			t.Errorf("the embedded worker's %s went through the gRPC port %v times; it should call the worker service directly", m, n)
		}
	}
	// The metric counts what goes through the port: the client's Execute.
	if n := sample(fams, "gantry_grpc_requests_total", "method", "/build.bazel.remote.execution.v2.Execution/Execute"); n != 1 {
		t.Errorf("gantry_grpc_requests_total counted %v Execute calls, want 1", n)
	}
}
