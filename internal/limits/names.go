package limits

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gantry-build/gantry/internal/digest"
)

// Names refuses, with INVALID_ARGUMENT, a request that carries a name
// longer than digest.MaxInstanceNameLength: its instance_name, the
// instance of its ByteStream resource_name, an instance a worker
// registers for, or its name (an operation's, in every request that has
// one). It runs before authentication and authorization, so that such a
// name is never matched against the policy, quoted in a denial or
// logged. Messages it cannot read (the undecoded frames a frontend
// forwards to the scheduler, which checks them) pass.
type Names struct{}

// Unary is the unary server interceptor.
func (Names) Unary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if err := checkNames(req); err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

// Stream is the stream server interceptor: it checks every message the
// client sends.
func (Names) Stream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	return handler(srv, namesStream{ss})
}

type namesStream struct{ grpc.ServerStream }

func (s namesStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	return checkNames(m)
}

func checkNames(m any) error {
	if r, ok := m.(interface{ GetInstanceName() string }); ok {
		if err := digest.CheckNameLength("instance_name", r.GetInstanceName()); err != nil {
			return invalid(err)
		}
	}
	if r, ok := m.(interface{ GetResourceName() string }); ok {
		// A resource name holds more than the instance: only a long
		// one needs looking into.
		if n := r.GetResourceName(); len(n) > digest.MaxInstanceNameLength {
			if err := digest.CheckNameLength("the instance name in resource_name", digest.ResourceInstance(n)); err != nil {
				return invalid(err)
			}
		}
	}
	if r, ok := m.(interface{ GetName() string }); ok {
		if err := digest.CheckNameLength("name (an operation name)", r.GetName()); err != nil {
			return invalid(err)
		}
	}
	if r, ok := m.(interface{ GetInstances() []string }); ok {
		for _, inst := range r.GetInstances() {
			if err := digest.CheckNameLength("an instance name in instances", inst); err != nil {
				return invalid(err)
			}
		}
	}
	return nil
}

func invalid(err error) error { return status.Error(codes.InvalidArgument, err.Error()) }
