package server

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// servedExecution answers every Execute with FAILED_PRECONDITION
// "served": the term's implementation was reached.
type servedExecution struct {
	repb.UnimplementedExecutionServer
}

func (servedExecution) Execute(*repb.ExecuteRequest, repb.Execution_ExecuteServer) error {
	return status.Error(codes.FailedPrecondition, "served")
}

// startTermServices serves a scheduler node's term services on loopback
// and returns them with a connection to them.
func startTermServices(t *testing.T) (*termServices, *grpc.ClientConn) {
	t.Helper()
	ts := newTermServices()
	g := grpc.NewServer()
	ts.register(g)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go g.Serve(lis)
	t.Cleanup(g.Stop)
	return ts, mustDial(t, lis.Addr().String())
}

// executeCode is the status code of an Execute call on conn, within d.
func executeCode(conn *grpc.ClientConn, d time.Duration) (codes.Code, string) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	stream, err := repb.NewExecutionClient(conn).Execute(ctx, &repb.ExecuteRequest{})
	if err == nil {
		_, err = stream.Recv()
	}
	return status.Code(err), err.Error()
}

// A scheduler that took the leadership and still restores its state
// holds calls until its term serves (frontends already forward to it),
// instead of answering UNAVAILABLE, which has every client and worker
// retry in a loop against the restore. A standby answers at once, and a
// restore that fails releases the held calls with UNAVAILABLE.
func TestTermServicesHoldCallsWhileRestoring(t *testing.T) {
	ts, conn := startTermServices(t)
	if code, msg := executeCode(conn, 10*time.Second); code != codes.Unavailable || !strings.Contains(msg, "stands by") {
		t.Fatalf("Execute at a standby: %v %q, want UNAVAILABLE at once saying it stands by", code, msg)
	}

	ts.restoring()
	type answer struct {
		code codes.Code
		msg  string
		at   time.Time
	}
	held := make(chan answer, 1)
	go func() {
		code, msg := executeCode(conn, 10*time.Second)
		held <- answer{code, msg, time.Now()}
	}()
	time.Sleep(300 * time.Millisecond)
	servedAt := time.Now()
	ts.set(map[string]any{"build.bazel.remote.execution.v2.Execution": servedExecution{}})
	a := <-held
	if a.code != codes.FailedPrecondition || !strings.Contains(a.msg, "served") {
		t.Fatalf("Execute sent while the leader restored: %v %q, want it held and then served by the term", a.code, a.msg)
	}
	if a.at.Before(servedAt) {
		t.Errorf("the held call was answered %v before the term served", servedAt.Sub(a.at))
	}

	// The term ends; the next restore fails.
	ts.set(nil)
	ts.restoring()
	go func() {
		code, msg := executeCode(conn, 10*time.Second)
		held <- answer{code, msg, time.Now()}
	}()
	time.Sleep(100 * time.Millisecond)
	ts.set(nil)
	if a := <-held; a.code != codes.Unavailable {
		t.Errorf("a call held by a restore that failed: %v %q, want UNAVAILABLE", a.code, a.msg)
	}
}
