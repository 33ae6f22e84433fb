// Package auth authenticates gRPC and HTTP callers (bearer tokens from a
// file, JWTs, client certificates) and authorizes each call by a policy
// that grants permissions on instance-name patterns to identities.
//
// Every gRPC method the server offers maps to one permission (methods.go);
// a method without a mapping is denied. The check runs on every call, so
// the policy is compiled once (and again on reload) into a form that is
// matched without allocating.
package auth

import (
	"context"
	"slices"
	"time"
)

// Source says how an identity was established.
type Source uint8

// Identity sources.
const (
	SourceAnonymous Source = iota
	SourceToken            // a static token from auth.tokens_file
	SourceJWT              // a JSON Web Token verified with auth.jwt keys
	SourceCert             // a verified client certificate
	SourceInternal         // the server itself (its embedded worker)
)

func (s Source) String() string {
	switch s {
	case SourceToken:
		return "token"
	case SourceJWT:
		return "jwt"
	case SourceCert:
		return "cert"
	case SourceInternal:
		return "internal"
	}
	return "anonymous"
}

// Identity is an authenticated caller.
type Identity struct {
	// Subject is the caller's main name: the token's subject, the JWT's
	// subject claim, or the certificate's first configured name.
	Subject string
	// Names are every name the caller goes by (a certificate may carry a
	// CN and several SANs); Subject is the first.
	Names []string
	// Groups come from the tokens file or the JWT's groups claim.
	Groups []string
	Source Source
	// Expires is when the credential stops being valid (a JWT's exp);
	// zero when it does not expire. A browser session ends then at the
	// latest.
	Expires time.Time
}

// Anonymous is the identity of a caller without credentials when
// auth.allow_anonymous is set.
var Anonymous = &Identity{Subject: "anonymous", Source: SourceAnonymous}

// Internal is the identity of the server's own embedded worker.
var Internal = &Identity{Subject: "gantry-internal", Names: []string{"gantry-internal"}, Source: SourceInternal}

// String is how denials and logs name the identity.
func (id *Identity) String() string {
	if id == nil {
		return "nobody"
	}
	if id.Source == SourceAnonymous {
		return "anonymous (no credentials)"
	}
	return id.Source.String() + ":" + id.Subject
}

func (id *Identity) hasName(n string) bool  { return slices.Contains(id.Names, n) }
func (id *Identity) hasGroup(g string) bool { return slices.Contains(id.Groups, g) }

type ctxKey struct{}

// WithIdentity returns ctx carrying id.
func WithIdentity(ctx context.Context, id *Identity) context.Context {
	return context.WithValue(ctx, ctxKey{}, id)
}

// FromContext returns the caller's identity, or nil when authentication
// is off.
func FromContext(ctx context.Context) *Identity {
	id, _ := ctx.Value(ctxKey{}).(*Identity)
	return id
}

// User is the name the fairness key "user" uses for the caller: the
// authenticated subject, or "" when authentication is off (the key then
// reads scheduler.fairness.user_header).
func User(ctx context.Context) string {
	if id := FromContext(ctx); id != nil {
		return id.Subject
	}
	return ""
}
