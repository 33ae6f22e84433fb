package auth

import (
	"net/http"
	"net/url"
	"strings"

	"google.golang.org/grpc/status"
)

// HTTPHandler requires callers of h to hold need on every instance (a
// rule with instances: ["*"]), except on the paths in open. The caller
// is a bearer token in the Authorization header, else a verified client
// certificate.
func (a *Authorizer) HTTPHandler(need Perm, h http.Handler, open ...string) http.Handler {
	return a.HTTPSessionHandler(need, nil, "", h, open...)
}

// HTTPSessionHandler is HTTPHandler that also accepts a session of the
// login form (the SessionCookie, looked up in sessions) after the
// Authorization header, and sends a browser without credentials (a GET
// accepting text/html) to loginPath?next=PATH instead of answering 401.
// The policy is checked on every request, so a reload that takes the
// permission away applies to open sessions at once.
func (a *Authorizer) HTTPSessionHandler(need Perm, sessions *Sessions, loginPath string, h http.Handler, open ...string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for _, p := range open {
			if r.URL.Path == p {
				h.ServeHTTP(w, r)
				return
			}
		}
		ctx := r.Context()
		id, viaSession, err := a.authenticateHTTP(r, sessions)
		if err != nil {
			// Only a browser that sent no token: a wrong one is an error
			// to show, not a reason to log in.
			if loginPath != "" && len(r.Header.Values("Authorization")) == 0 && browserNavigation(r) {
				http.Redirect(w, r, loginPath+"?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
				return
			}
			w.Header().Set("WWW-Authenticate", `Bearer realm="gantry"`)
			http.Error(w, status.Convert(err).Message(), http.StatusUnauthorized)
			return
		}
		if !a.settings().Policy.Allowed(id, need, "", true) {
			http.Error(w, status.Convert(denied(id, need, "", r.Method+" "+r.URL.Path, "every instance (a rule with instances: [\"*\"])")).Message(), http.StatusForbidden)
			return
		}
		if viaSession {
			ctx = withSession(ctx)
		}
		h.ServeHTTP(w, r.WithContext(WithIdentity(ctx, id)))
	})
}

// HTTPRequire requires the caller that an enclosing HTTPHandler or
// HTTPSessionHandler authenticated (the identity in the request's
// context) to also hold need on every instance: for paths that need more
// than the rest of the port. A request without an identity is refused.
func (a *Authorizer) HTTPRequire(need Perm, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := FromContext(r.Context())
		if id == nil {
			http.Error(w, "this page requires authentication, and this server did not check it; report this as a bug", http.StatusForbidden)
			return
		}
		if !a.settings().Policy.Allowed(id, need, "", true) {
			http.Error(w, status.Convert(denied(id, need, "", r.Method+" "+r.URL.Path, "every instance (a rule with instances: [\"*\"])")).Message(), http.StatusForbidden)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// browserNavigation reports whether r is a browser opening a page: a GET
// or HEAD that accepts HTML. Scripts (curl, Prometheus) get the 401.
func browserNavigation(r *http.Request) bool {
	return (r.Method == http.MethodGet || r.Method == http.MethodHead) && strings.Contains(r.Header.Get("Accept"), "text/html")
}

// authenticateHTTP finds the caller of an HTTP request: a bearer token,
// else a live session of sessions (when not nil), else a verified client
// certificate, else Anonymous when allowed.
func (a *Authorizer) authenticateHTTP(r *http.Request, sessions *Sessions) (id *Identity, viaSession bool, err error) {
	s := a.settings()
	tok, present, err := bearer(r.Header.Values("Authorization"))
	if err != nil {
		return nil, false, err
	}
	if present {
		id, err := s.identifyToken(tok)
		return id, false, err
	}
	if sessions != nil {
		if c, err := r.Cookie(SessionCookie); err == nil {
			if id := sessions.Lookup(c.Value); id != nil {
				return id, true, nil
			}
		}
	}
	if r.TLS != nil {
		id, err := s.certIdentity(r.TLS.VerifiedChains)
		if err != nil || id != nil {
			return id, false, err
		}
	}
	if s.AllowAnonymous {
		return Anonymous, false, nil
	}
	hint := strings.Replace(credentialsHint, "authorization header", "Authorization header", 1)
	if sessions != nil {
		hint = "log in at /login in a browser, or " + hint
	}
	return nil, false, errUnauthenticated("this page requires authentication; %s", hint)
}

// Login checks token as the Authorization header's bearer token is
// checked (a static token, else a JWT) and that its identity holds need
// on every instance: the login form's check. The error is an
// UNAUTHENTICATED or PERMISSION_DENIED status saying what is wrong.
func (a *Authorizer) Login(token string, need Perm) (*Identity, error) {
	s := a.settings()
	id, err := s.identifyToken(token)
	if err != nil {
		return nil, err
	}
	if !s.Policy.Allowed(id, need, "", true) {
		return nil, denied(id, need, "", "the login form", "every instance (a rule with instances: [\"*\"])")
	}
	return id, nil
}
