package server

import (
	"context"

	"google.golang.org/grpc"

	workerpb "github.com/gantry-build/gantry/api/worker/v1"
	"github.com/gantry-build/gantry/internal/scheduler"
)

// localWorkers is the worker protocol of the embedded worker when the
// scheduler runs in the same process (role all): Register, Poll,
// Heartbeat and Complete call the worker service directly instead of
// going through the process's own gRPC port, which cost both ends the
// encoding, the HTTP/2 framing, two loopback hops and the interceptors
// for every call (about a sixth of the server's CPU for a trivial
// action). Session, a stream whose end is what tells the scheduler a
// worker went away, still goes over the connection (WorkersClient).
//
// Its polls are marked scheduler.SameProcess: the worker dies with the
// scheduler, so its leases need not be stored before it runs them.
//
// The messages are shared, not copied as gRPC would: the worker service
// and the worker treat what they are handed as read-only, and the
// worker builds every request afresh. The calls skip the server's
// interceptors: the embedded worker is the process itself (it would be
// authorized as the process's internal identity), and its calls do not
// show in the per-method gRPC metrics.
type localWorkers struct {
	workerpb.WorkersClient
	srv workerpb.WorkersServer
}

// newLocalWorkers is the worker protocol over conn (remote) with its
// unary calls made on srv.
func newLocalWorkers(remote workerpb.WorkersClient, srv workerpb.WorkersServer) localWorkers {
	return localWorkers{WorkersClient: remote, srv: srv}
}

// Register implements workerpb.WorkersClient.
func (l localWorkers) Register(ctx context.Context, req *workerpb.RegisterRequest, _ ...grpc.CallOption) (*workerpb.RegisterResponse, error) {
	return l.srv.Register(ctx, req)
}

// Poll implements workerpb.WorkersClient.
func (l localWorkers) Poll(ctx context.Context, req *workerpb.PollRequest, _ ...grpc.CallOption) (*workerpb.PollResponse, error) {
	return l.srv.Poll(scheduler.SameProcess(ctx), req)
}

// Heartbeat implements workerpb.WorkersClient.
func (l localWorkers) Heartbeat(ctx context.Context, req *workerpb.HeartbeatRequest, _ ...grpc.CallOption) (*workerpb.HeartbeatResponse, error) {
	return l.srv.Heartbeat(ctx, req)
}

// Complete implements workerpb.WorkersClient.
func (l localWorkers) Complete(ctx context.Context, req *workerpb.CompleteRequest, _ ...grpc.CallOption) (*workerpb.CompleteResponse, error) {
	return l.srv.Complete(ctx, req)
}
