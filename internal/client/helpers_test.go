package client

import (
	"context"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/stats"

	"github.com/gantry-build/gantry/internal/actioncache"
	"github.com/gantry-build/gantry/internal/blobstore"
	"github.com/gantry-build/gantry/internal/frontend"
)

func TestMain(m *testing.M) {
	// Retries must not slow the tests down; no test depends on the delay.
	retryDelay = func(int) time.Duration { return 0 }
	os.Exit(m.Run())
}

// calls counts the gRPC methods a test server was called with.
type calls struct {
	mu sync.Mutex
	n  map[string]int

	// in and out count the message bytes the server received and sent.
	in, out atomic.Int64
}

// TagRPC, HandleRPC, TagConn and HandleConn make calls a gRPC stats
// handler that counts message bytes.
func (c *calls) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }
func (c *calls) HandleRPC(_ context.Context, s stats.RPCStats) {
	switch p := s.(type) {
	case *stats.InPayload:
		c.in.Add(int64(p.WireLength))
	case *stats.OutPayload:
		c.out.Add(int64(p.WireLength))
	}
}
func (c *calls) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }
func (c *calls) HandleConn(context.Context, stats.ConnStats)                       {}

func (c *calls) add(method string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[method]++
}

// get returns how often the method with the short name (e.g.
// "BatchUpdateBlobs") was called.
func (c *calls) get(short string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	total := 0
	for m, n := range c.n {
		if len(m) > len(short) && m[len(m)-len(short)-1:] == "/"+short {
			total += n
		}
	}
	return total
}

// startServer serves the services that register adds on 127.0.0.1:0 and
// returns a connection to it made with Dial, and the call counts. wrap,
// if given, wraps the listener (for example to slow the link down).
func startServer(t testing.TB, register func(*grpc.Server), wrap ...func(net.Listener) net.Listener) (*grpc.ClientConn, *calls) {
	t.Helper()
	c := &calls{}
	g := grpc.NewServer(
		// The storage services need their codec; it is transparent to
		// the fakes.
		frontend.ServerCodec(),
		grpc.MaxRecvMsgSize(64<<20),
		grpc.StatsHandler(c),
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			c.add(info.FullMethod)
			return h(ctx, req)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			c.add(info.FullMethod)
			return h(srv, ss)
		}),
	)
	register(g)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range wrap {
		lis = w(lis)
	}
	done := make(chan struct{})
	go func() { defer close(done); g.Serve(lis) }()
	conn, err := Dial(lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		g.Stop()
		<-done
	})
	return conn, c
}

// startFrontend serves Gantry's storage services over an in-memory CAS.
func startFrontend(t testing.TB, opts frontend.Options, wrap ...func(net.Listener) net.Listener) (*grpc.ClientConn, *blobstore.Memory, *calls) {
	t.Helper()
	mem := blobstore.NewMemory(0)
	fe := frontend.New(mem, actioncache.NewMemory(0), opts)
	conn, c := startServer(t, fe.Register, wrap...)
	return conn, mem, c
}

// testData returns n bytes that differ with seed.
func testData(n int, seed byte) []byte {
	b := make([]byte, n)
	x := uint32(seed)*2654435761 + 1
	for i := range b {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b[i] = byte(x)
	}
	return b
}
