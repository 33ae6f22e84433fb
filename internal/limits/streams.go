package limits

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/gantry-build/gantry/internal/auth"
)

// Config keys, for messages.
const (
	streamsKey = "grpc.max_streams_per_identity"
	uploadsKey = "grpc.max_uploads_per_identity"
)

// StreamLimits are the bounds per caller; 0 is no bound.
type StreamLimits struct {
	// MaxStreams bounds the client streams (see Streams) a caller has
	// open at once.
	MaxStreams int
	// MaxUploads bounds its ByteStream Write streams, which count as
	// streams too.
	MaxUploads int
}

// Kind is what a bound counts: "stream" or "upload".
type Kind string

// Kinds.
const (
	KindStream Kind = "stream"
	KindUpload Kind = "upload"
)

// Observer hears every stream refused.
type Observer interface {
	Refused(Kind)
}

// Counts are the streams open now, for the metrics.
type Counts struct {
	// Streams and Uploads are over every caller.
	Streams, Uploads int
	// BusiestStreams and BusiestUploads are the largest of one caller.
	BusiestStreams, BusiestUploads int
}

// Streams bounds, per caller, the client streams open at once: every
// streaming call of the REAPI services (ByteStream Read and Write,
// Execute, WaitExecution, GetTree) counts against MaxStreams, and a
// ByteStream Write (an upload) against MaxUploads too. A call over a
// bound fails at once with RESOURCE_EXHAUSTED, which clients such as
// Bazel retry; the slot is given back when the call ends, however it
// ends. The worker protocol's streams are not counted (one per worker),
// nor health and reflection.
//
// The caller is the authenticated identity (auth.FromContext), so the
// interceptor runs after authentication. A caller without one (auth off,
// or auth.allow_anonymous) is counted by the IP address it connects
// from; on a scheduler node that is the frontend's address, unless auth
// is on and the frontend forwards its callers' identities.
type Streams struct {
	max StreamLimits
	obs Observer

	mu      sync.Mutex
	callers map[callerKey]*callerCount
	total   callerCount
}

type callerCount struct{ streams, uploads int }

// NewStreams returns the bounds max, reporting refusals to obs (nil:
// none).
func NewStreams(max StreamLimits, obs Observer) *Streams {
	return &Streams{max: max, obs: obs, callers: map[callerKey]*callerCount{}}
}

// Counts returns the streams open now.
func (s *Streams) Counts() Counts {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := Counts{Streams: s.total.streams, Uploads: s.total.uploads}
	for _, n := range s.callers {
		c.BusiestStreams = max(c.BusiestStreams, n.streams)
		c.BusiestUploads = max(c.BusiestUploads, n.uploads)
	}
	return c
}

// counted returns whether fullMethod's streams count, and as uploads.
func counted(fullMethod string) (stream, upload bool) {
	switch {
	case fullMethod == "/google.bytestream.ByteStream/Write":
		return true, true
	case strings.HasPrefix(fullMethod, "/google.bytestream.ByteStream/"),
		strings.HasPrefix(fullMethod, "/build.bazel.remote.execution.v2."):
		return true, false
	}
	return false, false
}

// Stream is the stream server interceptor.
func (s *Streams) Stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	isStream, isUpload := counted(info.FullMethod)
	if !isStream {
		return handler(srv, ss)
	}
	who := caller(ss.Context())
	if err := s.acquire(who, isUpload); err != nil {
		return err
	}
	defer s.release(who, isUpload)
	return handler(srv, ss)
}

func (s *Streams) acquire(who callerKey, upload bool) error {
	s.mu.Lock()
	n := s.callers[who]
	if n == nil {
		n = &callerCount{}
		s.callers[who] = n
	}
	var refused Kind
	switch {
	case upload && s.max.MaxUploads > 0 && n.uploads >= s.max.MaxUploads:
		refused = KindUpload
	case s.max.MaxStreams > 0 && n.streams >= s.max.MaxStreams:
		refused = KindStream
	default:
		n.streams++
		s.total.streams++
		if upload {
			n.uploads++
			s.total.uploads++
		}
	}
	if n.streams == 0 {
		delete(s.callers, who) // refused its first stream: keep no entry
	}
	s.mu.Unlock()
	if refused == "" {
		return nil
	}
	if s.obs != nil {
		s.obs.Refused(refused)
	}
	return s.refusal(who, refused)
}

func (s *Streams) release(who callerKey, upload bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.callers[who]
	n.streams--
	s.total.streams--
	if upload {
		n.uploads--
		s.total.uploads--
	}
	if n.streams == 0 {
		delete(s.callers, who)
	}
}

func (s *Streams) refusal(who callerKey, k Kind) error {
	if k == KindUpload {
		return status.Errorf(codes.ResourceExhausted, "%s already has %d uploads (ByteStream Write streams) open, the most one caller may have at once (%s: %d); retry when some have finished, or ask the server's operator to raise %s", who, s.max.MaxUploads, uploadsKey, s.max.MaxUploads, uploadsKey)
	}
	return status.Errorf(codes.ResourceExhausted, "%s already has %d streams (ByteStream, Execute, WaitExecution, GetTree) open, the most one caller may have at once (%s: %d); retry when some have finished, or ask the server's operator to raise %s", who, s.max.MaxStreams, streamsKey, s.max.MaxStreams, streamsKey)
}

// callerKey identifies a caller for counting, without allocating: its
// identity, or for a caller without one, the IP address it connects from
// (or, of a connection that is not TCP, its address as a string).
type callerKey struct {
	source  auth.Source
	subject string
	ip      netip.Addr
}

func caller(ctx context.Context) callerKey {
	if id := auth.FromContext(ctx); id != nil && id.Source != auth.SourceAnonymous {
		return callerKey{source: id.Source, subject: id.Subject}
	}
	k := callerKey{source: auth.SourceAnonymous}
	p, ok := peer.FromContext(ctx)
	switch {
	case !ok || p.Addr == nil:
	case isTCP(p.Addr):
		k.ip = p.Addr.(*net.TCPAddr).AddrPort().Addr().Unmap()
	default:
		k.subject = p.Addr.String()
	}
	return k
}

func isTCP(a net.Addr) bool {
	_, ok := a.(*net.TCPAddr)
	return ok
}

// String names the caller in a refusal.
func (k callerKey) String() string {
	switch {
	case k.source != auth.SourceAnonymous:
		return (&auth.Identity{Source: k.source, Subject: k.subject}).String()
	case k.ip.IsValid():
		return "the anonymous caller at " + k.ip.String()
	case k.subject != "":
		return "the anonymous caller at " + k.subject
	}
	return "an anonymous caller"
}
