package execution

import (
	"context"

	"google.golang.org/grpc"

	workerpb "github.com/gantry-build/gantry/api/worker/v1"
)

// InProcess is the worker protocol of a worker that runs in the
// scheduler's own process (the embedded worker of `gantry serve`): its
// unary calls (Register, Poll, Heartbeat, Complete) are calls on the
// worker service itself, not through the process's own gRPC port, which
// cost both ends the encoding, the HTTP/2 framing, two loopback hops and
// the interceptors for every call (about a sixth of the server's CPU for
// a trivial action).
//
// What it skips, and why it may:
//   - every unary interceptor of the server (internal/server's
//     grpcserver.go and the parts' options): security (authentication
//     and authorization: the worker is the process itself, which would
//     be authorized as its internal identity), metrics (its calls do not
//     show in the per-method gRPC metrics), name lengths (its names come
//     from this process's scheduler, not from a caller) and build traffic
//     (a worker's calls carry no build's RequestMetadata);
//   - copying the messages: the worker service and the worker treat what
//     they are handed as read-only, and the worker builds every request
//     afresh.
//
// Session, a stream whose end is what tells the scheduler a worker went
// away, still goes over the connection (session).
type InProcess struct {
	srv     *WorkerService
	session workerpb.WorkersClient
}

var _ workerpb.WorkersClient = InProcess{}

// NewInProcess is the worker protocol of srv in this process, with the
// Session stream over session (a client of the process's own port).
func NewInProcess(srv *WorkerService, session workerpb.WorkersClient) InProcess {
	return InProcess{srv: srv, session: session}
}

// Register implements workerpb.WorkersClient.
func (p InProcess) Register(ctx context.Context, req *workerpb.RegisterRequest, _ ...grpc.CallOption) (*workerpb.RegisterResponse, error) {
	return p.srv.Register(ctx, req)
}

// Session implements workerpb.WorkersClient, over the connection.
func (p InProcess) Session(ctx context.Context, req *workerpb.SessionRequest, opts ...grpc.CallOption) (grpc.ServerStreamingClient[workerpb.SessionMessage], error) {
	return p.session.Session(ctx, req, opts...)
}

// Poll implements workerpb.WorkersClient.
func (p InProcess) Poll(ctx context.Context, req *workerpb.PollRequest, _ ...grpc.CallOption) (*workerpb.PollResponse, error) {
	return p.srv.Poll(ctx, req)
}

// Heartbeat implements workerpb.WorkersClient.
func (p InProcess) Heartbeat(ctx context.Context, req *workerpb.HeartbeatRequest, _ ...grpc.CallOption) (*workerpb.HeartbeatResponse, error) {
	return p.srv.Heartbeat(ctx, req)
}

// Complete implements workerpb.WorkersClient.
func (p InProcess) Complete(ctx context.Context, req *workerpb.CompleteRequest, _ ...grpc.CallOption) (*workerpb.CompleteResponse, error) {
	return p.srv.Complete(ctx, req)
}
