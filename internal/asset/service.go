package asset

import (
	"context"
	"errors"
	"fmt"
	"hash"
	"log/slog"
	"sync/atomic"
	"time"

	rapb "github.com/bazelbuild/remote-apis/build/bazel/remote/asset/v1"
	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"golang.org/x/sync/singleflight"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/gantry-build/gantry/internal/actioncache"
	"github.com/gantry-build/gantry/internal/blobstore"
	"github.com/gantry-build/gantry/internal/digest"
)

// Observer is told about every fetch from an origin, for metrics.
type Observer interface {
	// Fetched reports one answer from the index (result "cached"), one
	// miss on a URI only a Push can provide ("not_pushed"), or one
	// download from an origin ("fetched", or why it failed: see
	// resultLabel), with its bytes and duration. Callers that joined a
	// download in progress are not counted again.
	Fetched(kind Kind, result string, bytes int64, latency time.Duration)
}

// Options tune the service.
type Options struct {
	// Archive bounds unpacked archives.
	Archive Limits
	// MaxTimeout caps a request's own timeout; DefaultTimeout applies when
	// it gives none.
	MaxTimeout, DefaultTimeout time.Duration
	// TempDir holds large downloads on their way to the CAS ("": the
	// system's).
	TempDir string
	// Now is the clock (nil: time.Now).
	Now func() time.Time
	// Observer gets every fetch (nil: none).
	Observer Observer
	// Logger logs failed fetches (never headers).
	Logger *slog.Logger
	// Failures keeps the recent failed fetches for the status pages
	// (nil: none).
	Failures *FailureLog
}

// Service implements the Fetch and Push services of the Remote Asset API.
type Service struct {
	rapb.UnimplementedFetchServer
	rapb.UnimplementedPushServer
	cas     blobstore.Store
	index   *Index
	fetcher *Fetcher
	opts    Options
	flight  singleflight.Group
	// attached counts callers attached to a download, their own or a
	// shared one (for tests).
	attached atomic.Int64
}

var (
	_ rapb.FetchServer = (*Service)(nil)
	_ rapb.PushServer  = (*Service)(nil)
)

// New returns the service over the CAS cas, the ActionCache store ac
// (which keeps the index) and fetcher.
func New(cas blobstore.Store, ac actioncache.Store, fetcher *Fetcher, opts Options) *Service {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.DefaultTimeout <= 0 {
		opts.DefaultTimeout = 10 * time.Minute
	}
	if opts.MaxTimeout < opts.DefaultTimeout {
		opts.MaxTimeout = opts.DefaultTimeout
	}
	return &Service{cas: cas, index: NewIndex(ac, cas), fetcher: fetcher, opts: opts}
}

// Register adds Fetch and Push to reg.
func (s *Service) Register(reg grpc.ServiceRegistrar) {
	rapb.RegisterFetchServer(reg, s)
	rapb.RegisterPushServer(reg, s)
}

// request is what FetchBlob and FetchDirectory have in common.
type request struct {
	instance string
	fn       digest.Function
	uris     []string
	q        Qualifiers
	oldest   time.Time
}

func (s *Service) parse(instance string, fnValue repb.DigestFunction_Value, uris []string, qs []*rapb.Qualifier, oldest *timestamppb.Timestamp) (request, error) {
	if err := digest.ValidateInstanceName(instance); err != nil {
		return request{}, status.Error(codes.InvalidArgument, err.Error())
	}
	fn, ok, err := digest.ResolveFunction(fnValue)
	if err != nil {
		return request{}, status.Error(codes.InvalidArgument, err.Error())
	}
	if !ok {
		fn = digest.SHA256
	}
	if len(uris) == 0 {
		return request{}, status.Error(codes.InvalidArgument, "uris is empty; give at least one URI to fetch")
	}
	q, err := ParseQualifiers(qs, len(uris))
	if err != nil {
		return request{}, qualifierError(err)
	}
	r := request{instance: instance, fn: fn, uris: uris, q: q}
	if oldest != nil {
		r.oldest = oldest.AsTime()
	}
	return r, nil
}

// qualifierError is INVALID_ARGUMENT with the BadRequest detail the spec
// asks for.
func qualifierError(err error) error {
	st := status.New(codes.InvalidArgument, err.Error())
	var ue *UnsupportedError
	if errors.As(err, &ue) {
		br := &errdetails.BadRequest{}
		for _, n := range ue.Names {
			br.FieldViolations = append(br.FieldViolations, &errdetails.BadRequest_FieldViolation{Field: "qualifiers.name", Description: fmt.Sprintf("%q not supported", n)})
		}
		if d, derr := st.WithDetails(br); derr == nil {
			st = d
		}
	}
	return st.Err()
}

func (s *Service) timeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if d <= 0 {
		d = s.opts.DefaultTimeout
	}
	return context.WithTimeout(ctx, min(d, s.opts.MaxTimeout))
}

// FetchBlob implements rapb.FetchServer. Failures to fetch come back as
// gRPC errors, not in the response's status field: Bazel's downloader
// reads the digest without looking at that field, so only an error
// reaches the user (see docs/ARCHITECTURE.md).
func (s *Service) FetchBlob(ctx context.Context, req *rapb.FetchBlobRequest) (*rapb.FetchBlobResponse, error) {
	r, err := s.parse(req.InstanceName, req.DigestFunction, req.Uris, req.Qualifiers, req.OldestContentAccepted)
	if err != nil {
		return nil, err
	}
	ctx, cancel := s.timeout(ctx, req.Timeout.AsDuration())
	defer cancel()
	uri, e, err := s.fetch(ctx, r, Blob)
	if err != nil {
		return nil, err
	}
	return &rapb.FetchBlobResponse{Status: nil, Uri: uri, Qualifiers: r.q.Identifying(), ExpiresAt: expires(e), BlobDigest: e.Digest.Proto(), DigestFunction: r.fn}, nil
}

// FetchDirectory implements rapb.FetchServer: a pushed directory is
// answered from the index whatever its URI; otherwise the archive is
// fetched as a blob would be, then unpacked into Directory messages.
func (s *Service) FetchDirectory(ctx context.Context, req *rapb.FetchDirectoryRequest) (*rapb.FetchDirectoryResponse, error) {
	r, err := s.parse(req.InstanceName, req.DigestFunction, req.Uris, req.Qualifiers, req.OldestContentAccepted)
	if err != nil {
		return nil, err
	}
	ctx, cancel := s.timeout(ctx, req.Timeout.AsDuration())
	defer cancel()
	uri, e, err := s.fetch(ctx, r, Directory)
	if err != nil {
		return nil, err
	}
	return &rapb.FetchDirectoryResponse{Uri: uri, Qualifiers: r.q.Identifying(), ExpiresAt: expires(e), RootDirectoryDigest: e.Digest.Proto(), DigestFunction: r.fn}, nil
}

func expires(e Entry) *timestamppb.Timestamp {
	if e.ExpireAt.IsZero() {
		return nil
	}
	return timestamppb.New(e.ExpireAt)
}

// fetch answers from the index if it can, else downloads the URIs it can
// in order. A URI Gantry cannot download (not http or https: urn:,
// file:...) is only ever answered from the index, where a Push put it, so
// a miss on it is NOT_FOUND (remote_asset.proto: "a minimal compliant Fetch
// implementation may support only Push'd content and return NOT_FOUND").
// The archive format of a directory matters only for a download.
func (s *Service) fetch(ctx context.Context, r request, kind Kind) (string, Entry, error) {
	ident := r.q.Identifying()
	now := s.opts.Now()
	for _, u := range r.uris {
		e, ok, err := s.index.Lookup(ctx, r.instance, kind, r.fn, u, ident, r.oldest, now)
		if err != nil {
			return "", Entry{}, status.Errorf(codes.Unavailable, "reading the remote asset index: %v", err)
		}
		if ok {
			s.observe(kind, "cached", 0, 0)
			return u, e, nil
		}
	}
	var errs []error
	for i, u := range r.uris {
		if !downloadable(u) {
			s.observe(kind, "not_pushed", 0, 0)
			errs = append(errs, &notPushedError{kind: kind, uri: u})
			continue
		}
		if kind == Directory {
			if _, err := DetectFormat(redact(u), r.q.ResourceType); err != nil {
				errs = append(errs, status.Error(codes.InvalidArgument, err.Error()))
				continue
			}
		}
		d, err := s.downloadShared(ctx, r, i, kind)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		e := Entry{Digest: d, Fetched: s.opts.Now()}
		// With a verified checksum every URI is a mirror of the same
		// content; without, only the one that answered is known.
		recordFor := []string{u}
		if len(r.q.Checksums) > 0 {
			recordFor = r.uris
		}
		for _, ru := range recordFor {
			if err := s.index.Record(ctx, r.instance, kind, ru, ident, e); err != nil {
				s.opts.Logger.Warn("recording a fetched asset in the index failed", "instance", r.instance, "err", err)
			}
		}
		return u, e, nil
	}
	return "", Entry{}, fetchFailed(errs)
}

// notPushedError is a miss on a URI Gantry cannot download: only a Push
// could have put it in the index.
type notPushedError struct {
	kind Kind
	uri  string
}

func (e *notPushedError) Error() string {
	push := "PushBlob"
	if e.kind == Directory {
		push = "PushDirectory"
	}
	return fmt.Sprintf("%s was never pushed as a %s with these qualifiers (or its push expired, is older than oldest_content_accepted, or its content left the CAS), and Gantry downloads only http and https URLs; push it first (%s)", redact(e.uri), e.kind, push)
}

// fetchFailed is the error of a fetch none of whose URIs worked: the
// code of the last download that failed (NOT_FOUND when every URI was
// one that can only be pushed), the messages of all.
func fetchFailed(errs []error) error {
	last := errs[len(errs)-1]
	code := codes.NotFound
	for i := len(errs) - 1; i >= 0; i-- {
		var np *notPushedError
		if !errors.As(errs[i], &np) {
			code = errorCode(errs[i])
			break
		}
	}
	msg := last.Error()
	if st, ok := status.FromError(last); ok {
		msg = st.Message()
	}
	for i := len(errs) - 2; i >= 0; i-- {
		m := errs[i].Error()
		if st, ok := status.FromError(errs[i]); ok {
			m = st.Message()
		}
		msg = m + "; " + msg
	}
	return status.Error(code, msg)
}

// errorCode is the gRPC code a client gets for err, a failed download.
func errorCode(err error) codes.Code {
	var fe *FetchError
	var ce *ChecksumError
	switch {
	case errors.As(err, &ce):
		return ce.Code
	case errors.As(err, &fe):
		return fe.Code
	}
	if st, ok := status.FromError(err); ok {
		return st.Code()
	}
	return codes.Unavailable
}

// resultLabel names why a fetch failed, for the metrics.
func resultLabel(err error) string {
	var ce *ChecksumError
	var fe *FetchError
	code := status.Code(err)
	switch {
	case errors.As(err, &ce):
		return "checksum_mismatch"
	case errors.As(err, &fe):
		code = fe.Code
	}
	switch code {
	case codes.NotFound:
		return "not_found"
	case codes.PermissionDenied:
		return "permission_denied"
	case codes.DeadlineExceeded:
		return "deadline_exceeded"
	case codes.ResourceExhausted:
		return "too_large"
	case codes.FailedPrecondition:
		return "bad_archive"
	case codes.InvalidArgument:
		return "invalid"
	}
	return "unavailable"
}

func (s *Service) observe(kind Kind, result string, n int64, d time.Duration) {
	if s.opts.Observer != nil {
		s.opts.Observer.Fetched(kind, result, n, d)
	}
}

// downloadShared is download, shared by the callers asking for the same
// asset at the same time: one download from the origin, whose result each
// would get from the index right after anyway. The download runs on even
// if the caller that started it goes away, until the caller's deadline.
func (s *Service) downloadShared(ctx context.Context, r request, i int, kind Kind) (digest.Digest, error) {
	k := key(kind, r.fn, r.uris[i], r.q.Identifying())
	flightKey := r.instance + "\x00" + k.Hash
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(s.opts.DefaultTimeout)
	}
	ch := s.flight.DoChan(flightKey, func() (any, error) {
		dctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), deadline)
		defer cancel()
		start := time.Now()
		d, n, err := s.download(dctx, r, i, kind)
		if err != nil {
			s.observe(kind, resultLabel(err), n, time.Since(start))
			s.opts.Logger.Warn("remote asset fetch failed", "instance", r.instance, "kind", kind.String(), "err", err)
			if s.opts.Failures != nil {
				s.opts.Failures.Add(Failure{At: time.Now(), Instance: r.instance, Kind: kind.String(), URI: redact(r.uris[i]), Err: err.Error()})
			}
			return nil, err
		}
		s.observe(kind, "fetched", n, time.Since(start))
		return d, nil
	})
	s.attached.Add(1)
	select {
	case res := <-ch:
		if res.Err != nil {
			return digest.Digest{}, res.Err
		}
		return res.Val.(digest.Digest), nil
	case <-ctx.Done():
		return digest.Digest{}, status.FromContextError(ctx.Err()).Err()
	}
}

// download fetches r.uris[i], verifies its checksums and stores it (a
// blob, or an unpacked archive) in the CAS.
func (s *Service) download(ctx context.Context, r request, i int, kind Kind) (digest.Digest, int64, error) {
	uri := r.uris[i]
	hashes := make([]hash.Hash, len(r.q.Checksums))
	for j, c := range r.q.Checksums {
		hashes[j] = c.newHash()
	}
	sp := newSpool(s.opts.TempDir, r.fn, hashes...)
	defer sp.Close()
	n, err := s.fetcher.Fetch(ctx, uri, r.q.Header(i, uri), sp)
	if err != nil {
		return digest.Digest{}, n, err
	}
	if err := verify(redact(uri), r.q.Checksums, hashes); err != nil {
		return digest.Digest{}, n, err
	}
	if kind == Blob {
		d, err := sp.Store(ctx, s.cas)
		if err != nil {
			return digest.Digest{}, n, status.Errorf(codes.Unavailable, "storing %s in the CAS: %v", redact(uri), err)
		}
		return d, n, nil
	}
	format, err := DetectFormat(uri, r.q.ResourceType)
	if err != nil {
		return digest.Digest{}, n, status.Error(codes.InvalidArgument, err.Error())
	}
	d, err := Unpack(ctx, sp.ReaderAt(), sp.Size(), format, s.opts.Archive, s.cas, r.fn, s.opts.TempDir)
	var ae *ArchiveError
	switch {
	case errors.As(err, &ae):
		return digest.Digest{}, n, status.Errorf(codes.FailedPrecondition, "%s: %v", redact(uri), ae)
	case err != nil:
		return digest.Digest{}, n, status.Errorf(codes.Unavailable, "unpacking %s into the CAS: %v", redact(uri), err)
	}
	return d, n, nil
}
