package execution

import (
	"context"
	"sync/atomic"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/grpc/metadata"

	"github.com/gantry-build/gantry/internal/auth"
	"github.com/gantry-build/gantry/internal/invocation"
	"github.com/gantry-build/gantry/internal/platform"
	"github.com/gantry-build/gantry/internal/protocol"
)

// keyConfig is how Execute derives an operation's invocation path.
type keyConfig struct {
	extractors []invocation.Extractor
	userHeader string
}

var defaultKeys = func() *keyConfig {
	ex, err := invocation.ParseAll(invocation.Default)
	if err != nil {
		panic(err)
	}
	return &keyConfig{extractors: ex, userHeader: invocation.DefaultUserHeader}
}()

// invocationKeys holds the current keyConfig; SetInvocationKeys swaps it.
type invocationKeys struct{ p atomic.Pointer[keyConfig] }

// SetInvocationKeys sets the fairness key extractors and the header the
// user key reads. New operations use them; queued ones keep their paths.
func (s *Service) SetInvocationKeys(ex []invocation.Extractor, userHeader string) {
	if userHeader == "" {
		userHeader = invocation.DefaultUserHeader
	}
	s.keys.p.Store(&keyConfig{extractors: ex, userHeader: userHeader})
}

// callKeys computes the invocation path of an Execute call, and returns
// the RequestMetadata it carries (nil: none), read once for both.
func (s *Service) callKeys(ctx context.Context, instance string, props platform.Properties) ([]string, *repb.RequestMetadata) {
	kc := s.keys.p.Load()
	if kc == nil {
		kc = defaultKeys
	}
	r := &invocation.Request{Instance: instance, UserHeader: kc.userHeader, Platform: props}
	md, _ := metadata.FromIncomingContext(ctx)
	r.FromHeaders(md)
	if len(kc.extractors) == 0 {
		return nil, r.Metadata
	}
	r.User = auth.User(ctx) // when authentication is on, not the header
	return invocation.Keys(kc.extractors, r), r.Metadata
}

// KeyNames returns the current invocation key extractors, as configured.
func (s *Service) KeyNames() []string {
	kc := s.keys.p.Load()
	if kc == nil {
		kc = defaultKeys
	}
	out := make([]string, len(kc.extractors))
	for i, e := range kc.extractors {
		out[i] = e.String()
	}
	return out
}

// buildName is the build name the call carries (protocol.BuildName), or "".
func buildName(ctx context.Context) string {
	md, _ := metadata.FromIncomingContext(ctx)
	return protocol.BuildName(md)
}

// requestMetadata is the RequestMetadata the call carries, or nil.
func requestMetadata(ctx context.Context) *repb.RequestMetadata {
	md, _ := metadata.FromIncomingContext(ctx)
	var r invocation.Request
	r.FromHeaders(md)
	return r.Metadata
}
