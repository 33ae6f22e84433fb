package remote

import (
	"context"
	"fmt"
	"slices"
	"sync"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/grpc"

	"github.com/gantry-build/gantry/internal/client"
	"github.com/gantry-build/gantry/internal/digest"
)

// Options tunes a Client. The zero value is fine.
type Options struct {
	// Priority is the ExecutionPolicy priority of every action (lower
	// runs sooner on servers that honour it; 0 is the server's default).
	Priority int32
	// Chunks says which files move as content-defined chunks.
	Chunks ChunkOptions
	// Live prints the output of actions that run longer than LiveDelay
	// as it comes (live.go), where the server streams it.
	Live bool
}

// Client runs actions on one REAPI server instance. It is safe for
// concurrent use by many jobs, which share its caches: the digests of
// local files (so a header read by 300 compiles is hashed once) and the
// blobs known to be in the CAS (so later actions do not ask again).
type Client struct {
	conn     *grpc.ClientConn
	instance string
	opts     Options
	fn       digest.Function
	cas      *client.CAS
	ac       repb.ActionCacheClient
	maxBatch int64

	chunked  *client.Chunked
	chunkMin int64 // files of at least this size move as chunks; 0: none

	files    *fileCache
	subtrees *subtreeCache

	mu      sync.Mutex
	present map[digest.Digest]struct{} // blobs the CAS is known to hold
}

// New returns a Client for instance on the server behind conn. It asks the
// server for its capabilities once (digest function, batch size limit), so
// an unreachable server is reported here.
func New(ctx context.Context, conn *grpc.ClientConn, instance string, opts Options) (*Client, error) {
	caps, err := client.GetCapabilities(ctx, conn, instance)
	if err != nil {
		return nil, err
	}
	fn, err := chooseFunction(caps)
	if err != nil {
		return nil, err
	}
	if !caps.GetExecutionCapabilities().GetExecEnabled() {
		return nil, fmt.Errorf("the server does not execute actions for instance %q (its capabilities say exec_enabled=false); point GANTRY_SERVER or --server at a server with workers", instance)
	}
	maxBatch := client.BatchLimit(caps)
	cas := client.NewCAS(conn, instance, fn, maxBatch)
	chunked, chunkMin := newChunked(cas, client.ChunkingOf(caps), opts.Chunks)
	return &Client{
		conn:     conn,
		instance: instance,
		opts:     opts,
		fn:       fn,
		cas:      cas,
		chunked:  chunked,
		chunkMin: chunkMin,
		ac:       repb.NewActionCacheClient(conn),
		maxBatch: maxBatch,
		files:    newFileCache(),
		subtrees: newSubtreeCache(),
		present:  make(map[digest.Digest]struct{}),
	}, nil
}

// chooseFunction picks SHA-256 if the server supports it, else the first
// digest function it offers that this client knows.
func chooseFunction(caps *repb.ServerCapabilities) (digest.Function, error) {
	fns := caps.GetCacheCapabilities().GetDigestFunctions()
	if len(fns) == 0 || slices.Contains(fns, digest.SHA256) {
		// A server that lists none predates the field: SHA-256 is the
		// spec's default.
		return digest.SHA256, nil
	}
	for _, fn := range fns {
		if digest.IsSupported(fn) {
			return fn, nil
		}
	}
	return 0, fmt.Errorf("the server offers digest functions %v, none of which this client supports", fns)
}

// Instance is the instance name the Client runs actions on.
func (c *Client) Instance() string { return c.instance }

// DigestFunction is the digest function the Client uses.
func (c *Client) DigestFunction() digest.Function { return c.fn }

// Conn is the connection the Client uses (for example for CancelOperation).
func (c *Client) Conn() *grpc.ClientConn { return c.conn }
