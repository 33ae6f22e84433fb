package server

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// schedulerCallHeader marks a scheduler node's calls to the frontend's
// CAS and action cache, which the frontend's metrics count apart from
// those of clients and workers (metrics.Storage.FromScheduler).
const schedulerCallHeader = "gantry-scheduler-call"

// markSchedulerCalls are the dial options that mark every call.
func markSchedulerCalls() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoke grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			return invoke(metadata.AppendToOutgoingContext(ctx, schedulerCallHeader, "1"), method, req, reply, cc, opts...)
		}),
		grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, stream grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			return stream(metadata.AppendToOutgoingContext(ctx, schedulerCallHeader, "1"), desc, cc, method, opts...)
		}),
	}
}

// isSchedulerCall reports whether a call to a frontend is a scheduler
// node's. With auth on, the mark counts only from a caller that
// authenticates as one of cluster.scheduler_identities: anyone else
// could set it to hide its bytes from the CAS counters. With auth off
// every caller is trusted with everything, this mark included.
func (s *security) isSchedulerCall(ctx context.Context) bool {
	if len(metadata.ValueFromIncomingContext(ctx, schedulerCallHeader)) == 0 {
		return false
	}
	return s.authz == nil || s.authz.IsScheduler(ctx)
}
