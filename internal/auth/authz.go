package auth

import (
	"context"
	"crypto/x509"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	workerpb "github.com/gantry-build/gantry/api/worker/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/gantry-build/gantry/internal/digest"
	"github.com/gantry-build/gantry/internal/logstream"
)

// Settings are the parts of authentication and authorization that a
// reload can replace.
type Settings struct {
	// AllowAnonymous lets callers without credentials in as Anonymous.
	AllowAnonymous bool
	// Tokens are the static bearer tokens; nil for none.
	Tokens *Tokens
	// JWT verifies JSON Web Tokens; nil for none.
	JWT *JWTVerifier
	// CertNames are the certificate fields that name a client, in order:
	// "cn", "dns", "uri", "email". Empty means no certificate identities.
	CertNames []string
	// Policy grants the permissions; nil denies everything.
	Policy *Policy
	// Frontends are the identities trusted to forward calls for the
	// callers they authenticated (a scheduler node's
	// cluster.frontend_identities; forward.go). nil: none.
	Frontends *IdentitySet
	// Schedulers are the identities of the scheduler nodes (a frontend
	// node's cluster.scheduler_identities): only their calls are counted
	// apart in the CAS metrics (IsScheduler). nil: none.
	Schedulers *IdentitySet
}

// Authorizer authenticates callers and checks their permissions.
type Authorizer struct {
	s   atomic.Pointer[Settings]
	ops Operations
	// workers binds worker ids to the identity that registered them
	// (worker id -> Identity.String()), so that one worker cannot poll,
	// heartbeat or complete as another.
	workers sync.Map
}

// Operations tells which instance an operation belongs to, to authorize
// the calls that name an operation (WaitExecution, the Operations
// service, KillOperation).
type Operations interface {
	// OperationInstance returns the instance of the operation name; ok
	// is false for an unknown operation.
	OperationInstance(name string) (instance string, ok bool)
}

// New returns an Authorizer with settings s; ops finds the instance of
// an operation (nil in a process that runs no scheduler: every operation
// is unknown there).
func New(s Settings, ops Operations) *Authorizer {
	a := &Authorizer{ops: ops}
	a.Update(s)
	return a
}

// Update replaces the settings; calls in flight keep the old ones.
func (a *Authorizer) Update(s Settings) {
	if s.Policy == nil {
		s.Policy = &Policy{}
	}
	a.s.Store(&s)
}

func (a *Authorizer) settings() *Settings { return a.s.Load() }

// Policy is the policy in force (the last Update's).
func (a *Authorizer) Policy() *Policy { return a.settings().Policy }

// credentialsHint is what an unauthenticated caller is told to send.
const credentialsHint = "send a bearer token in the authorization header (\"authorization: Bearer TOKEN\"; gantry commands: --token-file) or connect with a client certificate (--tls-cert, --tls-key)"

// errUnauthenticated builds the UNAUTHENTICATED status.
func errUnauthenticated(format string, args ...any) error {
	return status.Errorf(codes.Unauthenticated, format, args...)
}

// bearer extracts the token of an "authorization: Bearer X" value.
func bearer(values []string) (token string, present bool, err error) {
	if len(values) == 0 {
		return "", false, nil
	}
	if len(values) > 1 {
		return "", true, errUnauthenticated("%d authorization headers were sent; send exactly one, \"authorization: Bearer TOKEN\"", len(values))
	}
	scheme, tok, ok := strings.Cut(strings.TrimSpace(values[0]), " ")
	if !ok || !strings.EqualFold(scheme, "bearer") || strings.TrimSpace(tok) == "" {
		return "", true, errUnauthenticated("the authorization header is not \"Bearer TOKEN\"; %s", credentialsHint)
	}
	return strings.TrimSpace(tok), true, nil
}

// identifyToken resolves a bearer token.
func (s *Settings) identifyToken(tok string) (*Identity, error) {
	if id := s.Tokens.Lookup(tok); id != nil {
		return id, nil
	}
	if s.JWT != nil && LooksLikeJWT(tok) {
		id, err := s.JWT.Verify(tok)
		if err != nil {
			return nil, errUnauthenticated("%v", err)
		}
		return id, nil
	}
	return nil, errUnauthenticated("the bearer token is not known to this server (not in auth.tokens_file%s); check the token file you pass, or ask for a new token", map[bool]string{true: ", not a valid JWT", false: ""}[s.JWT != nil])
}

// certIdentity names the client of a verified certificate chain.
func (s *Settings) certIdentity(chains [][]*x509.Certificate) (*Identity, error) {
	if len(s.CertNames) == 0 || len(chains) == 0 || len(chains[0]) == 0 {
		return nil, nil
	}
	c := chains[0][0]
	id := &Identity{Source: SourceCert}
	for _, f := range s.CertNames {
		switch f {
		case "cn":
			if c.Subject.CommonName != "" {
				id.Names = append(id.Names, c.Subject.CommonName)
			}
		case "dns":
			id.Names = append(id.Names, c.DNSNames...)
		case "uri":
			for _, u := range c.URIs {
				id.Names = append(id.Names, u.String())
			}
		case "email":
			id.Names = append(id.Names, c.EmailAddresses...)
		}
	}
	if len(id.Names) == 0 {
		return nil, errUnauthenticated("the client certificate carries none of the names this server reads (%s); issue it with one of them", strings.Join(s.CertNames, ", "))
	}
	id.Subject = id.Names[0]
	return id, nil
}

// IsScheduler reports whether the caller of a gRPC call authenticates
// as one of Settings.Schedulers. It authenticates the call itself, so it
// can run before the authorization interceptors; callers ask only for
// calls that claim to be a scheduler's, to keep the cost off the rest.
func (a *Authorizer) IsScheduler(ctx context.Context) bool {
	s := a.settings()
	if s.Schedulers == nil {
		return false
	}
	id, err := a.authenticatePeer(ctx)
	return err == nil && s.Schedulers.Contains(id)
}

// authenticate finds the caller of a gRPC call: the peer
// (authenticatePeer), or the caller a trusted frontend forwards the call
// for.
func (a *Authorizer) authenticate(ctx context.Context) (*Identity, error) {
	id, err := a.authenticatePeer(ctx)
	if err != nil {
		return nil, err
	}
	return a.settings().forwardedCaller(ctx, id)
}

// authenticatePeer finds who makes a gRPC call: the internal identity on
// the in-process connection, else a bearer token, else a verified client
// certificate, else Anonymous when allowed.
func (a *Authorizer) authenticatePeer(ctx context.Context) (*Identity, error) {
	p, _ := peer.FromContext(ctx)
	if p != nil {
		if _, ok := p.AuthInfo.(internalAuthInfo); ok {
			return Internal, nil
		}
	}
	s := a.settings()
	// Not FromIncomingContext: that copies every header of the call.
	tok, present, err := bearer(metadata.ValueFromIncomingContext(ctx, "authorization"))
	if err != nil {
		return nil, err
	}
	if present {
		return s.identifyToken(tok)
	}
	if p != nil {
		if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok {
			id, err := s.certIdentity(ti.State.VerifiedChains)
			if err != nil || id != nil {
				return id, err
			}
		}
	}
	if s.AllowAnonymous {
		return Anonymous, nil
	}
	return nil, errUnauthenticated("this server requires authentication and the call carried no credentials; %s", credentialsHint)
}

func denied(id *Identity, need Perm, instance, fullMethod, what string) error {
	return status.Errorf(codes.PermissionDenied, "%s lacks permission %s on %s for %s; ask the server's administrator to grant it in auth.policy", id, need, what, fullMethod)
}

func onInstance(instance string) string { return fmt.Sprintf("instance %q", instance) }

// authorize checks one request message against fullMethod's needs: on
// every instance, on any, or on the instance the request names (in a
// field, a resource name, the operation or the worker's registration).
func (a *Authorizer) authorize(id *Identity, m method, fullMethod string, req any) error {
	p := a.settings().Policy
	switch m.from {
	case fromGlobal:
		return everyInstance(p, id, m.need, fullMethod)
	case fromAny:
		return anyInstance(p, id, m.need, fullMethod)
	}
	if req == nil {
		return nil // checked when the first message arrives
	}
	switch m.from {
	case fromField, fromFieldOrGlobal:
		return a.authorizeField(p, id, m, fullMethod, req)
	case fromReadResource, fromWriteResource:
		return a.authorizeResource(p, id, m, fullMethod, req)
	case fromOperation:
		return a.authorizeOperation(p, id, m, fullMethod, req)
	case fromWorkerInstances:
		return a.authorizeWorkerInstances(p, id, m, fullMethod, req)
	}
	return nil
}

// everyInstance allows id need on every instance (a rule for "*").
func everyInstance(p *Policy, id *Identity, need Perm, fullMethod string) error {
	if !p.Allowed(id, need, "", true) {
		return denied(id, need, "", fullMethod, "every instance (a rule with instances: [\"*\"])")
	}
	return nil
}

// anyInstance allows id need on some instance.
func anyInstance(p *Policy, id *Identity, need Perm, fullMethod string) error {
	if !p.AllowedAnywhere(id, need) {
		return denied(id, need, "", fullMethod, "any instance")
	}
	return nil
}

// authorizeField checks the instance named by the request's
// instance_name; a request without one needs every instance when the
// method allows that (fromFieldOrGlobal), and is a bug otherwise.
func (a *Authorizer) authorizeField(p *Policy, id *Identity, m method, fullMethod string, req any) error {
	r, ok := req.(interface{ GetInstanceName() string })
	if parent, isCreate := logStreamParent(req); isCreate && fullMethod == logStreamCreate {
		return a.check(p, id, m.need, parent, fullMethod, "")
	}
	if !ok {
		if m.from == fromFieldOrGlobal {
			return everyInstance(p, id, m.need, fullMethod)
		}
		return status.Errorf(codes.Internal, "%s: request without an instance name; this is a bug in Gantry's authorization table", fullMethod)
	}
	return a.check(p, id, m.need, r.GetInstanceName(), fullMethod, "")
}

// authorizeResource checks the instance of a ByteStream resource name:
// ReadRequest, WriteRequest (also the frontend's own decoding of it) and
// QueryWriteStatusRequest.
func (a *Authorizer) authorizeResource(p *Policy, id *Identity, m method, fullMethod string, req any) error {
	var name string
	if r, ok := req.(interface{ GetResourceName() string }); ok {
		name = r.GetResourceName()
	}
	if logstream.Is(name) {
		return a.authorizeLogStream(p, id, m, fullMethod, name)
	}
	var res digest.Resource
	var err error
	if m.from == fromReadResource {
		res, err = digest.ParseReadResource(name)
	} else {
		res, err = digest.ParseWriteResource(name)
	}
	if err != nil {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	return a.check(p, id, m.need, res.Instance, fullMethod, "")
}

// authorizeOperation checks the instance of the operation the request
// names. An unknown operation is let through to callers with the
// permission somewhere: the service answers NOT_FOUND.
func (a *Authorizer) authorizeOperation(p *Policy, id *Identity, m method, fullMethod string, req any) error {
	r, _ := req.(interface{ GetName() string })
	name := ""
	if r != nil {
		name = r.GetName()
	}
	inst, ok := "", false
	if a.ops != nil {
		inst, ok = a.ops.OperationInstance(name)
	}
	if !ok {
		return anyInstance(p, id, m.need, fullMethod)
	}
	return a.check(p, id, m.need, inst, fullMethod, fmt.Sprintf(" (operation %q)", name))
}

// authorizeWorkerInstances checks every instance a registering worker
// serves; one that serves all ("*", or none listed) needs every
// instance.
func (a *Authorizer) authorizeWorkerInstances(p *Policy, id *Identity, m method, fullMethod string, req any) error {
	r, _ := req.(*workerpb.RegisterRequest)
	insts := r.GetInstances()
	if len(insts) == 0 {
		insts = []string{"*"}
	}
	for _, inst := range insts {
		if inst == "*" {
			if !p.Allowed(id, m.need, "", true) {
				return denied(id, m.need, "", fullMethod, "every instance (the worker serves all; give it --instance or a rule with instances: [\"*\"])")
			}
			continue
		}
		if err := a.check(p, id, m.need, inst, fullMethod, ""); err != nil {
			return err
		}
	}
	return nil
}

func (a *Authorizer) check(p *Policy, id *Identity, need Perm, instance, fullMethod, suffix string) error {
	if p.Allowed(id, need, instance, false) {
		return nil
	}
	return denied(id, need, instance, fullMethod, onInstance(instance)+suffix)
}

// unknownMethod is the denial of a method without a permission mapping.
func unknownMethod(fullMethod string) error {
	return status.Errorf(codes.PermissionDenied, "%s has no permission mapping, so it is denied; this is a bug in Gantry (internal/auth/methods.go)", fullMethod)
}

// UnaryInterceptor authenticates and authorizes unary calls.
func (a *Authorizer) UnaryInterceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	m, ok := lookupMethod(info.FullMethod)
	if !ok {
		return nil, unknownMethod(info.FullMethod)
	}
	if m.from == open {
		return handler(ctx, req)
	}
	id, err := a.authenticate(ctx)
	if err != nil {
		return nil, err
	}
	if err := a.authorize(id, m, info.FullMethod, req); err != nil {
		return nil, err
	}
	if m.need == PermWorker {
		return a.workerCall(WithIdentity(ctx, id), id, info.FullMethod, req, handler)
	}
	return handler(WithIdentity(ctx, id), req)
}

// workerCall binds a worker id to the identity that registers it, and
// refuses worker-protocol calls for that id from any other identity. An
// id not registered since this server started passes (the scheduler
// then asks the worker to register again).
func (a *Authorizer) workerCall(ctx context.Context, id *Identity, fullMethod string, req any, handler grpc.UnaryHandler) (any, error) {
	r, ok := req.(interface{ GetWorkerId() string })
	if !ok {
		return handler(ctx, req)
	}
	if err := a.ownsWorker(id, fullMethod, req); err != nil {
		return nil, err
	}
	wid, who := r.GetWorkerId(), id.String()
	resp, err := handler(ctx, req)
	if err == nil && fullMethod == workersSvc+"Register" {
		if owner, loaded := a.workers.LoadOrStore(wid, who); loaded && owner.(string) != who {
			return nil, status.Errorf(codes.PermissionDenied, "worker id %q was registered by %s, not %s; give every worker its own id (--id)", wid, owner, who)
		}
	}
	return resp, err
}

// StreamInterceptor authenticates streaming calls at once and authorizes
// them on their first request message.
func (a *Authorizer) StreamInterceptor(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
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
	if err := a.authorize(id, m, info.FullMethod, nil); err != nil {
		return err
	}
	w := &authStream{ServerStream: ss, ctx: WithIdentity(ss.Context(), id), a: a, id: id, m: m, method: info.FullMethod}
	w.checked = m.from == fromGlobal || m.from == fromAny
	return handler(srv, w)
}

type authStream struct {
	grpc.ServerStream
	ctx     context.Context
	a       *Authorizer
	id      *Identity
	m       method
	method  string
	checked bool
}

func (s *authStream) Context() context.Context { return s.ctx }

func (s *authStream) RecvMsg(msg any) error {
	if err := s.ServerStream.RecvMsg(msg); err != nil {
		return err
	}
	if !s.checked {
		s.checked = true
		if err := s.a.authorize(s.id, s.m, s.method, msg); err != nil {
			return err
		}
	}
	if s.m.need == PermWorker {
		return s.a.ownsWorker(s.id, s.method, msg)
	}
	return nil
}

// ownsWorker refuses a worker-protocol message for a worker id that
// another identity registered (as workerCall does for unary calls).
func (a *Authorizer) ownsWorker(id *Identity, fullMethod string, msg any) error {
	r, ok := msg.(interface{ GetWorkerId() string })
	if !ok {
		return nil
	}
	wid, who := r.GetWorkerId(), id.String()
	if owner, ok := a.workers.Load(wid); ok && owner.(string) != who {
		return status.Errorf(codes.PermissionDenied, "worker id %q was registered by %s, not %s (%s); give every worker its own id (--id)", wid, owner, who, fullMethod)
	}
	return nil
}
