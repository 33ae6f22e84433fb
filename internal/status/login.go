package status

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"html/template"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gantry-build/gantry/internal/auth"
)

// Login is the HTTP port's browser login, for auth.http_require_token:
// GET /login shows a form for a token or JWT, POST /login checks it as
// an Authorization header's bearer token is checked (the caller needs
// the status permission on every instance) and opens a session (an
// HttpOnly, SameSite=Strict cookie holding a random id; Secure under
// TLS), POST /logout ends it. auth.Authorizer.HTTPSessionHandler
// accepts the cookie on the other paths.
type Login struct {
	authz    *auth.Authorizer
	sessions *auth.Sessions
	log      *slog.Logger
	// token guards the form against login CSRF, with CheckOrigin.
	token string
	mux   *http.ServeMux
}

// NewLogin returns the login form of authz's callers, keeping their
// sessions in sessions.
func NewLogin(authz *auth.Authorizer, sessions *auth.Sessions, log *slog.Logger) *Login {
	b := make([]byte, 16)
	rand.Read(b)
	l := &Login{authz: authz, sessions: sessions, log: log, token: hex.EncodeToString(b), mux: http.NewServeMux()}
	l.mux.HandleFunc("GET /login", l.form)
	l.mux.HandleFunc("POST /login", l.login)
	l.mux.HandleFunc("POST /logout", l.logout)
	return l
}

// ServeHTTP implements http.Handler for /login and /logout.
func (l *Login) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Referrer-Policy", "same-origin")
	w.Header().Set("Cache-Control", "no-store")
	l.mux.ServeHTTP(w, r)
}

// loginPage is what the form shows.
type loginPage struct {
	Token, Next, Error string
	// Form is false when the form may not be used (plain text off
	// loopback).
	Form bool
}

func (l *Login) render(w http.ResponseWriter, code int, p loginPage) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(code)
	if err := loginTemplate.Execute(w, p); err != nil {
		l.log.Warn("rendering the login page failed", "err", err)
	}
}

func (l *Login) form(w http.ResponseWriter, r *http.Request) {
	next := LocalPath(r.URL.Query().Get("next"))
	if err := plainTextRemote(r); err != "" {
		l.render(w, http.StatusForbidden, loginPage{Error: err})
		return
	}
	l.render(w, http.StatusOK, loginPage{Token: l.token, Next: next, Form: true})
}

func (l *Login) login(w http.ResponseWriter, r *http.Request) {
	if err := plainTextRemote(r); err != "" {
		l.render(w, http.StatusForbidden, loginPage{Error: err})
		return
	}
	if err := CheckOrigin(r); err != nil {
		l.render(w, http.StatusForbidden, loginPage{Token: l.token, Next: "/status", Error: err.Error(), Form: true})
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	if err := r.ParseForm(); err != nil {
		l.render(w, http.StatusBadRequest, loginPage{Token: l.token, Next: "/status", Error: "the form does not parse: " + err.Error(), Form: true})
		return
	}
	page := loginPage{Token: l.token, Next: LocalPath(r.PostFormValue("next")), Form: true}
	if subtle.ConstantTimeCompare([]byte(r.PostFormValue("csrf")), []byte(l.token)) != 1 {
		page.Error = "the form's token is missing or stale (the server restarted?); try again"
		l.render(w, http.StatusForbidden, page)
		return
	}
	tok := strings.TrimSpace(r.PostFormValue("token"))
	if tok == "" {
		page.Error = "enter a token or JWT"
		l.render(w, http.StatusUnauthorized, page)
		return
	}
	id, err := l.authz.Login(tok, auth.PermStatus)
	if err != nil {
		code := http.StatusUnauthorized
		if status.Code(err) == codes.PermissionDenied {
			code = http.StatusForbidden
		}
		l.log.Info("browser login refused", "remote", r.RemoteAddr, "err", status.Convert(err).Message())
		page.Error = status.Convert(err).Message()
		l.render(w, code, page)
		return
	}
	sid, expires := l.sessions.Create(id, tok)
	http.SetCookie(w, &http.Cookie{Name: auth.SessionCookie, Value: sid, Path: "/", MaxAge: maxAge(time.Until(expires)),
		HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
	l.log.Info("browser login", "identity", id.String(), "remote", r.RemoteAddr, "expires", expires.UTC().Format(time.RFC3339))
	http.Redirect(w, r, page.Next, http.StatusSeeOther)
}

func (l *Login) logout(w http.ResponseWriter, r *http.Request) {
	if err := CheckOrigin(r); err != nil {
		l.render(w, http.StatusForbidden, loginPage{Error: err.Error()})
		return
	}
	if c, err := r.Cookie(auth.SessionCookie); err == nil && c.Value != "" {
		// The button's form carries the session's logout token, as the
		// other forms carry theirs: a page elsewhere cannot end it.
		r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
		r.ParseForm()
		if subtle.ConstantTimeCompare([]byte(r.PostFormValue("logout_token")), []byte(LogoutToken(c.Value))) != 1 {
			l.render(w, http.StatusForbidden, loginPage{Error: "the logout form's token is missing or does not match this session; log out with the button of a status page"})
			return
		}
		l.sessions.Delete(c.Value)
	}
	http.SetCookie(w, &http.Cookie{Name: auth.SessionCookie, Value: "", Path: "/", MaxAge: -1,
		HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, "/login", http.StatusSeeOther)
}

// LogoutToken is the token the logout button's form carries for the
// session sid: derived from the session id, which only the browser that
// holds the cookie (HttpOnly) and the server know.
func LogoutToken(sid string) string {
	sum := sha256.Sum256([]byte("gantry logout\x00" + sid))
	return hex.EncodeToString(sum[:16])
}

// maxAge is a cookie's Max-Age for a session that ends in d: to the
// nearest second (the server ends the session itself), at least 1.
func maxAge(d time.Duration) int {
	return max(1, int(d.Round(time.Second)/time.Second))
}

// LocalPath returns next when it is a path on this server ("/status?x"),
// else /status: the login form's ?next= must not send the browser to
// another site ("//evil.example", "https://…", "/\evil.example").
func LocalPath(next string) string {
	const home = "/status"
	if !strings.HasPrefix(next, "/") || strings.HasPrefix(next, "//") || strings.ContainsAny(next, "\\") ||
		strings.IndexFunc(next, func(c rune) bool { return c < ' ' || c == 0x7f }) >= 0 {
		return home
	}
	u, err := url.Parse(next)
	if err != nil || u.Scheme != "" || u.Host != "" || u.User != nil || u.Path == "/login" || u.Path == "/logout" {
		return home
	}
	return next
}

// plainTextRemote says why the form is refused when it would carry a
// token in plain text off loopback (the configuration refuses that too:
// auth.http_require_token needs tls off loopback), else "".
func plainTextRemote(r *http.Request) string {
	if r.TLS != nil {
		return ""
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if ip := net.ParseIP(host); err == nil && ip != nil && ip.IsLoopback() {
		return ""
	}
	return "this port serves plain text, and a token must not cross the network unencrypted; configure tls.cert_file and tls.key_file and open the page over https"
}

var loginTemplate = template.Must(template.New("login").Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Log in · Gantry</title>
<style>
body{font:14px/1.4 system-ui,sans-serif;margin:0;color:#222;background:#fafafa}
header{background:#234;color:#fff;padding:.5em 1em}
main{padding:1em;max-width:32em}
label{display:block;margin:.5em 0}
input[type=password]{width:100%;box-sizing:border-box;font:inherit;padding:.3em}
.error{background:#fee;border:1px solid #c88;padding:.4em;margin:.5em 0}
.muted{color:#777}
</style></head><body>
<header><strong>Gantry</strong></header>
<main><h1>Log in</h1>
{{if .Error}}<p class="error" id="login-error" role="alert">{{.Error}}</p>{{end}}
{{if .Form}}<form method="post" action="/login">
<input type="hidden" name="csrf" value="{{.Token}}"><input type="hidden" name="next" value="{{.Next}}">
<label for="token">Token or JWT</label>
<input type="password" id="token" name="token" autocomplete="current-password" required autofocus>
<p><button type="submit">Log in</button></p>
</form>
<p class="muted">A token from auth.tokens_file or a JWT of an identity with the status permission. The browser keeps a session cookie, not the token.</p>{{end}}
</main></body></html>
`))
