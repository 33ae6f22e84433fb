package server

import (
	"context"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	bspb "google.golang.org/genproto/googleapis/bytestream"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/gantry-build/gantry/internal/history"
	"github.com/gantry-build/gantry/internal/invocation"
	"github.com/gantry-build/gantry/internal/protocol"
)

// buildTraffic counts the CAS bytes of the calls that carry a
// RequestMetadata with a tool_invocation_id into that build's summary in
// the history (the build page's bytes up and down). It runs where the
// CAS and the history are in one process (role all): a frontend node's
// calls are not counted, its scheduler keeps the history. A call costs
// a look at its headers; one of a build, decoding the RequestMetadata,
// a count on the stream and one Recorder.AddTraffic at its end.
type buildTraffic struct {
	hist *history.Recorder
}

// The storage methods whose blob bytes are counted.
const (
	methodBatchUpdateBlobs = "/build.bazel.remote.execution.v2.ContentAddressableStorage/BatchUpdateBlobs"
	methodBatchReadBlobs   = "/build.bazel.remote.execution.v2.ContentAddressableStorage/BatchReadBlobs"
	methodGetActionResult  = "/build.bazel.remote.execution.v2.ActionCache/GetActionResult"
	methodByteStreamRead   = "/google.bytestream.ByteStream/Read"
	methodByteStreamWrite  = "/google.bytestream.ByteStream/Write"
)

// buildOf is the tool_invocation_id of the call's RequestMetadata, or "".
// It reads that one field off the wire (the last one wins, as in a
// decode) instead of decoding the message: this runs for every storage
// call, and costs a header lookup without a RequestMetadata.
func buildOf(ctx context.Context) string {
	vs := metadata.ValueFromIncomingContext(ctx, protocol.RequestMetadataHeader)
	if len(vs) == 0 {
		return ""
	}
	return invocation.ToolInvocationIDOf(vs[0])
}

// unary counts the batch calls and GetActionResult's inlined outputs.
func (b buildTraffic) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	switch info.FullMethod {
	case methodBatchUpdateBlobs, methodBatchReadBlobs, methodGetActionResult:
	default:
		return handler(ctx, req)
	}
	build := buildOf(ctx)
	if build == "" {
		return handler(ctx, req)
	}
	var up int64
	if r, ok := req.(*repb.BatchUpdateBlobsRequest); ok {
		// Counted before the handler, which may hand the data's buffers
		// back to their pool.
		for _, x := range r.Requests {
			up += int64(len(x.Data))
		}
	}
	resp, err := handler(ctx, req)
	if err != nil {
		return resp, err
	}
	var down int64
	switch r := resp.(type) {
	case *repb.BatchReadBlobsResponse:
		for _, x := range r.Responses {
			down += int64(len(x.Data))
		}
	case *repb.ActionResult:
		down = int64(len(r.StdoutRaw) + len(r.StderrRaw))
		for _, f := range r.OutputFiles {
			down += int64(len(f.Contents))
		}
	}
	b.hist.AddTraffic(build, up, down)
	return resp, err
}

// stream counts ByteStream Read and Write.
func (b buildTraffic) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if info.FullMethod != methodByteStreamRead && info.FullMethod != methodByteStreamWrite {
		return handler(srv, ss)
	}
	build := buildOf(ss.Context())
	if build == "" {
		return handler(srv, ss)
	}
	cs := &buildCountingStream{ServerStream: ss}
	err := handler(srv, cs)
	b.hist.AddTraffic(build, cs.up, cs.down)
	return err
}

// buildCountingStream sums the blob bytes of one ByteStream call (only
// its handler's goroutine uses it).
type buildCountingStream struct {
	grpc.ServerStream
	up, down int64
}

func (s *buildCountingStream) SendMsg(msg any) error {
	err := s.ServerStream.SendMsg(msg)
	if err == nil {
		switch r := msg.(type) {
		case *bspb.ReadResponse:
			s.down += int64(len(r.Data))
		case interface{ DataLen() int }: // the frontend's pooled chunk
			s.down += int64(r.DataLen())
		}
	}
	return err
}

func (s *buildCountingStream) RecvMsg(msg any) error {
	err := s.ServerStream.RecvMsg(msg)
	if err == nil {
		switch r := msg.(type) {
		case *bspb.WriteRequest:
			s.up += int64(len(r.Data))
		case interface{ DataLen() int }: // the frontend's own WriteRequest
			s.up += int64(r.DataLen())
		}
	}
	return err
}

// serverOptions are the interceptors, or none without a history.
func (b buildTraffic) serverOptions() []grpc.ServerOption {
	if b.hist == nil {
		return nil
	}
	return []grpc.ServerOption{grpc.ChainUnaryInterceptor(b.unary), grpc.ChainStreamInterceptor(b.stream)}
}
