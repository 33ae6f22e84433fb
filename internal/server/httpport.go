package server

import (
	"net"
	"net/http"

	"github.com/gantry-build/gantry/internal/config"
)

// HTTPPortSecurity is what `gantry serve` puts around its HTTP port,
// built from the tls and auth sections of cfg, for other HTTP ports (the
// standalone worker's /metrics and /healthz) to behave the same:
// Listener adds TLS when tls.cert_file and key_file are set (with client
// certificates per tls.client_ca_file and client_auth); Handler requires
// a token, JWT or client certificate of an identity with the status
// permission when auth is on (unless auth.http_require_token: false),
// /healthz staying open.
type HTTPPortSecurity struct {
	sec *security
}

// NewHTTPPortSecurity reads the certificate, tokens, keys and policy the
// configuration names.
func NewHTTPPortSecurity(cfg config.Config) (*HTTPPortSecurity, error) {
	sec, err := newSecurity(cfg, nil)
	if err != nil {
		return nil, err
	}
	if sec.internal != nil { // only the embedded worker dials it
		sec.internal.Close()
		sec.internal = nil
	}
	return &HTTPPortSecurity{sec: sec}, nil
}

// Listener wraps l in TLS when it is configured.
func (h *HTTPPortSecurity) Listener(l net.Listener) net.Listener { return h.sec.httpListener(l) }

// Handler wraps next in the token check when it is configured.
func (h *HTTPPortSecurity) Handler(next http.Handler) http.Handler { return h.sec.httpHandler(next) }

// TLS reports whether the port speaks TLS.
func (h *HTTPPortSecurity) TLS() bool { return h.sec.tls != nil }

// RequireToken reports whether every path but /healthz needs the status
// permission.
func (h *HTTPPortSecurity) RequireToken() bool { return h.sec.authz != nil && h.sec.httpAuth }

// OptedOut reports whether auth is on but auth.http_require_token: false
// leaves the port open to anyone: the caller logs it as a warning.
func (h *HTTPPortSecurity) OptedOut() bool { return h.sec.httpOpen }
