package server

import (
	bspb "google.golang.org/genproto/googleapis/bytestream"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// forwardedLogs is how a frontend of a cluster serves ByteStream calls on
// live output streams: the leading scheduler holds them (its workers
// write there, through whichever frontend they call), so the frontend
// forwards the call to it like any call of the scheduler's services,
// byte for byte, with the caller's identity.
type forwardedLogs struct{ leaders *leaderConns }

// ReadLog forwards a Read whose request the frontend already decoded.
func (f forwardedLogs) ReadLog(req *bspb.ReadRequest, stream bspb.ByteStream_ReadServer) error {
	return f.forward(req, stream)
}

// WriteLog forwards a Write whose first request the frontend already
// decoded; the following ones pass through undecoded.
func (f forwardedLogs) WriteLog(first *bspb.WriteRequest, stream bspb.ByteStream_WriteServer) error {
	return f.forward(first, stream)
}

func (f forwardedLogs) forward(first proto.Message, ss grpc.ServerStream) error {
	b, err := proto.Marshal(first)
	if err != nil {
		return status.Errorf(codes.Internal, "frontend: re-encoding a log stream request: %v", err)
	}
	return f.leaders.handler(nil, &replayStream{ServerStream: ss, first: &rawFrame{b: b}})
}

// replayStream gives the forwarder the request the frontend already
// received, then the rest of the call.
type replayStream struct {
	grpc.ServerStream
	first *rawFrame
}

func (r *replayStream) RecvMsg(m any) error {
	if r.first == nil {
		return r.ServerStream.RecvMsg(m)
	}
	f, ok := m.(*rawFrame)
	if !ok {
		return status.Error(codes.Internal, "frontend: forwarding a log stream call with a decoded message; this is a bug in Gantry")
	}
	f.b, r.first = r.first.b, nil
	return nil
}
