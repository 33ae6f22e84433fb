package frontend

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"net"
	"strings"
	"testing"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"github.com/prometheus/client_golang/prometheus"
	bspb "google.golang.org/genproto/googleapis/bytestream"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"

	"github.com/gantry-build/gantry/internal/actioncache"
	"github.com/gantry-build/gantry/internal/blobstore"
	"github.com/gantry-build/gantry/internal/config"
	"github.com/gantry-build/gantry/internal/digest"
	"github.com/gantry-build/gantry/internal/metrics"
)

// serverOptions mirrors the gRPC options internal/server uses in
// production, so that tests and benchmarks see the same transport.
// Keep it in step with server.New.
func serverOptions() []grpc.ServerOption {
	maxMsg := maxMessageSize()
	gm := metrics.NewGRPC(prometheus.NewRegistry())
	return []grpc.ServerOption{
		grpc.MaxRecvMsgSize(maxMsg),
		grpc.MaxSendMsgSize(maxMsg),
		grpc.InitialWindowSize(8 << 20),
		grpc.InitialConnWindowSize(16 << 20),
		grpc.ReadBufferSize(256 << 10),
		grpc.WriteBufferSize(256 << 10),
		grpc.SharedWriteBuffer(true),
		experimental.BufferPool(BufferPool()),
		ServerCodec(),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
		grpc.ChainUnaryInterceptor(gm.Unary),
		grpc.ChainStreamInterceptor(gm.Stream),
	}
}

// maxMessageSize is the gRPC message limit of a default configuration.
func maxMessageSize() int {
	cfg := config.Default()
	return cfg.GRPCMaxMessageSize()
}

// env is a real gRPC server on a loopback port with clients connected to it.
type env struct {
	srv   *Server
	store blobstore.Store
	ac    actioncache.Store
	conn  *grpc.ClientConn
	caps  repb.CapabilitiesClient
	cas   repb.ContentAddressableStorageClient
	acc   repb.ActionCacheClient
	bs    bspb.ByteStreamClient
}

// defaultOptions are the production defaults (config.Default) for the
// frontend.
func defaultOptions() Options {
	cfg := config.Default()
	return Options{
		MaxBatchSize:      int64(cfg.Storage.MaxBatchSize),
		ReadChunkSize:     int(cfg.Storage.ReadChunkSize),
		InlineLimit:       int64(cfg.Storage.InlineLimit),
		CompletenessCheck: cfg.Storage.CompletenessCheck,
		Logger:            slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
}

func newEnv(tb testing.TB, store blobstore.Store, opts Options) *env {
	tb.Helper()
	return newEnvAC(tb, store, actioncache.NewMemory(0), opts)
}

// newEnvAC is newEnv with the given action cache.
func newEnvAC(tb testing.TB, store blobstore.Store, ac actioncache.Store, opts Options) *env {
	tb.Helper()
	if store == nil {
		store = blobstore.NewMemory(0)
	}
	srv := New(store, ac, opts)
	g := grpc.NewServer(serverOptions()...)
	srv.Register(g)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	go g.Serve(lis)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMessageSize())))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		conn.Close()
		g.Stop()
	})
	return &env{
		srv: srv, store: store, ac: ac, conn: conn,
		caps: repb.NewCapabilitiesClient(conn),
		cas:  repb.NewContentAddressableStorageClient(conn),
		acc:  repb.NewActionCacheClient(conn),
		bs:   bspb.NewByteStreamClient(conn),
	}
}

// testCtx is a context bounded so that a hung RPC fails the test rather
// than the whole run; nothing asserts on time.
func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// randomBlob returns n pseudo-random bytes determined by seed.
func randomBlob(seed string, n int) []byte {
	key := sha256.Sum256(fmt.Appendf(nil, "%s/%d", seed, n))
	out := make([]byte, n)
	rand.NewChaCha8(key).Read(out)
	return out
}

// put stores data directly in the env's CAS.
func (e *env) put(t testing.TB, fn digest.Function, data []byte) digest.Digest {
	t.Helper()
	d := digest.Compute(fn, data)
	if err := blobstore.Put(context.Background(), e.store, d, data); err != nil {
		t.Fatal(err)
	}
	return d
}

func (e *env) has(t testing.TB, d digest.Digest) bool {
	t.Helper()
	ok, err := blobstore.Has(context.Background(), e.store, d)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

// wantCode fails unless err has the given code and, if substr is set, its
// message contains substr.
func wantCode(t testing.TB, err error, code codes.Code, substr string) {
	t.Helper()
	if got := status.Code(err); got != code {
		t.Fatalf("status %v (%v), want %v", got, err, code)
	}
	if substr != "" && !strings.Contains(status.Convert(err).Message(), substr) {
		t.Fatalf("message %q does not contain %q", status.Convert(err).Message(), substr)
	}
}

func TestStoreErrorMapping(t *testing.T) {
	d := digest.Compute(digest.SHA256, []byte("x"))
	tests := []struct {
		err  error
		code codes.Code
	}{
		{nil, codes.OK},
		{&digest.Error{Msg: "bad"}, codes.InvalidArgument},
		{&blobstore.MismatchError{Want: d, Got: d}, codes.InvalidArgument},
		{blobstore.ErrNotFound, codes.NotFound},
		{fmt.Errorf("wrapped: %w", blobstore.ErrNotFound), codes.NotFound},
		{context.Canceled, codes.Canceled},
		{context.DeadlineExceeded, codes.DeadlineExceeded},
		{status.Error(codes.Aborted, "x"), codes.Aborted},
		{fs.ErrPermission, codes.Internal},
		{errors.New("disk on fire"), codes.Internal},
	}
	for _, tt := range tests {
		if got := status.Code(storeError(tt.err, "thing")); got != tt.code {
			t.Errorf("storeError(%v) = %v, want %v", tt.err, got, tt.code)
		}
	}
}
