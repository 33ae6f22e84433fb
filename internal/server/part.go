package server

import (
	"context"

	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// A part is one piece of what a role runs (roles.go): the stores, a
// scheduler, the forwarder to the leading scheduler, the embedded
// worker. Its constructor opens what the part needs and pushes what must
// be closed onto the process's closers; the server then adds the part's
// options and services to its one gRPC server, and runs every part while
// it serves.
type part interface {
	// serverOptions are gRPC server options the part needs beyond those
	// of every role (grpcServerOptions).
	serverOptions() []grpc.ServerOption
	// register registers the part's services on g.
	register(g *grpc.Server)
	// run does the part's work while the process serves, until ctx ends
	// (then it returns nil). Any other return ends the process, with
	// that error.
	run(ctx context.Context) error
}

// standingBy is a part whose services are not SERVING from the start:
// they wait for a leader.
type standingBy interface {
	notServing() []string
}

// notServing is the health of the services of a standingBy part until
// it reports them SERVING.
const notServing = healthpb.HealthCheckResponse_NOT_SERVING

// healthReporter is a part that adds what it is doing to /healthz.
type healthReporter interface {
	health() string
}

// forwarding is a part that forwards the calls of services it does not
// register (reflection lists them too).
type forwarding interface {
	forwarded() []*grpc.ServiceDesc
}

// passive is the part of a part that has nothing to add: no options, no
// services, no work while serving.
type passive struct{}

func (passive) serverOptions() []grpc.ServerOption { return nil }

func (passive) register(*grpc.Server) {}

func (passive) run(ctx context.Context) error {
	<-ctx.Done()
	return nil
}
