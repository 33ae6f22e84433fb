package config

import (
	"fmt"
	"strings"
	"time"
)

// TLSConfig turns on TLS for the gRPC and HTTP ports.
type TLSConfig struct {
	// CertFile and KeyFile are the server's PEM certificate (chain) and
	// private key; both empty means plain text.
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// ClientCAFile holds the PEM CA certificates that sign client
	// certificates (mutual TLS).
	ClientCAFile string `yaml:"client_ca_file"`
	// ClientAuth is none, optional (verify a certificate when one is sent)
	// or require; empty means require when client_ca_file is set.
	ClientAuth string `yaml:"client_auth"`
}

// Enabled reports whether TLS is configured.
func (t TLSConfig) Enabled() bool { return t.CertFile != "" || t.KeyFile != "" }

// Mode is the effective client certificate mode.
func (t TLSConfig) Mode() string {
	if t.ClientAuth != "" {
		return t.ClientAuth
	}
	if t.ClientCAFile != "" {
		return "require"
	}
	return "none"
}

// AuthConfig configures authentication and authorization
// (docs/OPERATIONS.md, "Security").
type AuthConfig struct {
	// Enabled turns authentication and the policy on; off, every caller
	// may do everything.
	Enabled bool `yaml:"enabled"`
	// AllowAnonymous lets callers without credentials in as the identity
	// "anonymous"; the policy decides what it may do.
	AllowAnonymous bool `yaml:"allow_anonymous"`
	// TokensFile holds static bearer tokens: SUBJECT TOKEN [GROUP,...]
	// per line.
	TokensFile string `yaml:"tokens_file"`
	// JWT verifies JSON Web Tokens.
	JWT JWTConfig `yaml:"jwt"`
	// CertificateNames are the client certificate fields that name the
	// caller, in order: cn, dns, uri, email.
	CertificateNames []string `yaml:"certificate_names"`
	// HTTPRequireToken makes the HTTP port (status, /metrics, pprof)
	// require the status permission; /healthz stays open. Unset (nil)
	// means on whenever auth is enabled: a setup that turns
	// authentication on does not leave its admin buttons open unless it
	// says false (HTTPTokenRequired, HTTPOptedOut).
	HTTPRequireToken *bool `yaml:"http_require_token"`
	// HTTPSessionTTL is how long a browser session of the HTTP port's
	// login form lasts (a JWT's own expiry ends it sooner).
	HTTPSessionTTL Duration `yaml:"http_session_ttl"`
	// Policy grants permissions on instance-name patterns to identities.
	Policy []PolicyRule `yaml:"policy"`
}

// HTTPTokenRequired reports whether the HTTP ports require credentials:
// auth is on and http_require_token is not set to false.
func (a AuthConfig) HTTPTokenRequired() bool {
	return a.Enabled && (a.HTTPRequireToken == nil || *a.HTTPRequireToken)
}

// HTTPOptedOut reports whether auth is on but http_require_token: false
// leaves the HTTP ports open to anyone who reaches them.
func (a AuthConfig) HTTPOptedOut() bool {
	return a.Enabled && a.HTTPRequireToken != nil && !*a.HTTPRequireToken
}

// JWTConfig configures JWT verification.
type JWTConfig struct {
	// HS256SecretFile holds the shared secret of HS256 tokens.
	HS256SecretFile string `yaml:"hs256_secret_file"`
	// PublicKeyFiles hold PEM RSA or ECDSA public keys (or certificates)
	// for RS256/384/512 and ES256/384/512 tokens.
	PublicKeyFiles []string `yaml:"public_key_files"`
	// Issuer and Audience, when set, must match the iss and aud claims.
	Issuer   string `yaml:"issuer"`
	Audience string `yaml:"audience"`
	// SubjectClaim names the claim holding the caller's name.
	SubjectClaim string `yaml:"subject_claim"`
	// GroupsClaim names a claim holding the caller's groups; empty reads none.
	GroupsClaim string `yaml:"groups_claim"`
	// RequireExpiry rejects tokens without an exp claim.
	RequireExpiry bool `yaml:"require_expiry"`
	// Leeway is the clock skew allowed when checking exp and nbf.
	Leeway Duration `yaml:"leeway"`
}

// Enabled reports whether any JWT key is configured.
func (j JWTConfig) Enabled() bool { return j.HS256SecretFile != "" || len(j.PublicKeyFiles) > 0 }

// PolicyRule grants permissions; see docs/CONFIGURATION.md.
type PolicyRule struct {
	Identities  []string `yaml:"identities"`
	Instances   []string `yaml:"instances"`
	Permissions []string `yaml:"permissions"`
}

// validateSecurity checks the tls and auth sections. The policy's names
// are checked when the server compiles it (internal/auth).
func (c *Config) validateSecurity(bad func(path, format string, args ...any)) {
	t := c.TLS
	if t.Enabled() && (t.CertFile == "" || t.KeyFile == "") {
		bad("tls", "give both cert_file and key_file")
	}
	switch t.ClientAuth {
	case "", "none", "optional", "require":
	default:
		bad("tls.client_auth", "%q is not a mode; use none, optional or require", t.ClientAuth)
	}
	if t.Mode() != "none" && t.ClientCAFile == "" {
		bad("tls.client_auth", "%s needs tls.client_ca_file, the CAs that sign client certificates", t.Mode())
	}
	if t.ClientCAFile != "" && !t.Enabled() {
		bad("tls.client_ca_file", "client certificates need TLS: set tls.cert_file and tls.key_file too")
	}
	a := c.Auth
	for i, n := range a.CertificateNames {
		switch n {
		case "cn", "dns", "uri", "email":
		default:
			bad(fmt.Sprintf("auth.certificate_names[%d]", i), "%q is not a certificate field; use cn, dns, uri or email", n)
		}
	}
	if !a.Enabled {
		if a.TokensFile != "" || a.JWT.Enabled() || len(a.Policy) > 0 || (a.HTTPRequireToken != nil && *a.HTTPRequireToken) {
			bad("auth.enabled", "auth settings are given but auth is off; set auth.enabled: true (or remove them)")
		}
		return
	}
	if a.TokensFile == "" && !a.JWT.Enabled() && (t.Mode() == "none" || len(a.CertificateNames) == 0) && !a.AllowAnonymous {
		bad("auth", "auth is enabled but no caller could authenticate: set tokens_file, jwt keys, or tls.client_ca_file with auth.certificate_names")
	}
	if t.Mode() != "none" && len(a.CertificateNames) == 0 && a.TokensFile == "" && !a.JWT.Enabled() {
		bad("auth.certificate_names", "client certificates are verified but name nobody; list the fields that name a caller, e.g. [cn]")
	}
	if a.HTTPSessionTTL < Duration(time.Second) {
		bad("auth.http_session_ttl", "%s is too short; give the browser session's lifetime, at least 1s (default 12h)", a.HTTPSessionTTL)
	}
	if a.JWT.Leeway < 0 {
		bad("auth.jwt.leeway", "must not be negative")
	}
	if a.JWT.SubjectClaim == "" {
		bad("auth.jwt.subject_claim", "must name a claim, e.g. sub")
	}
	if len(a.Policy) == 0 {
		bad("auth.policy", "auth is enabled but the policy grants nothing, so every call would be denied; add rules (docs/OPERATIONS.md has an example)")
	}
	if !t.Enabled() && (a.TokensFile != "" || a.JWT.Enabled()) && !isLoopback(c.Listen) {
		bad("tls", "bearer tokens would cross the network in plain text on %s; configure tls.cert_file and tls.key_file (or listen on loopback)", c.Listen)
	}
	if !t.Enabled() && a.HTTPTokenRequired() && (a.TokensFile != "" || a.JWT.Enabled()) && c.HTTPListen != "" && !isLoopback(c.HTTPListen) {
		bad("auth.http_require_token", "with auth.enabled the HTTP port requires a token, and bearer tokens would cross the network in plain text on http_listen %s; configure tls.cert_file and tls.key_file, keep http_listen on loopback, or (not recommended) leave the HTTP port open to anyone who reaches it with auth.http_require_token: false", c.HTTPListen)
	}
}

func isLoopback(addr string) bool {
	host := addr
	if i := strings.LastIndex(addr, ":"); i >= 0 {
		host = addr[:i]
	}
	host = strings.Trim(host, "[]")
	return host == "localhost" || strings.HasPrefix(host, "127.") || host == "::1"
}

// ClientConfig is how `gantry worker --config` reaches the server: the
// defaults of its --tls, --tls-ca, --tls-cert, --tls-key,
// --tls-server-name and --token-file flags.
type ClientConfig struct {
	TLS           bool   `yaml:"tls"`
	TLSCAFile     string `yaml:"tls_ca_file"`
	TLSCertFile   string `yaml:"tls_cert_file"`
	TLSKeyFile    string `yaml:"tls_key_file"`
	TLSServerName string `yaml:"tls_server_name"`
	TokenFile     string `yaml:"token_file"`
}
