package auth

import (
	"net/http"
	"strings"

	"google.golang.org/grpc/status"
)

// HTTPHandler requires callers of h to hold need on every instance (a
// rule with instances: ["*"]), except on the paths in open. The caller
// is a bearer token in the Authorization header, else a verified client
// certificate.
func (a *Authorizer) HTTPHandler(need Perm, h http.Handler, open ...string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for _, p := range open {
			if r.URL.Path == p {
				h.ServeHTTP(w, r)
				return
			}
		}
		id, err := a.authenticateHTTP(r)
		if err != nil {
			w.Header().Set("WWW-Authenticate", `Bearer realm="gantry"`)
			http.Error(w, status.Convert(err).Message(), http.StatusUnauthorized)
			return
		}
		if !a.settings().Policy.Allowed(id, need, "", true) {
			http.Error(w, status.Convert(denied(id, need, "", r.Method+" "+r.URL.Path, "every instance (a rule with instances: [\"*\"])")).Message(), http.StatusForbidden)
			return
		}
		h.ServeHTTP(w, r.WithContext(WithIdentity(r.Context(), id)))
	})
}

func (a *Authorizer) authenticateHTTP(r *http.Request) (*Identity, error) {
	s := a.settings()
	tok, present, err := bearer(r.Header.Values("Authorization"))
	if err != nil {
		return nil, err
	}
	if present {
		return s.identifyToken(tok)
	}
	if r.TLS != nil {
		id, err := s.certIdentity(r.TLS.VerifiedChains)
		if err != nil || id != nil {
			return id, err
		}
	}
	if s.AllowAnonymous {
		return Anonymous, nil
	}
	return nil, errUnauthenticated("this page requires authentication; %s", strings.Replace(credentialsHint, "authorization header", "Authorization header", 1))
}
