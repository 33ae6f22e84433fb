package server

import (
	"fmt"
	"log/slog"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/keepalive"

	"github.com/gantry-build/gantry/internal/config"
	"github.com/gantry-build/gantry/internal/execution"
	"github.com/gantry-build/gantry/internal/frontend"
	"github.com/gantry-build/gantry/internal/limits"
)

// streamWorkers is how many goroutines serve gRPC calls in turn.
const streamWorkers = 64

// serverOption is a gRPC server option with a name that says what it
// sets, so that a test can see that every role gets the same ones.
type serverOption struct {
	name string
	opt  grpc.ServerOption
}

// grpcServerOptions are the gRPC server options of every role: sizes,
// windows and buffers, keepalive, the codec, TLS (and the embedded
// worker's in-process connection), then the interceptors: metrics first,
// the name lengths, authentication and authorization, then the streams
// per caller. local tells the methods of the services served here from
// those forwarded to the leading scheduler.
func grpcServerOptions(cfg config.Config, sec *security, obs *observability, local func(fullMethod string) bool, log *slog.Logger) []serverOption {
	maxMsg := cfg.GRPCMaxMessageSize()
	opts := []serverOption{
		{fmt.Sprintf("MaxRecvMsgSize(%d)", maxMsg), grpc.MaxRecvMsgSize(maxMsg)},
		{fmt.Sprintf("MaxSendMsgSize(%d)", maxMsg), grpc.MaxSendMsgSize(maxMsg)},
		// Large windows let one ByteStream stream fill a fast link.
		{"InitialWindowSize(8MiB)", grpc.InitialWindowSize(8 << 20)},
		{"InitialConnWindowSize(16MiB)", grpc.InitialConnWindowSize(16 << 20)},
		// Larger socket buffers: a 256 MiB upload or download takes a
		// tenth of the read and write system calls of the default 32 KiB.
		// Write buffers go back to a pool between flushes, so idle
		// connections hold none.
		{"ReadBufferSize(256KiB)", grpc.ReadBufferSize(256 << 10)},
		{"WriteBufferSize(256KiB)", grpc.WriteBufferSize(256 << 10)},
		{"SharedWriteBuffer(true)", grpc.SharedWriteBuffer(true)},
		// Buffers that are not zeroed on reuse, shared with the storage
		// handlers (see frontend.BufferPool).
		{"BufferPool(frontend)", experimental.BufferPool(frontend.BufferPool())},
		// The storage services' codec (which they need), able to pass
		// forwarded calls through unparsed (forward.go).
		{"ForceServerCodecV2(raw over frontend)", grpc.ForceServerCodecV2(newRawCodec(frontend.Codec()))},
		{"KeepaliveEnforcementPolicy(10s, without streams)", grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true})},
		// Reused handler goroutines keep their grown stacks: a new
		// goroutine per call grows its stack on every call (copystack was
		// ~10% of the CPU with many small calls). Calls beyond these
		// workers get a goroutine of their own as before.
		{fmt.Sprintf("NumStreamWorkers(%d)", streamWorkers), grpc.NumStreamWorkers(streamWorkers)},
		{"Creds(security)", grpc.Creds(sec.creds())},
		{"ChainUnaryInterceptor(metrics)", grpc.ChainUnaryInterceptor(obs.unary()...)},
		{"ChainStreamInterceptor(metrics)", grpc.ChainStreamInterceptor(obs.stream()...)},
		// Over-long names are refused before authorization quotes them.
		{"ChainUnaryInterceptor(name lengths)", grpc.ChainUnaryInterceptor(limits.Names{}.Unary)},
		{"ChainStreamInterceptor(name lengths)", grpc.ChainStreamInterceptor(limits.Names{}.Stream)},
	}
	if sec.authz != nil {
		// The admin controls that authorization refuses are logged.
		opts = append(opts, serverOption{"ChainUnaryInterceptor(refused controls)", grpc.ChainUnaryInterceptor(execution.LogRefusedControls(log))})
	}
	return append(opts,
		serverOption{"ChainUnaryInterceptor(security)", grpc.ChainUnaryInterceptor(sec.unary()...)},
		serverOption{"ChainStreamInterceptor(security)", grpc.ChainStreamInterceptor(sec.stream(local)...)},
		// After authentication, which names the caller.
		serverOption{"ChainStreamInterceptor(streams per caller)", grpc.ChainStreamInterceptor(obs.streamLimits(cfg).Stream)},
	)
}

// newGRPCServer builds the gRPC server of a process from the options of
// every role and those its parts add.
func newGRPCServer(common []serverOption, parts []part) *grpc.Server {
	opts := make([]grpc.ServerOption, 0, len(common)+1)
	for _, o := range common {
		opts = append(opts, o.opt)
	}
	for _, p := range parts {
		opts = append(opts, p.serverOptions()...)
	}
	return grpc.NewServer(opts...)
}
