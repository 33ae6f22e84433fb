// Package frontend implements the REAPI gRPC services (Capabilities, CAS,
// ByteStream, ActionCache) as thin adapters over the stores.
package frontend

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	bspb "google.golang.org/genproto/googleapis/bytestream"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gantry-build/gantry/internal/actioncache"
	"github.com/gantry-build/gantry/internal/blobstore"
	"github.com/gantry-build/gantry/internal/chunkmap"
	"github.com/gantry-build/gantry/internal/digest"
)

// Options tune the services.
type Options struct {
	// MaxBatchSize bounds the blob bytes in one batch call.
	MaxBatchSize int64
	// ReadChunkSize is the ByteStream Read chunk size.
	ReadChunkSize int
	// InlineLimit bounds the bytes GetActionResult inlines.
	InlineLimit int64
	// CompletenessCheck serves cached results only if their outputs exist.
	CompletenessCheck bool
	// ExecEnabled is advertised in the execution capabilities.
	ExecEnabled bool
	// UploadIdle is how long an interrupted upload is kept for resumption.
	UploadIdle time.Duration
	// ChrootInstances are the instances whose actions run with the input
	// root as "/" (scheduler.chroot_instances): their capabilities allow
	// absolute symlinks.
	ChrootInstances []string
	// Logger receives diagnostics; nil means slog.Default().
	Logger *slog.Logger
	// LogStreams serves ByteStream calls on live output streams; nil:
	// there are none here.
	LogStreams LogStreams
}

// Server implements the storage half of REAPI.
type Server struct {
	repb.UnimplementedCapabilitiesServer
	repb.UnimplementedContentAddressableStorageServer
	repb.UnimplementedActionCacheServer
	bspb.UnimplementedByteStreamServer

	cas       blobstore.Store
	ac        actioncache.Store
	maps      *chunkmap.Store
	chunkings chunkings
	opts      Options
	log       *slog.Logger

	uploadsMu sync.Mutex
	uploads   map[string]*upload
}

// New returns a Server over the given stores.
func New(cas blobstore.Store, ac actioncache.Store, opts Options) *Server {
	if opts.MaxBatchSize <= 0 {
		opts.MaxBatchSize = 4 << 20
	}
	if opts.LogStreams == nil {
		opts.LogStreams = noLogStreams{}
	}
	if opts.ReadChunkSize <= 0 {
		opts.ReadChunkSize = 1 << 20
	}
	if opts.UploadIdle <= 0 {
		opts.UploadIdle = 15 * time.Minute
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	return &Server{cas: cas, ac: ac, maps: chunkmap.New(ac, cas), chunkings: newChunkings(),
		opts: opts, log: opts.Logger, uploads: map[string]*upload{}}
}

// Register adds the services to a gRPC server, which must have been
// built with ServerCodec: ByteStream Write and Read exchange messages
// only that codec encodes and decodes.
func (s *Server) Register(g *grpc.Server) {
	repb.RegisterCapabilitiesServer(g, s)
	repb.RegisterContentAddressableStorageServer(g, s)
	repb.RegisterActionCacheServer(g, s)
	bspb.RegisterByteStreamServer(g, s)
}

func invalid(format string, args ...any) error {
	return status.Errorf(codes.InvalidArgument, format, args...)
}

// storeError maps store and validation errors to gRPC statuses.
func storeError(err error, what string) error {
	if err == nil {
		return nil
	}
	var de *digest.Error
	var me *blobstore.MismatchError
	var ue *blobstore.UnavailableError
	var le *blobstore.LifetimeError
	switch {
	case errors.As(err, &le):
		return status.Error(codes.ResourceExhausted, le.Error())
	case errors.As(err, &ue):
		return status.Errorf(codes.Unavailable, "%s: %v", what, ue)
	case errors.As(err, &de):
		return status.Error(codes.InvalidArgument, de.Msg)
	case errors.As(err, &me):
		return status.Error(codes.InvalidArgument, me.Error())
	case errors.Is(err, blobstore.ErrNotFound):
		return status.Errorf(codes.NotFound, "%s is not in the CAS; upload it first", what)
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, "request cancelled")
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, "request deadline exceeded")
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	return status.Errorf(codes.Internal, "%s: %v", what, err)
}

// requestFunction resolves a request's digest_function field. It returns
// UNKNOWN when the function is to be inferred from each hash's length.
func requestFunction(fn repb.DigestFunction_Value) (digest.Function, error) {
	f, ok, err := digest.ResolveFunction(fn)
	if err != nil {
		return 0, storeError(err, "")
	}
	if !ok {
		return repb.DigestFunction_UNKNOWN, nil
	}
	return f, nil
}

func checkInstance(name string) error {
	if err := digest.ValidateInstanceName(name); err != nil {
		return storeError(err, "")
	}
	return nil
}

// parseDigest validates a digest from a request, naming the field on error.
func parseDigest(fn digest.Function, d *repb.Digest, field string) (digest.Digest, error) {
	if d == nil {
		return digest.Digest{}, invalid("%s is missing", field)
	}
	out, err := digest.FromProto(fn, d)
	if err != nil {
		return digest.Digest{}, invalid("%s: %v", field, err)
	}
	return out, nil
}

// parseListDigest validates element i of a list of digests; fieldFormat
// names the field with a %d for i. The name is built only on error, since
// lists hold thousands of digests.
func parseListDigest(fn digest.Function, d *repb.Digest, fieldFormat string, i int) (digest.Digest, error) {
	if d != nil {
		if out, err := digest.FromProto(fn, d); err == nil {
			return out, nil
		}
	}
	return parseDigest(fn, d, fmt.Sprintf(fieldFormat, i))
}
