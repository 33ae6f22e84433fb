package metrics

import (
	"context"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"github.com/prometheus/client_golang/prometheus"
	bspb "google.golang.org/genproto/googleapis/bytestream"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Storage counts the CAS bytes clients and workers send and receive, and
// the action cache lookups of GetActionResult, from gRPC interceptors:
// the storage handlers are left alone.
type Storage struct {
	received, sent *prometheus.CounterVec
	// byteStream etc. are the resolved children.
	bsIn, bsOut, batchIn, batchOut prometheus.Counter
	ops                            *Outcomes
	schedulerCall                  func(ctx context.Context) bool
}

// Full method names the storage interceptors look at.
const (
	methodBatchUpdate     = "/build.bazel.remote.execution.v2.ContentAddressableStorage/BatchUpdateBlobs"
	methodBatchRead       = "/build.bazel.remote.execution.v2.ContentAddressableStorage/BatchReadBlobs"
	methodGetActionResult = "/build.bazel.remote.execution.v2.ActionCache/GetActionResult"
	methodRead            = "/google.bytestream.ByteStream/Read"
	methodWrite           = "/google.bytestream.ByteStream/Write"
)

// NewStorage registers the storage traffic metrics with reg; ops counts
// GetActionResult lookups. fromScheduler tells the calls of a scheduler
// node (role scheduler, reading actions from and writing results to this
// frontend) from those of clients and workers: their blob bytes are not
// counted, and their GetActionResult lookups are Execute's own (source
// execute). It is nil where no scheduler node calls (role all).
func NewStorage(reg prometheus.Registerer, ops *Outcomes, fromScheduler func(ctx context.Context) bool) *Storage {
	m := &Storage{
		received: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gantry_cas_received_bytes_total",
			Help: "Blob bytes received into the CAS (uploads; as sent, so compressed uploads count compressed), by API (bytestream, batch).",
		}, []string{"api"}),
		sent: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gantry_cas_sent_bytes_total",
			Help: "Blob bytes sent from the CAS (downloads, as sent), by API (bytestream, batch).",
		}, []string{"api"}),
		ops: ops, schedulerCall: fromScheduler,
	}
	m.bsIn, m.batchIn = m.received.WithLabelValues("bytestream"), m.received.WithLabelValues("batch")
	m.bsOut, m.batchOut = m.sent.WithLabelValues("bytestream"), m.sent.WithLabelValues("batch")
	reg.MustRegister(m.received, m.sent)
	return m
}

// Unary is a unary server interceptor.
func (m *Storage) Unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	switch info.FullMethod {
	case methodBatchUpdate, methodBatchRead:
		if m.fromScheduler(ctx) {
			return handler(ctx, req)
		}
	}
	switch info.FullMethod {
	case methodBatchUpdate:
		// Counted before the handler, which may hand the data's buffers
		// back to their pool.
		n := 0
		if r, ok := req.(*repb.BatchUpdateBlobsRequest); ok {
			for _, b := range r.Requests {
				n += len(b.Data)
			}
		}
		resp, err := handler(ctx, req)
		if err == nil {
			m.batchIn.Add(float64(n))
		}
		return resp, err
	case methodBatchRead:
		resp, err := handler(ctx, req)
		if r, ok := resp.(*repb.BatchReadBlobsResponse); ok && err == nil {
			n := 0
			for _, b := range r.Responses {
				n += len(b.Data)
			}
			m.batchOut.Add(float64(n))
		}
		return resp, err
	case methodGetActionResult:
		source := "get_action_result"
		if m.fromScheduler(ctx) {
			source = "execute"
		}
		resp, err := handler(ctx, req)
		switch status.Code(err) {
		case codes.OK:
			m.ops.CacheLookup(source, true)
		case codes.NotFound:
			m.ops.CacheLookup(source, false)
		}
		return resp, err
	}
	return handler(ctx, req)
}

// Stream is a stream server interceptor.
func (m *Storage) Stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if (info.FullMethod == methodRead || info.FullMethod == methodWrite) && m.fromScheduler(ss.Context()) {
		return handler(srv, ss)
	}
	switch info.FullMethod {
	case methodRead:
		return handler(srv, &countingStream{ServerStream: ss, sent: m.bsOut})
	case methodWrite:
		return handler(srv, &countingStream{ServerStream: ss, received: m.bsIn})
	}
	return handler(srv, ss)
}

func (m *Storage) fromScheduler(ctx context.Context) bool {
	return m.schedulerCall != nil && m.schedulerCall(ctx)
}

// countingStream counts the data of ByteStream messages.
type countingStream struct {
	grpc.ServerStream
	sent, received prometheus.Counter
}

func (s *countingStream) SendMsg(msg any) error {
	n := 0
	switch r := msg.(type) {
	case *bspb.ReadResponse:
		n = len(r.Data)
	case interface{ DataLen() int }:
		n = r.DataLen()
	}
	err := s.ServerStream.SendMsg(msg)
	if err == nil && s.sent != nil {
		s.sent.Add(float64(n))
	}
	return err
}

func (s *countingStream) RecvMsg(msg any) error {
	err := s.ServerStream.RecvMsg(msg)
	if err != nil || s.received == nil {
		return err
	}
	switch r := msg.(type) {
	case *bspb.WriteRequest:
		s.received.Add(float64(len(r.Data)))
	case interface{ DataLen() int }: // the frontend's own WriteRequest
		s.received.Add(float64(r.DataLen()))
	}
	return err
}
