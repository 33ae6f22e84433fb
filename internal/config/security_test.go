package config

import (
	"strings"
	"testing"
	"time"
)

// TestHTTPRequireTokenDefault: with auth.enabled and nothing said about
// it, the HTTP port requires credentials, and a plain loopback setup
// still starts; false is the explicit opt-out; an old true still works.
func TestHTTPRequireTokenDefault(t *testing.T) {
	const auth = "auth:\n  enabled: true\n  tokens_file: t\n  policy: [{identities: [a], instances: ['*'], permissions: [status]}]\n"
	for _, c := range []struct {
		yaml               string
		required, optedOut bool
	}{
		{"", false, false},
		{auth, true, false},
		{auth + "  http_require_token: true\n", true, false},
		{auth + "  http_require_token: false\n", false, true},
		{auth + "  http_require_token:\n", true, false},
		{"http_listen: 0.0.0.0:9090\n" + auth + "  http_require_token: false\n", false, true},
		{"auth: {http_require_token: false}", false, false},
	} {
		cfg := Default()
		if err := Parse([]byte(c.yaml), &cfg); err != nil {
			t.Errorf("%q: %v", c.yaml, err)
			continue
		}
		if got := cfg.Auth.HTTPTokenRequired(); got != c.required {
			t.Errorf("%q: HTTPTokenRequired %v, want %v", c.yaml, got, c.required)
		}
		if got := cfg.Auth.HTTPOptedOut(); got != c.optedOut {
			t.Errorf("%q: HTTPOptedOut %v, want %v", c.yaml, got, c.optedOut)
		}
	}
}

func TestSecurityConfig(t *testing.T) {
	good := `
listen: 127.0.0.1:8980
tls:
  cert_file: /etc/gantry/server.pem
  key_file: /etc/gantry/server-key.pem
  client_ca_file: /etc/gantry/clients-ca.pem
  client_auth: optional
auth:
  enabled: true
  tokens_file: /etc/gantry/tokens
  certificate_names: [cn, uri]
  http_require_token: true
  jwt:
    public_key_files: [/etc/gantry/idp.pem]
    issuer: https://idp.example
    audience: gantry
    groups_claim: groups
    leeway: 30s
  policy:
    - identities: ["group:ci"]
      instances: ["*"]
      permissions: [read, write, execute]
`
	cfg := Default()
	if err := Parse([]byte(good), &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.Auth.HTTPSessionTTL.D() != 12*time.Hour {
		t.Errorf("auth.http_session_ttl defaults to %s, want 12h", cfg.Auth.HTTPSessionTTL)
	}
	if cfg.TLS.Mode() != "optional" || !cfg.Auth.JWT.RequireExpiry || cfg.Auth.JWT.SubjectClaim != "sub" || cfg.Auth.Policy[0].Permissions[2] != "execute" {
		t.Fatalf("parsed: %+v", cfg)
	}
	for _, c := range []struct{ yaml, want string }{
		{"tls: {cert_file: a}", "tls: give both cert_file and key_file"},
		{"tls: {cert_file: a, key_file: b, client_auth: maybe}", `tls.client_auth: "maybe" is not a mode`},
		{"tls: {cert_file: a, key_file: b, client_auth: require}", "tls.client_auth: require needs tls.client_ca_file"},
		{"tls: {client_ca_file: a}", "client certificates need TLS"},
		{"auth: {tokens_file: t}", "auth.enabled: auth settings are given but auth is off"},
		{"auth: {enabled: true, policy: [{identities: [a], instances: ['*'], permissions: [read]}]}", "no caller could authenticate"},
		{"auth: {enabled: true, tokens_file: t}", "auth.policy: auth is enabled but the policy grants nothing"},
		{"auth: {enabled: true, tokens_file: t, certificate_names: [ou]}", `auth.certificate_names[0]: "ou" is not a certificate field`},
		{"listen: 0.0.0.0:8980\nauth: {enabled: true, tokens_file: t, policy: [{identities: [a], instances: ['*'], permissions: [read]}]}", "plain text on 0.0.0.0:8980"},
		{"http_listen: 0.0.0.0:9090\nauth: {enabled: true, http_require_token: true, tokens_file: t, policy: [{identities: [a], instances: ['*'], permissions: [read]}]}", "plain text on http_listen 0.0.0.0:9090"},
		// Said nothing: the HTTP port requires a token all the same, and
		// the error names both ways out.
		{"http_listen: 0.0.0.0:9090\nauth: {enabled: true, tokens_file: t, policy: [{identities: [a], instances: ['*'], permissions: [read]}]}", "configure tls.cert_file and tls.key_file, keep http_listen on loopback, or (not recommended) leave the HTTP port open to anyone who reaches it with auth.http_require_token: false"},
		{"auth: {http_require_token: true}", "auth.enabled: auth settings are given but auth is off"},
		{"auth: {enabled: true, tokens_file: t, jwt: {hs256_secret_file: s, subject_claim: ''}}", "auth.jwt.subject_claim: must name a claim"},
		{"auth: {enabled: true, tokens_file: t, http_session_ttl: 500ms, policy: [{identities: [a], instances: ['*'], permissions: [status]}]}", "auth.http_session_ttl: 500ms is too short"},
		{"auth: {enabled: true, polcy: []}", "auth.polcy (line 1): unknown key"},
	} {
		cfg := Default()
		err := Parse([]byte(c.yaml), &cfg)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.yaml, err, c.want)
		}
	}
}
