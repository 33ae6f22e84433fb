package server

import (
	"context"
	"crypto"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/gantry-build/gantry/internal/auth"
	"github.com/gantry-build/gantry/internal/client"
	"github.com/gantry-build/gantry/internal/config"
	"github.com/gantry-build/gantry/internal/status"
)

// security is the server's TLS and authentication, built from the tls
// and auth sections of the configuration.
type security struct {
	tls      *auth.ServerTLS // nil: plain text
	authz    *auth.Authorizer
	internal *auth.InternalListener // the embedded worker's connection; nil when neither is on
	// httpAuth: the HTTP port requires credentials (auth on, and
	// auth.http_require_token not false); httpOpen: auth is on but the
	// operator opted the HTTP port out.
	httpAuth, httpOpen bool
	// sessions are the browser sessions of the HTTP port's login form;
	// nil unless httpAuth.
	sessions *auth.Sessions
	// trustsFrontends: this is a scheduler node, which frontends forward
	// calls to.
	trustsFrontends bool
}

// newSecurity builds the tls and auth sections of cfg; ops finds the
// instance of an operation for the authorizer.
func newSecurity(cfg config.Config, ops auth.Operations) (*security, error) {
	s := &security{trustsFrontends: cfg.Role == config.RoleScheduler}
	if cfg.TLS.Enabled() {
		t, err := auth.NewServerTLS(cfg.TLS.CertFile, cfg.TLS.KeyFile, cfg.TLS.ClientCAFile, cfg.TLS.Mode())
		if err != nil {
			return nil, err
		}
		s.tls = t
	}
	if cfg.Auth.Enabled {
		st, err := authSettings(cfg)
		if err != nil {
			return nil, err
		}
		s.authz = auth.New(st, ops)
		s.httpAuth, s.httpOpen = cfg.Auth.HTTPTokenRequired(), cfg.Auth.HTTPOptedOut()
		if s.httpAuth {
			s.sessions = auth.NewSessions(cfg.Auth.HTTPSessionTTL.D(), auth.MaxSessions, time.Now)
		}
	}
	// The embedded worker's connection (roles all and frontend; a
	// scheduler node has no worker).
	if (s.tls != nil || s.authz != nil) && cfg.Role != config.RoleScheduler {
		s.internal = auth.NewInternalListener()
	}
	return s, nil
}

// authSettings reads the auth section's files and compiles its policy.
func authSettings(cfg config.Config) (auth.Settings, error) {
	a := cfg.Auth
	st := auth.Settings{AllowAnonymous: a.AllowAnonymous}
	if a.TokensFile != "" {
		data, err := os.ReadFile(a.TokensFile)
		if err != nil {
			return st, fmt.Errorf("auth.tokens_file: %w", err)
		}
		if st.Tokens, err = auth.ParseTokens(data, a.TokensFile); err != nil {
			return st, fmt.Errorf("auth.tokens_file: %w", err)
		}
	}
	if a.JWT.Enabled() {
		o := auth.JWTOptions{Issuer: a.JWT.Issuer, Audience: a.JWT.Audience, SubjectClaim: a.JWT.SubjectClaim,
			GroupsClaim: a.JWT.GroupsClaim, RequireExpiry: a.JWT.RequireExpiry, Leeway: a.JWT.Leeway.D()}
		if f := a.JWT.HS256SecretFile; f != "" {
			data, err := os.ReadFile(f)
			if err != nil {
				return st, fmt.Errorf("auth.jwt.hs256_secret_file: %w", err)
			}
			o.HS256Secret = []byte(strings.TrimRight(string(data), "\r\n"))
		}
		for i, f := range a.JWT.PublicKeyFiles {
			data, err := os.ReadFile(f)
			if err == nil {
				var keys []crypto.PublicKey
				keys, err = auth.ParsePublicKeys(data, f)
				o.PublicKeys = append(o.PublicKeys, keys...)
			}
			if err != nil {
				return st, fmt.Errorf("auth.jwt.public_key_files[%d]: %w", i, err)
			}
		}
		v, err := auth.NewJWTVerifier(o)
		if err != nil {
			return st, fmt.Errorf("auth.jwt: %w", err)
		}
		st.JWT = v
	}
	if cfg.TLS.Mode() != "none" {
		st.CertNames = a.CertificateNames
	}
	rules := make([]auth.Rule, len(a.Policy))
	for i, r := range a.Policy {
		rules[i] = auth.Rule{Identities: r.Identities, Instances: r.Instances, Permissions: r.Permissions}
	}
	p, err := auth.CompilePolicy(rules, "auth.policy")
	if err != nil {
		return st, err
	}
	st.Policy = p
	if cfg.Role == config.RoleScheduler {
		if st.Frontends, err = auth.CompileIdentities(cfg.Cluster.FrontendIdentities, "cluster.frontend_identities"); err != nil {
			return st, err
		}
	}
	if cfg.Role == config.RoleFrontend && len(cfg.Cluster.SchedulerIdentities) > 0 {
		if st.Schedulers, err = auth.CompileIdentities(cfg.Cluster.SchedulerIdentities, "cluster.scheduler_identities"); err != nil {
			return st, err
		}
	}
	return st, nil
}

// creds are the gRPC server's transport credentials: nil (plain text,
// today's default) unless TLS or auth is on.
func (s *security) creds() credentials.TransportCredentials {
	if s.tls == nil && s.authz == nil {
		return nil
	}
	var tc *tls.Config
	if s.tls != nil {
		tc = s.tls.Config("h2")
	}
	return auth.ServerCredentials(tc)
}

// unary and stream are the authentication and authorization
// interceptors of every role. With auth off there are none, so that calls
// pay nothing, except on a scheduler node: there they refuse calls that
// carry a forwarded caller, which only a frontend with auth on sends (such
// a frontend relies on the scheduler to authorize its callers). With auth
// on, the calls of the services served here (local) are authorized here;
// the calls a frontend node forwards to the leading scheduler are
// authenticated here and authorized there, for the caller the forwarding
// handler names (auth.ForwardedCallerHeader).
func (s *security) unary() []grpc.UnaryServerInterceptor {
	switch {
	case s.authz != nil:
		return []grpc.UnaryServerInterceptor{s.authz.UnaryInterceptor}
	case s.trustsFrontends:
		return []grpc.UnaryServerInterceptor{func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			if err := refuseForwarded(ctx); err != nil {
				return nil, err
			}
			return h(ctx, req)
		}}
	}
	return nil
}

func (s *security) stream(local func(fullMethod string) bool) []grpc.StreamServerInterceptor {
	switch {
	case s.authz != nil:
		return []grpc.StreamServerInterceptor{func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			if local(info.FullMethod) {
				return s.authz.StreamInterceptor(srv, ss, info, h)
			}
			return s.authz.AuthenticateStream(srv, ss, info, h)
		}}
	case s.trustsFrontends:
		return []grpc.StreamServerInterceptor{func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			if err := refuseForwarded(ss.Context()); err != nil {
				return err
			}
			return h(srv, ss)
		}}
	}
	return nil
}

func refuseForwarded(ctx context.Context) error {
	if len(metadata.ValueFromIncomingContext(ctx, auth.ForwardedCallerHeader)) == 0 {
		return nil
	}
	return grpcstatus.Error(codes.FailedPrecondition, "a frontend with auth on forwarded this call, but this scheduler has auth.enabled: false and would not authorize it; give every scheduler the frontends' auth section and cluster.frontend_identities")
}

// clusterSecurity is how a node connects to the other nodes
// (cluster.client).
func clusterSecurity(cfg config.Config) client.Security {
	c := cfg.Cluster.Client
	return client.Security{TLS: c.TLS, CAFile: c.TLSCAFile, CertFile: c.TLSCertFile, KeyFile: c.TLSKeyFile, ServerName: c.TLSServerName, TokenFile: c.TokenFile}
}

// checkClusterClient reads the files of cluster.client, so that a node
// with an unusable one stops at start, naming the key.
func checkClusterClient(cfg config.Config) error {
	c := cfg.Cluster.Client
	if c.TLSCAFile != "" {
		if _, err := auth.LoadCertPool(c.TLSCAFile); err != nil {
			return fmt.Errorf("cluster.client.tls_ca_file: %v; give the PEM CA certificates that sign the other nodes' certificates", err)
		}
	}
	if c.TLSCertFile != "" {
		if _, err := tls.LoadX509KeyPair(c.TLSCertFile, c.TLSKeyFile); err != nil {
			return fmt.Errorf("cluster.client.tls_cert_file, tls_key_file: %v; give this node's PEM client certificate and its private key", err)
		}
	}
	if c.TokenFile != "" {
		data, err := os.ReadFile(c.TokenFile)
		if err != nil {
			return fmt.Errorf("cluster.client.token_file: %v; give the file holding the token this node sends to the others", err)
		}
		if tok := strings.TrimSpace(string(data)); tok == "" || strings.ContainsAny(tok, "\r\n") {
			return fmt.Errorf("cluster.client.token_file: %s must hold exactly one token on one line", c.TokenFile)
		}
	}
	return nil
}

// httpListener wraps the HTTP port's listener in TLS when it is on.
func (s *security) httpListener(l net.Listener) net.Listener {
	if s.tls == nil {
		return l
	}
	return tls.NewListener(l, s.tls.Config("h2", "http/1.1"))
}

// httpHandler requires the status permission on the HTTP port when auth
// is on (unless auth.http_require_token: false); /healthz stays open.
func (s *security) httpHandler(h http.Handler) http.Handler {
	if s.authz == nil || !s.httpAuth {
		return h
	}
	return s.authz.HTTPHandler(auth.PermStatus, h, "/healthz")
}

// browserHandler is httpHandler for `gantry serve`'s HTTP port, which
// also has the login form: it serves /login and /logout on mux (open to
// all), accepts the form's session cookie, and sends a browser without
// credentials to /login.
func (s *security) browserHandler(mux *http.ServeMux, log *slog.Logger) http.Handler {
	if s.sessions == nil {
		return s.httpHandler(mux)
	}
	login := status.NewLogin(s.authz, s.sessions, log)
	mux.Handle("/login", login)
	mux.Handle("/logout", login)
	return s.authz.HTTPSessionHandler(auth.PermStatus, s.sessions, "/login", mux, "/healthz", "/login", "/logout")
}

// adminOnly requires the admin permission (on every instance) of the
// caller httpHandler or browserHandler authenticated, for paths that give
// away more than the status pages (the profiler's goroutine dumps and
// traces); open when the HTTP port knows no caller.
func (s *security) adminOnly(h http.Handler) http.Handler {
	if s.authz == nil || !s.httpAuth {
		return h
	}
	return s.authz.HTTPRequire(auth.PermAdmin, h)
}

// openHTTPWarning is logged at start when auth is on but the HTTP port
// is opted out of it.
const openHTTPWarning = "auth is enabled but auth.http_require_token: false leaves the HTTP port open to anyone who reaches it; remove the key to require credentials there"

// warnOpenHTTP logs openHTTPWarning when the HTTP port at addr is opted
// out; open lists what it serves to anyone.
func (s *security) warnOpenHTTP(log *slog.Logger, addr, open string) {
	if s.httpOpen {
		log.Warn(openHTTPWarning, "http", addr, "open", open)
	}
}

// statusPolicy is what the status page checks its controls (admin) and
// downloads (cas.read) against; nil, allowing all, unless the HTTP port
// authenticates its callers.
func (s *security) statusPolicy() func() *auth.Policy {
	if s.authz == nil || !s.httpAuth {
		return nil
	}
	return s.authz.Policy
}

// dialEmbedded connects the embedded worker: over the in-process
// listener (as the internal identity, without TLS) when TLS or auth is
// on, else over the gRPC port like any worker.
func (s *security) dialEmbedded(grpcAddr string) (*grpc.ClientConn, error) {
	if s.internal == nil {
		return client.Dial(dialAddr(grpcAddr))
	}
	return client.Dial(auth.InternalTarget, s.internal.DialOptions()...)
}

// reload re-reads the TLS files, the tokens and keys, and the policy.
func (s *security) reload(cfg config.Config, log *slog.Logger) error {
	if s.tls != nil {
		if err := s.tls.Reload(); err != nil {
			return err
		}
	}
	if s.authz == nil && cfg.Auth.Enabled {
		return fmt.Errorf("auth.enabled: turning authentication on needs a restart")
	}
	if s.authz != nil {
		if !cfg.Auth.Enabled {
			return fmt.Errorf("auth.enabled: turning authentication off needs a restart")
		}
		if cfg.Auth.HTTPTokenRequired() != s.httpAuth {
			return fmt.Errorf("auth.http_require_token: changing whether the HTTP port requires credentials needs a restart")
		}
		st, err := authSettings(cfg)
		if err != nil {
			return err
		}
		s.authz.Update(st)
		if s.sessions != nil {
			// A browser session's token or key may be gone now, or its
			// groups changed.
			s.sessions.Recheck(func(cred string) (*auth.Identity, error) { return s.authz.Login(cred, auth.PermStatus) })
		}
		log.Info("authentication reloaded", "tokens", st.Tokens.Len(), "policy_rules", len(cfg.Auth.Policy))
	}
	return nil
}
