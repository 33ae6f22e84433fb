package server

import (
	"context"
	"fmt"

	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// forwarder is the part of a frontend node (role frontend) that forwards
// every call of the scheduler's services (Execution, Operations, the
// worker protocol, Admin) to the leading scheduler it finds in
// PostgreSQL. Those services are SERVING while a leader is published.
type forwarder struct {
	leaders *leaderConns
	descs   []*grpc.ServiceDesc
}

// newForwarder opens the database where schedulers publish their leader.
func newForwarder(b *builder) (*forwarder, error) {
	cfg := b.cfg
	store, err := b.openClusterStore("the PostgreSQL database where schedulers publish their leader")
	if err != nil {
		return nil, err
	}
	f := &forwarder{descs: schedulerServiceDescs()}
	obs := b.obs
	f.leaders = newLeaderConns(store, cfg.Cluster.TakeoverInterval.D(), cfg.GRPCMaxMessageSize(), clusterSecurity(cfg), b.log,
		obs.operationDone,
		func(published bool) {
			st := healthpb.HealthCheckResponse_NOT_SERVING
			if published {
				st = healthpb.HealthCheckResponse_SERVING
			}
			obs.setServing(st, serviceNames(f.descs)...)
		})
	return f, nil
}

// serverOptions send the calls of every service not registered here to
// the leader.
func (f *forwarder) serverOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.UnknownServiceHandler(f.leaders.handler)}
}

func (f *forwarder) register(*grpc.Server) {}

func (f *forwarder) notServing() []string { return serviceNames(f.descs) }

func (f *forwarder) forwarded() []*grpc.ServiceDesc { return f.descs }

func (f *forwarder) health() string {
	_, term, _ := f.leaders.current()
	f.leaders.mu.Lock()
	addr := f.leaders.address
	f.leaders.mu.Unlock()
	return fmt.Sprintf("frontend; scheduler leader %q term %d", addr, term)
}

// run follows the published leader until ctx ends.
func (f *forwarder) run(ctx context.Context) error {
	f.leaders.run(ctx)
	return nil
}
