package frontend

import (
	bspb "google.golang.org/genproto/googleapis/bytestream"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// LogStreams serves the ByteStream calls on live output streams
// (internal/logstream names) that reach a frontend: the scheduler's hub
// in the same process, or a forwarder to the leading scheduler of a
// cluster, which holds them.
type LogStreams interface {
	// ReadLog follows the stream req names until it ends.
	ReadLog(req *bspb.ReadRequest, stream bspb.ByteStream_ReadServer) error
	// WriteLog writes the stream first names, then the requests that
	// follow on stream.
	WriteLog(first *bspb.WriteRequest, stream bspb.ByteStream_WriteServer) error
}

// noLogStreams answers where no scheduler's streams are reachable.
type noLogStreams struct{}

var errNoLogStreams = status.Error(codes.Unimplemented, "this server holds no live output streams (it runs no scheduler and forwards to none); read the output from the ActionResult once the operation ends")

func (noLogStreams) ReadLog(*bspb.ReadRequest, bspb.ByteStream_ReadServer) error {
	return errNoLogStreams
}

func (noLogStreams) WriteLog(*bspb.WriteRequest, bspb.ByteStream_WriteServer) error {
	return errNoLogStreams
}

// writeRequest copies the first request of a Write stream, as the
// frontend's codec decoded it, into a WriteRequest.
func (m *writeMsg) writeRequest() *bspb.WriteRequest {
	data := make([]byte, 0, m.n)
	for _, d := range m.data {
		data = append(data, d...)
	}
	return &bspb.WriteRequest{ResourceName: m.resourceName, WriteOffset: m.writeOffset, FinishWrite: m.finishWrite, Data: data}
}
