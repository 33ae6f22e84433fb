// Package client is a Go client for Remote Execution API v2 (REAPI)
// servers: Gantry or any other implementation (Buildbarn, BuildBuddy, ...).
//
// It offers a gRPC connection tuned for bulk blob transfer (Dial), a
// content-addressable storage client that implements blobstore.Store (CAS),
// the Execute/WaitExecution dance with retries (Execute), and a no-op worker
// for Gantry's own worker protocol, used to load-test the scheduler alone
// (NoopWorker).
package client

import (
	"context"
	"crypto/rand"
	"fmt"
	"strings"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
)

// Connection defaults. They mirror Gantry's server settings so that one
// ByteStream stream can fill a fast link.
const (
	// MaxRecvMsgSize bounds one received gRPC message (e.g. a
	// BatchReadBlobs response).
	MaxRecvMsgSize = 64 << 20
	// InitialWindowSize is the HTTP/2 flow-control window of one stream.
	InitialWindowSize = 8 << 20
	// InitialConnWindowSize is the HTTP/2 flow-control window of the connection.
	InitialConnWindowSize = 16 << 20
	// KeepaliveTime is how long a connection with active calls may be idle
	// before the client pings the server to check that it is still there.
	// It is deliberately not shorter: servers using grpc-go's default
	// enforcement policy answer too-frequent pings on a quiet stream with
	// GOAWAY (too_many_pings), which would break long Execute streams.
	KeepaliveTime = time.Minute
	// KeepaliveTimeout is how long the client waits for the ping's answer
	// before it considers the connection dead.
	KeepaliveTimeout = 20 * time.Second
)

// Dial returns a client connection to a REAPI server at target (host:port,
// or any gRPC target such as dns:///host:port or unix:///path). The
// connection is plain-text (DialSecure adds TLS and a token), receives messages of up to
// MaxRecvMsgSize, uses large HTTP/2 windows and keepalive pings while calls
// are active. opts are applied after the defaults, so they can override any
// of them (for example grpc.WithKeepaliveParams).
//
// Like grpc.NewClient, Dial does not connect: a server that cannot be
// reached shows up as an UNAVAILABLE error from the first call.
func Dial(target string, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
	if strings.TrimSpace(target) == "" {
		return nil, fmt.Errorf("no server address given; pass host:port of a REAPI server (for example 127.0.0.1:8980)")
	}
	all := []grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxRecvMsgSize)),
		grpc.WithInitialWindowSize(InitialWindowSize),
		grpc.WithInitialConnWindowSize(InitialConnWindowSize),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{
			Time:                KeepaliveTime,
			Timeout:             KeepaliveTimeout,
			PermitWithoutStream: false,
		}),
	}
	conn, err := grpc.NewClient(target, append(all, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("server address %q: %w; pass host:port (for example 127.0.0.1:8980)", target, err)
	}
	return conn, nil
}

// GetCapabilities asks the server for its capabilities for instance.
func GetCapabilities(ctx context.Context, conn grpc.ClientConnInterface, instance string) (*repb.ServerCapabilities, error) {
	caps, err := repb.NewCapabilitiesClient(conn).GetCapabilities(ctx, &repb.GetCapabilitiesRequest{InstanceName: instance})
	if err != nil {
		return nil, fmt.Errorf("GetCapabilities for instance %q: %w", instance, err)
	}
	return caps, nil
}

// DefaultMaxBatch is the batch size used when the server sets no limit:
// gRPC's default 4 MiB message limit still applies on most servers.
const DefaultMaxBatch = 4 << 20

// BatchLimit returns the largest total blob size to put in one batch call
// to a server with capabilities caps: max_batch_total_size_bytes, or
// DefaultMaxBatch when the server gives none (0 means "no limit" in the
// spec, but gRPC's message limit still applies).
func BatchLimit(caps *repb.ServerCapabilities) int64 {
	if n := caps.GetCacheCapabilities().GetMaxBatchTotalSizeBytes(); n > 0 {
		return n
	}
	return DefaultMaxBatch
}

// NewUUID returns a random (version 4) UUID in its canonical text form, as
// used in upload resource names; it is also handy for making actions unique.
func NewUUID() string {
	var b [16]byte
	rand.Read(b[:]) // never fails, per the crypto/rand documentation
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
