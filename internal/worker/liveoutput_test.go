package worker

import (
	"bytes"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	bspb "google.golang.org/genproto/googleapis/bytestream"
	"google.golang.org/grpc"

	workerpb "github.com/gantry-build/gantry/api/worker/v1"
	"github.com/gantry-build/gantry/internal/client"
)

// stallingByteStream takes the first WriteRequest of a Write and then
// reads nothing until release is closed; it records what it got.
type stallingByteStream struct {
	bspb.UnimplementedByteStreamServer
	release chan struct{}
	mu      sync.Mutex
	got     bytes.Buffer
	name    string
	done    chan struct{}
}

func (s *stallingByteStream) Write(stream bspb.ByteStream_WriteServer) error {
	defer close(s.done)
	for first := true; ; first = false {
		req, err := stream.Recv()
		if err == io.EOF {
			return stream.SendAndClose(&bspb.WriteResponse{})
		}
		if err != nil {
			return err
		}
		s.mu.Lock()
		s.got.Write(req.Data)
		if req.ResourceName != "" {
			s.name = req.ResourceName
		}
		s.mu.Unlock()
		if first {
			<-s.release
		}
		if req.FinishWrite {
			return stream.SendAndClose(&bspb.WriteResponse{})
		}
	}
}

// An action writing much faster than the scheduler takes its live output
// is never held up: what does not fit is left out of the live stream,
// with a note, and the stream ends with finish_write.
func TestLiveSinkNeverBlocksTheAction(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	bs := &stallingByteStream{release: make(chan struct{}), done: make(chan struct{})}
	bspb.RegisterByteStreamServer(srv, bs)
	go srv.Serve(lis)
	defer srv.Stop()
	conn, err := client.Dial(lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	o := newLiveOutput(bspb.NewByteStreamClient(conn), slog.New(slog.NewTextHandler(io.Discard, nil)))
	j := &job{a: &workerpb.Assignment{InstanceName: "inst", TaskId: "t1", LeaseId: "l1"}}
	sink := o.open(j, "stdout")
	line := bytes.Repeat([]byte("x"), 1023)
	line = append(line, '\n')
	start := time.Now()
	for range 16 << 10 { // 16 MiB, far more than the stalled stream takes
		sink.Write(line)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("writing 16 MiB to a stalled live stream took %v", d)
	}
	sink.close()
	close(bs.release)
	select {
	case <-bs.done:
	case <-time.After(30 * time.Second):
		t.Fatal("the live stream did not finish")
	}
	bs.mu.Lock()
	defer bs.mu.Unlock()
	if bs.name != "inst/logstreams/t1.stdout/l1" {
		t.Errorf("stream name %q", bs.name)
	}
	if got := bs.got.String(); !strings.Contains(got, "bytes of live output were dropped here") || len(got) > 2*liveBuffer+1<<20 {
		t.Errorf("live stream of %d bytes (note: %v); want a bounded stream with a note of what was dropped", len(got), strings.Contains(got, "dropped"))
	}
}
