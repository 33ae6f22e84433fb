package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/gantry-build/gantry/internal/auth"
	"github.com/gantry-build/gantry/internal/config"
	"github.com/gantry-build/gantry/internal/testutil"
)

// loginFarm is a server whose HTTP port requires the status permission
// (auth.enabled says it; auth.http_require_token is left unset) on
// plain-text loopback, with the browser
// login. Tokens: viewer (status on every instance) and bob (no status);
// HS256 JWTs signed with secret.
type loginFarm struct {
	srv    *Server
	base   string
	log    *testutil.SyncBuffer
	tokens map[string]string
	secret []byte
	cfg    config.Config
	// tokensFile is cfg's auth.tokens_file.
	tokensFile string
}

func startLoginFarm(t *testing.T, sessionTTL time.Duration) *loginFarm {
	t.Helper()
	dir := t.TempDir()
	f := &loginFarm{log: &testutil.SyncBuffer{}, secret: []byte("login-test-hs256-secret-0123456789abcdef"),
		tokens: map[string]string{"viewer": "viewer-login-token-0123456789", "bob": "bob-login-token-0123456789"}}
	tokensFile, secretFile := filepath.Join(dir, "tokens"), filepath.Join(dir, "jwt-secret")
	if err := os.WriteFile(tokensFile, []byte("viewer "+f.tokens["viewer"]+"\nbob "+f.tokens["bob"]+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(secretFile, f.secret, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.Listen, cfg.HTTPListen = "127.0.0.1:0", "127.0.0.1:0"
	cfg.DataDir = t.TempDir()
	cfg.Worker.Enabled = false
	cfg.Status.Refresh = 0
	cfg.Auth.Enabled, cfg.Auth.TokensFile = true, tokensFile
	cfg.Auth.JWT.HS256SecretFile = secretFile
	cfg.Auth.HTTPSessionTTL = config.Duration(sessionTTL)
	cfg.Auth.Policy = []config.PolicyRule{
		{Identities: []string{"viewer"}, Instances: []string{"*"}, Permissions: []string{"status"}},
		{Identities: []string{"bob"}, Instances: []string{"team-b/*"}, Permissions: []string{"read"}},
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	f.cfg, f.tokensFile = cfg, tokensFile
	srv, err := New(cfg, slog.New(slog.NewJSONHandler(f.log, nil)))
	if err != nil {
		t.Fatal(err)
	}
	f.srv, f.base = srv, "http://"+srv.HTTPAddr()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { srv.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return f
}

// jwt signs an HS256 JWT for subject expiring at exp.
func (f *loginFarm) jwt(t *testing.T, subject string, exp time.Time) string {
	t.Helper()
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": subject, "exp": exp.Unix()}).SignedString(f.secret)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// reply is one response, its body read.
type reply struct {
	code int
	body string
	resp *http.Response
}

func (r reply) location() string { return r.resp.Header.Get("Location") }

// cookie is the session cookie the response sets, or nil.
func (r reply) cookie() *http.Cookie {
	for _, c := range r.resp.Cookies() {
		if c.Name == auth.SessionCookie {
			return c
		}
	}
	return nil
}

// send sends a request without following redirects; hdr are header
// name, value pairs.
func (f *loginFarm) send(t *testing.T, method, path string, form url.Values, cookie *http.Cookie, hdr ...string) reply {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, f.base+path, body)
	if err != nil {
		t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	if cookie != nil {
		req.AddCookie(&http.Cookie{Name: cookie.Name, Value: cookie.Value})
	}
	resp, err := noRedirect.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{resp.StatusCode, string(b), resp}
}

// login opens the form (for its token) and posts token to it, as a
// browser on the same origin does.
func (f *loginFarm) login(t *testing.T, token, next string) reply {
	t.Helper()
	page := f.send(t, "GET", "/login?next="+url.QueryEscape(next), nil, nil, "Accept", "text/html")
	if page.code != 200 {
		t.Fatalf("GET /login: %d %s", page.code, page.body)
	}
	m := csrfRE.FindStringSubmatch(page.body)
	if m == nil {
		t.Fatalf("the login form has no csrf token:\n%s", page.body)
	}
	return f.send(t, "POST", "/login", url.Values{"csrf": {m[1]}, "next": {next}, "token": {token}}, nil, "Origin", f.base, "Accept", "text/html")
}

// TestLoginSetsSessionCookie: the form with a good token sets an
// HttpOnly, SameSite=Strict session cookie (not Secure on plain text)
// lasting auth.http_session_ttl, which alone then opens the status pages
// and /metrics, with a logout button; the cookie is not the token.
func TestLoginSetsSessionCookie(t *testing.T) {
	f := startLoginFarm(t, 12*time.Hour)
	form := f.send(t, "GET", "/login", nil, nil)
	if form.code != 200 || !strings.Contains(form.body, `type="password"`) || strings.Contains(form.body, "<script") {
		t.Fatalf("GET /login: %d\n%s", form.code, form.body)
	}
	if csp := form.resp.Header.Get("Content-Security-Policy"); csp != "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'" {
		t.Errorf("the login page's CSP is %q", csp)
	}

	r := f.login(t, f.tokens["viewer"], "/status/failures?page=1")
	if r.code != http.StatusSeeOther || r.location() != "/status/failures?page=1" {
		t.Fatalf("login: %d to %q\n%s", r.code, r.location(), r.body)
	}
	c := r.cookie()
	if c == nil {
		t.Fatalf("login set no %s cookie: %v", auth.SessionCookie, r.resp.Header.Values("Set-Cookie"))
	}
	if !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Path != "/" || c.Secure || c.MaxAge != 12*3600 {
		t.Errorf("cookie attributes: %s", r.resp.Header.Get("Set-Cookie"))
	}
	if len(c.Value) != 43 || strings.Contains(c.Value, f.tokens["viewer"]) {
		t.Errorf("cookie value %q is not a 32-byte random id", c.Value)
	}

	st := f.send(t, "GET", "/status", nil, c, "Accept", "text/html")
	if st.code != 200 || !strings.Contains(st.body, `action="/logout"`) {
		t.Fatalf("/status with the cookie: %d\n%s", st.code, st.body)
	}
	if m := f.send(t, "GET", "/metrics", nil, c); m.code != 200 {
		t.Errorf("/metrics with the cookie: %d %s", m.code, m.body)
	}
	if len(logLines(t, f.log.String(), "browser login", map[string]string{"identity": "token:viewer"})) != 1 {
		t.Errorf("no log line for the login:\n%s", f.log.String())
	}
}

// TestLoginWrongTokenNoCookie: a wrong token, a token without the
// status permission, a cross-site post and a post without the form's
// token each get the form again with the reason, and no cookie.
func TestLoginWrongTokenNoCookie(t *testing.T) {
	f := startLoginFarm(t, 12*time.Hour)
	r := f.login(t, "not-a-token-0123456789", "/status")
	if r.code != http.StatusUnauthorized || r.cookie() != nil || !strings.Contains(r.body, "not known to this server") || !strings.Contains(r.body, `type="password"`) {
		t.Errorf("wrong token: %d, cookie %v\n%s", r.code, r.cookie(), r.body)
	}
	r = f.login(t, f.tokens["bob"], "/status")
	if r.code != http.StatusForbidden || r.cookie() != nil || !strings.Contains(r.body, "lacks permission status") {
		t.Errorf("token without status: %d, cookie %v\n%s", r.code, r.cookie(), r.body)
	}
	r = f.login(t, f.jwt(t, "viewer", time.Now().Add(-time.Hour)), "/status")
	if r.code != http.StatusUnauthorized || r.cookie() != nil || !strings.Contains(r.body, "expired") {
		t.Errorf("expired JWT: %d, cookie %v\n%s", r.code, r.cookie(), r.body)
	}
	page := f.send(t, "GET", "/login", nil, nil)
	csrf := csrfRE.FindStringSubmatch(page.body)[1]
	good := url.Values{"csrf": {csrf}, "token": {f.tokens["viewer"]}}
	r = f.send(t, "POST", "/login", good, nil, "Origin", "http://evil.example")
	if r.code != http.StatusForbidden || r.cookie() != nil {
		t.Errorf("cross-origin login: %d, cookie %v\n%s", r.code, r.cookie(), r.body)
	}
	r = f.send(t, "POST", "/login", good, nil, "Sec-Fetch-Site", "cross-site")
	if r.code != http.StatusForbidden || r.cookie() != nil {
		t.Errorf("cross-site login: %d, cookie %v\n%s", r.code, r.cookie(), r.body)
	}
	r = f.send(t, "POST", "/login", url.Values{"token": {f.tokens["viewer"]}}, nil, "Origin", f.base)
	if r.code != http.StatusForbidden || r.cookie() != nil {
		t.Errorf("login without the form's token: %d, cookie %v\n%s", r.code, r.cookie(), r.body)
	}
}

// TestLogoutEndsSession: POST /logout deletes the session on the server
// (the old cookie no longer opens a page) and the cookie in the browser.
func TestLogoutEndsSession(t *testing.T) {
	f := startLoginFarm(t, 12*time.Hour)
	c := f.login(t, f.tokens["viewer"], "/status").cookie()
	if c == nil {
		t.Fatal("login set no cookie")
	}
	if r := f.send(t, "GET", "/status", nil, c); r.code != 200 {
		t.Fatalf("/status with the cookie: %d %s", r.code, r.body)
	}
	if r := f.send(t, "POST", "/logout", url.Values{}, c, "Origin", "http://evil.example"); r.code != http.StatusForbidden {
		t.Errorf("cross-origin logout: %d", r.code)
	}
	// Without the button's token (a form on another page of this
	// origin, or a stale one): refused, the session lives on.
	for _, form := range []url.Values{{}, {"logout_token": {"0123456789abcdef0123456789abcdef"}}} {
		if r := f.send(t, "POST", "/logout", form, c, "Origin", f.base); r.code != http.StatusForbidden {
			t.Errorf("logout with %v: %d, want 403", form, r.code)
		}
	}
	if r := f.send(t, "GET", "/status", nil, c); r.code != 200 {
		t.Fatalf("/status after refused logouts: %d", r.code)
	}
	m := regexp.MustCompile(`name="logout_token" value="([0-9a-f]+)"`).FindStringSubmatch(f.send(t, "GET", "/status", nil, c, "Accept", "text/html").body)
	if m == nil {
		t.Fatal("the logout button's form carries no token")
	}
	r := f.send(t, "POST", "/logout", url.Values{"logout_token": {m[1]}}, c, "Origin", f.base)
	if r.code != http.StatusSeeOther || r.location() != "/login" {
		t.Fatalf("logout: %d to %q", r.code, r.location())
	}
	if gone := r.cookie(); gone == nil || gone.MaxAge >= 0 || gone.Value != "" {
		t.Errorf("logout does not delete the cookie: %v", r.resp.Header.Values("Set-Cookie"))
	}
	if r := f.send(t, "GET", "/status", nil, c); r.code != http.StatusUnauthorized {
		t.Errorf("/status with the cookie after logout: %d %s", r.code, r.body)
	}
}

// TestLoginSessionExpires: a session ends after auth.http_session_ttl,
// and a JWT's own expiry caps it.
func TestLoginSessionExpires(t *testing.T) {
	f := startLoginFarm(t, time.Second)
	r := f.login(t, f.tokens["viewer"], "/status")
	c := r.cookie()
	if c == nil || c.MaxAge != 1 {
		t.Fatalf("cookie with a 1s session: %v", r.resp.Header.Values("Set-Cookie"))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	waitFor(ctx, t, "the session to expire", func() bool {
		return f.send(t, "GET", "/status", nil, c).code == http.StatusUnauthorized
	})

	g := startLoginFarm(t, 12*time.Hour)
	r = g.login(t, g.jwt(t, "viewer", time.Now().Add(time.Hour)), "/status")
	c = r.cookie()
	if r.code != http.StatusSeeOther || c == nil || c.MaxAge > 3600 || c.MaxAge < 3000 {
		t.Fatalf("login with a JWT expiring in 1h: %d %v\n%s", r.code, r.resp.Header.Values("Set-Cookie"), r.body)
	}
	if r := g.send(t, "GET", "/status", nil, c); r.code != 200 {
		t.Errorf("/status with the JWT's session: %d %s", r.code, r.body)
	}
}

// TestLoginNextIsLocal: ?next= sends the browser only to a path of this
// server, never to another site.
func TestLoginNextIsLocal(t *testing.T) {
	f := startLoginFarm(t, 12*time.Hour)
	for next, want := range map[string]string{
		"/status/invocations?page=2": "/status/invocations?page=2",
		"//evil.example/status":      "/status",
		"https://evil.example/":      "/status",
		"/\\evil.example":            "/status",
		"http:/evil.example":         "/status",
		"javascript:alert(1)":        "/status",
		"/%0d%0aSet-Cookie:x=y":      "/%0d%0aSet-Cookie:x=y",
		"/login":                     "/status",
		"":                           "/status",
	} {
		r := f.login(t, f.tokens["viewer"], next)
		if r.code != http.StatusSeeOther || r.location() != want {
			t.Errorf("next=%q: %d to %q, want %q", next, r.code, r.location(), want)
		}
	}
}

// TestLoginBearerStillWorks: the Authorization header opens every page
// as before (the profiler needs admin, which viewer lacks), and a wrong
// one is a 401 even from a browser.
func TestLoginBearerStillWorks(t *testing.T) {
	f := startLoginFarm(t, 12*time.Hour)
	for _, p := range []string{"/status", "/metrics"} {
		if r := f.send(t, "GET", p, nil, nil, "Authorization", "Bearer "+f.tokens["viewer"]); r.code != 200 {
			t.Errorf("%s with the bearer token: %d %s", p, r.code, r.body)
		}
	}
	if r := f.send(t, "GET", "/debug/pprof/", nil, nil, "Authorization", "Bearer "+f.tokens["viewer"]); r.code != http.StatusForbidden || !strings.Contains(r.body, "lacks permission admin") {
		t.Errorf("/debug/pprof/ with the bearer token of a status identity: %d %s, want 403", r.code, r.body)
	}
	if r := f.send(t, "GET", "/status", nil, nil, "Authorization", "Bearer "+f.jwt(t, "viewer", time.Now().Add(time.Hour))); r.code != 200 || strings.Contains(r.body, `action="/logout"`) {
		t.Errorf("/status with a bearer JWT: %d (a logout button is only for a session)\n%s", r.code, r.body)
	}
	if r := f.send(t, "GET", "/status", nil, nil, "Authorization", "Bearer wrong-token-0123456789", "Accept", "text/html"); r.code != http.StatusUnauthorized {
		t.Errorf("/status with a wrong bearer token from a browser: %d to %q", r.code, r.location())
	}
}

// TestLoginRedirectsBrowser: a browser without credentials is sent to
// the form with the page it asked for; a script gets 401 saying how to
// authenticate; /healthz stays open.
func TestLoginRedirectsBrowser(t *testing.T) {
	f := startLoginFarm(t, 12*time.Hour)
	r := f.send(t, "GET", "/status/operation?name=x", nil, nil, "Accept", "text/html,application/xhtml+xml")
	if r.code != http.StatusSeeOther || r.location() != "/login?next="+url.QueryEscape("/status/operation?name=x") {
		t.Errorf("browser without credentials: %d to %q", r.code, r.location())
	}
	r = f.send(t, "GET", "/status", nil, &http.Cookie{Name: auth.SessionCookie, Value: "made-up"}, "Accept", "text/html")
	if r.code != http.StatusSeeOther || !strings.HasPrefix(r.location(), "/login?next=") {
		t.Errorf("browser with an unknown session: %d to %q", r.code, r.location())
	}
	r = f.send(t, "GET", "/metrics", nil, nil)
	if r.code != http.StatusUnauthorized || !strings.Contains(r.body, "log in at /login") || !strings.Contains(r.body, "Bearer TOKEN") {
		t.Errorf("script without credentials: %d %s", r.code, r.body)
	}
	if r := f.send(t, "POST", "/status/reload", url.Values{}, nil, "Accept", "text/html"); r.code != http.StatusUnauthorized {
		t.Errorf("a POST without credentials: %d (only a page a browser opens is redirected)", r.code)
	}
	if r := f.send(t, "GET", "/healthz", nil, nil); r.code != 200 {
		t.Errorf("/healthz: %d", r.code)
	}
}

// TestLoginSessionRecheckedOnReload: a reload (SIGHUP, the Reload
// button) keeps the sessions whose token is still valid, and ends those
// whose token was taken out of auth.tokens_file.
func TestLoginSessionRecheckedOnReload(t *testing.T) {
	f := startLoginFarm(t, 12*time.Hour)
	c := f.login(t, f.tokens["viewer"], "/status").cookie()
	if c == nil {
		t.Fatal("login set no cookie")
	}
	if err := f.srv.Reload(f.cfg); err != nil {
		t.Fatal(err)
	}
	if r := f.send(t, "GET", "/status", nil, c); r.code != 200 {
		t.Fatalf("/status after a reload that changed nothing: %d %s", r.code, r.body)
	}
	if err := os.WriteFile(f.tokensFile, []byte("viewer viewer-new-token-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := f.srv.Reload(f.cfg); err != nil {
		t.Fatal(err)
	}
	if r := f.send(t, "GET", "/status", nil, c); r.code != http.StatusUnauthorized {
		t.Errorf("/status after the token was removed: %d %s", r.code, r.body)
	}
}

// TestLoginSecureCookieUnderTLS: on a TLS port the session cookie is
// Secure, and opens the pages over TLS.
func TestLoginSecureCookieUnderTLS(t *testing.T) {
	f := startSecureFarm(t, func(c *config.Config) { c.Worker.Enabled = false })
	pem, err := os.ReadFile(f.ca.CertFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}, Timeout: 30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	defer hc.CloseIdleConnections()
	base := "https://" + f.srv.HTTPAddr()
	do := func(req *http.Request) (*http.Response, string) {
		t.Helper()
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	req, _ := http.NewRequest("GET", base+"/login", nil)
	_, page := do(req)
	m := csrfRE.FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no login form over TLS:\n%s", page)
	}
	tok, _ := os.ReadFile(f.tokens["p-status"])
	req, _ = http.NewRequest("POST", base+"/login", strings.NewReader(url.Values{"csrf": {m[1]}, "token": {string(tok)}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", base)
	resp, body := do(req)
	var c *http.Cookie
	for _, k := range resp.Cookies() {
		if k.Name == auth.SessionCookie {
			c = k
		}
	}
	if resp.StatusCode != http.StatusSeeOther || c == nil || !c.Secure || !c.HttpOnly || c.SameSite != http.SameSiteStrictMode {
		t.Fatalf("login over TLS: %d %v\n%s", resp.StatusCode, resp.Header.Values("Set-Cookie"), body)
	}
	req, _ = http.NewRequest("GET", base+"/metrics", nil)
	req.AddCookie(&http.Cookie{Name: c.Name, Value: c.Value})
	if resp, body := do(req); resp.StatusCode != 200 {
		t.Errorf("/metrics with the cookie over TLS: %d %s", resp.StatusCode, body)
	}
}
