package status

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/gantry-build/gantry/internal/auth"
)

// TestLoginRefusesPlainTextOffLoopback: off loopback the form is not
// offered, nor a token taken, without TLS (as the configuration refuses
// auth.http_require_token there).
func TestLoginRefusesPlainTextOffLoopback(t *testing.T) {
	toks, err := auth.ParseTokens([]byte("viewer viewer-token-0123456789\n"), "tokens")
	if err != nil {
		t.Fatal(err)
	}
	pol, err := auth.CompilePolicy([]auth.Rule{{Identities: []string{"viewer"}, Instances: []string{"*"}, Permissions: []string{"status"}}}, "policy")
	if err != nil {
		t.Fatal(err)
	}
	sessions := auth.NewSessions(time.Hour, 0, time.Now)
	l := NewLogin(auth.New(auth.Settings{Tokens: toks, Policy: pol}, nil), sessions, slog.Default())
	for _, remote := range []string{"192.0.2.7:40000", "127.0.0.1:40000"} {
		r := httptest.NewRequest("GET", "/login", nil)
		r.RemoteAddr = remote
		w := httptest.NewRecorder()
		l.ServeHTTP(w, r)
		token := formToken(w.Body.String())
		offLoopback := !strings.HasPrefix(remote, "127.")
		if offLoopback != (w.Code == http.StatusForbidden) || offLoopback != (token == "") || offLoopback != strings.Contains(w.Body.String(), "plain text") {
			t.Errorf("GET /login from %s: %d\n%s", remote, w.Code, w.Body)
		}
	}
	form := url.Values{"csrf": {l.token}, "token": {"viewer-token-0123456789"}}
	r := httptest.NewRequest("POST", "/login", strings.NewReader(form.Encode()))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	r.RemoteAddr = "192.0.2.7:40000"
	w := httptest.NewRecorder()
	l.ServeHTTP(w, r)
	if w.Code != http.StatusForbidden || len(w.Result().Cookies()) != 0 || sessions.Len() != 0 {
		t.Errorf("POST /login from off loopback in plain text: %d, cookies %v", w.Code, w.Result().Cookies())
	}
}

// formToken returns the form's csrf token, or "".
func formToken(body string) string {
	_, rest, ok := strings.Cut(body, `name="csrf" value="`)
	if !ok {
		return ""
	}
	tok, _, _ := strings.Cut(rest, `"`)
	return tok
}
