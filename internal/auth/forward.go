package auth

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// Forwarded callers. A frontend node authenticates its callers itself
// and forwards the calls of the scheduler's services (Execution,
// Operations, the worker protocol, Admin) to the leading scheduler,
// which authorizes them: only it can read their messages and knows the
// operations. The frontend sends the caller's identity in the
// ForwardedCallerHeader of the forwarded call, on a connection on which
// it authenticates as itself (a client certificate or a token). A
// scheduler believes the header only from the identities it trusts as
// frontends (Settings.Frontends, from cluster.frontend_identities), and
// refuses it from anyone else; a trusted frontend's call without the
// header is refused too, so that a frontend with authentication off
// cannot lend its own permissions to every caller.

// ForwardedCallerHeader carries the caller of a forwarded call (a
// binary header: gRPC sends its value base64-encoded).
const ForwardedCallerHeader = "gantry-forwarded-caller-bin"

// forwarded is an Identity on the wire.
type forwarded struct {
	Subject string   `json:"subject"`
	Names   []string `json:"names,omitempty"`
	Groups  []string `json:"groups,omitempty"`
	Source  string   `json:"source"`
}

// EncodeForwarded is id as the value of ForwardedCallerHeader.
func EncodeForwarded(id *Identity) string {
	b, _ := json.Marshal(forwarded{Subject: id.Subject, Names: id.Names, Groups: id.Groups, Source: id.Source.String()})
	return string(b)
}

// decodeForwarded reads a ForwardedCallerHeader value.
func decodeForwarded(v string) (*Identity, error) {
	var f forwarded
	if err := json.Unmarshal([]byte(v), &f); err != nil {
		return nil, fmt.Errorf("it is not an encoded identity: %v", err)
	}
	switch f.Source {
	case "anonymous":
		return Anonymous, nil
	case "internal":
		// The frontend's own embedded worker.
		return Internal, nil
	}
	id := &Identity{Subject: f.Subject, Names: f.Names, Groups: f.Groups}
	switch f.Source {
	case "token":
		id.Source = SourceToken
	case "jwt":
		id.Source = SourceJWT
	case "cert":
		id.Source = SourceCert
	default:
		return nil, fmt.Errorf("its source %q is not token, jwt, cert, anonymous or internal", f.Source)
	}
	if id.Subject == "" {
		return nil, fmt.Errorf("it names no subject")
	}
	if !slices.Contains(id.Names, id.Subject) {
		id.Names = append(id.Names, id.Subject)
	}
	return id, nil
}

// IdentitySet is a compiled list of identities, spelled as in a policy
// rule (NAME, token:NAME, jwt:NAME, cert:NAME, group:NAME).
type IdentitySet struct{ ms []idMatcher }

// CompileIdentities compiles the identities of the key at path. "*" and
// "anonymous" are refused: the set names callers trusted with more than
// the policy gives them.
func CompileIdentities(ids []string, path string) (*IdentitySet, error) {
	s := &IdentitySet{}
	for i, spelling := range ids {
		if spelling == "*" || spelling == "anonymous" {
			return nil, fmt.Errorf("%s[%d]: %q would trust every caller; name the frontends, e.g. cert:frontend-1.example.com or token:frontend", path, i, spelling)
		}
		m, err := parseIdentity(spelling)
		if err != nil {
			return nil, fmt.Errorf("%s[%d]: %v", path, i, err)
		}
		s.ms = append(s.ms, m)
	}
	return s, nil
}

// Contains reports whether id is in the set.
func (s *IdentitySet) Contains(id *Identity) bool {
	if s == nil || id == nil || id.Source == SourceInternal {
		return false
	}
	for _, m := range s.ms {
		if m.match(id) {
			return true
		}
	}
	return false
}

// forwardedCaller returns the caller a trusted frontend forwards a call
// for, when peer (who made the connection) is one. Without trusted
// frontends it returns peer: the header means nothing then.
func (s *Settings) forwardedCaller(ctx context.Context, peer *Identity) (*Identity, error) {
	if s.Frontends == nil {
		return peer, nil
	}
	vals := metadata.ValueFromIncomingContext(ctx, ForwardedCallerHeader)
	frontend := s.Frontends.Contains(peer)
	switch {
	case len(vals) == 0 && !frontend:
		return peer, nil
	case len(vals) == 0:
		return nil, status.Errorf(codes.PermissionDenied, "%s is a frontend (cluster.frontend_identities) but forwarded a call without its caller's identity; turn auth on on every frontend, with the same auth section as the schedulers", peer)
	case !frontend:
		return nil, status.Errorf(codes.PermissionDenied, "%s sent a forwarded caller's identity (%s) but is not one of the frontends this scheduler trusts; call through a frontend, or list the frontend's identity in cluster.frontend_identities of the schedulers", peer, ForwardedCallerHeader)
	case len(vals) > 1:
		return nil, errUnauthenticated("frontend %s forwarded %d caller identities; a forwarded call carries exactly one", peer, len(vals))
	}
	id, err := decodeForwarded(vals[0])
	if err != nil {
		return nil, errUnauthenticated("frontend %s forwarded a caller's identity this scheduler cannot read (%v); run the same Gantry version on every node", peer, err)
	}
	if id.Source == SourceAnonymous && !s.AllowAnonymous {
		return nil, errUnauthenticated("frontend %s forwarded a caller without credentials, and this scheduler does not allow anonymous callers; give every node the same auth section (auth.allow_anonymous)", peer)
	}
	return id, nil
}

// AuthenticateStream authenticates a streaming call and passes it on
// with the caller's identity in its context, checking only that the
// caller holds the method's permission on some instance. A frontend
// node uses it for the calls it forwards to the leading scheduler, which
// authorizes them fully: the frontend neither decodes their messages nor
// knows the operations.
func (a *Authorizer) AuthenticateStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	m, ok := lookupMethod(info.FullMethod)
	if !ok {
		return unknownMethod(info.FullMethod)
	}
	if m.from == open {
		return handler(srv, ss)
	}
	id, err := a.authenticate(ss.Context())
	if err != nil {
		return err
	}
	if !a.settings().Policy.AllowedAnywhere(id, m.need) {
		return denied(id, m.need, "", info.FullMethod, "any instance")
	}
	return handler(srv, &authStream{ServerStream: ss, ctx: WithIdentity(ss.Context(), id), a: a, id: id, m: m, method: info.FullMethod, checked: true})
}
