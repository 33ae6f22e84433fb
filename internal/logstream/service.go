package logstream

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"

	lspb "github.com/bazelbuild/remote-apis/build/bazel/remote/logstream/v1"
	bspb "google.golang.org/genproto/googleapis/bytestream"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gantry-build/gantry/internal/digest"
)

// Service serves a Hub's streams: ByteStream Read and Write of log stream
// names, and the LogStream API's CreateLogStream. A frontend hands it the
// ByteStream calls on log stream names (ReadLog, WriteLog); a scheduler
// of a cluster serves it as its ByteStream service, for the frontends
// that forward those calls.
type Service struct {
	bspb.UnimplementedByteStreamServer
	lspb.UnimplementedLogStreamServiceServer
	hub *Hub
}

var (
	_ bspb.ByteStreamServer       = (*Service)(nil)
	_ lspb.LogStreamServiceServer = (*Service)(nil)
)

// NewService serves hub.
func NewService(hub *Hub) *Service { return &Service{hub: hub} }

// RegisterLogStream adds the LogStream API to g.
func (s *Service) RegisterLogStream(g grpc.ServiceRegistrar) {
	lspb.RegisterLogStreamServiceServer(g, s)
}

// errNotHere answers ByteStream calls on blobs at a scheduler.
func errNotHere(name string) error {
	return status.Errorf(codes.FailedPrecondition, "%q is not a log stream: this scheduler serves only log streams over ByteStream; read and write blobs at a frontend", name)
}

// Read implements ByteStream Read of a log stream: it follows the stream
// from read_offset until the stream ends.
func (s *Service) Read(req *bspb.ReadRequest, stream bspb.ByteStream_ReadServer) error {
	if !Is(req.ResourceName) {
		return errNotHere(req.ResourceName)
	}
	return s.ReadLog(req, stream)
}

// ReadLog is Read for a name Is reports a log stream.
func (s *Service) ReadLog(req *bspb.ReadRequest, stream bspb.ByteStream_ReadServer) error {
	n, err := ParseRead(req.ResourceName)
	if err != nil {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	return s.hub.Follow(stream.Context(), n, req.ReadOffset, req.ReadLimit, func(b []byte) error {
		return stream.Send(&bspb.ReadResponse{Data: b})
	})
}

// Write implements ByteStream Write to a log stream's write name.
func (s *Service) Write(stream bspb.ByteStream_WriteServer) error {
	first, err := stream.Recv()
	if errors.Is(err, io.EOF) {
		return status.Error(codes.InvalidArgument, "write stream closed before its first request")
	}
	if err != nil {
		return err
	}
	if !Is(first.ResourceName) {
		return errNotHere(first.ResourceName)
	}
	return s.WriteLog(first, stream)
}

// WriteLog is Write for a stream whose first request, first, names a log
// stream. A stream closed without finish_write leaves the log stream
// open for a later Write to resume at the committed size.
func (s *Service) WriteLog(first *bspb.WriteRequest, stream bspb.ByteStream_WriteServer) error {
	n, err := ParseWrite(first.ResourceName)
	if err != nil {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	req := first
	for {
		committed, err := s.hub.Append(n, req.WriteOffset, req.Data, req.FinishWrite)
		if err != nil {
			return err
		}
		if req.FinishWrite {
			return stream.SendAndClose(&bspb.WriteResponse{CommittedSize: committed})
		}
		req, err = stream.Recv()
		if errors.Is(err, io.EOF) {
			return stream.SendAndClose(&bspb.WriteResponse{CommittedSize: committed})
		}
		if err != nil {
			return err
		}
		if req.ResourceName != "" && req.ResourceName != first.ResourceName {
			return status.Errorf(codes.InvalidArgument, "a write stream names one resource: %q after %q", req.ResourceName, first.ResourceName)
		}
	}
}

// CreateLogStream implements the LogStream API: parent is the instance
// name the stream belongs to.
func (s *Service) CreateLogStream(_ context.Context, req *lspb.CreateLogStreamRequest) (*lspb.LogStream, error) {
	if err := digest.ValidateInstanceName(req.Parent); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "parent must be an instance name: %v", err)
	}
	n, err := s.hub.Create(req.Parent, "c"+randomHex(12), randomHex(24))
	if err != nil {
		return nil, err
	}
	return &lspb.LogStream{Name: n.Read(), WriteResourceName: n.Write()}, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}
