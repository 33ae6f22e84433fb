package server

import (
	"context"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"

	"github.com/gantry-build/gantry/internal/client"
	"github.com/gantry-build/gantry/internal/config"
	"github.com/gantry-build/gantry/internal/digest"
	"github.com/gantry-build/gantry/internal/scheduler"
)

// TestHTTPPortClosedWhenAuthOn: auth.enabled and nothing said about the
// HTTP port. A caller without credentials gets 401 saying how to
// authenticate on every page, download, button, /metrics and the
// profiler (even holding a valid form token), and nothing happens;
// /healthz stays open for probes.
func TestHTTPPortClosedWhenAuthOn(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	f := startAuthStatusFarm(t)
	alice := f.conn(t, "alice")

	// A finished operation with stdout in the CAS and a queued one.
	cas := client.NewCAS(alice, "team-a/main", digest.SHA256, 0)
	ad := putMsg(ctx, t, cas, &repb.Action{CommandDigest: putMsg(ctx, t, cas, shCmd("echo secret-out")).Proto(), InputRootDigest: putMsg(ctx, t, cas, &repb.Directory{}).Proto()})
	resp, done, err := client.Execute(ctx, alice, &repb.ExecuteRequest{InstanceName: "team-a/main", ActionDigest: ad.Proto()})
	if err != nil || resp.Result.GetExitCode() != 0 {
		t.Fatalf("alice's action: %v %v", resp, err)
	}
	queued := queueOn(ctx, t, f.srv, alice, "team-a/main", "echo queued")
	_, page, _ := f.do(t, "op", "/status/operation?name="+url.QueryEscape(done), nil)
	blob := regexp.MustCompile(`href="(/status/blob\?[^"]+name=stdout[^"]*)"`).FindStringSubmatch(page)
	if blob == nil {
		t.Fatalf("no stdout link on op's view of the operation:\n%s", page)
	}
	_, page, _ = f.do(t, "op", "/status", nil)
	m := csrfRE.FindStringSubmatch(page)
	if m == nil {
		t.Fatal("no form token on op's page")
	}
	csrf := m[1]

	const hint = "this page requires authentication; log in at /login in a browser, or send a bearer token in the Authorization header"
	for _, path := range []string{"/", "/status", "/status/invocations", "/status/fairness", "/status/failures", "/status/charts",
		"/status/operation?name=" + url.QueryEscape(done), blob[1], "/metrics",
		"/debug/pprof/", "/debug/pprof/goroutine?debug=2", "/debug/pprof/profile?seconds=1", "/debug/pprof/trace?seconds=1", "/debug/pprof/symbol"} {
		if code, body, _ := f.do(t, "", path, nil); code != http.StatusUnauthorized || !strings.Contains(body, hint) || strings.Contains(body, "secret-out") {
			t.Errorf("GET %s without credentials: %d, want 401 saying %q:\n%.300s", path, code, hint, body)
		}
	}
	for _, post := range []struct {
		path string
		form url.Values
	}{
		{"/status/kill", url.Values{"name": {queued}}},
		{"/status/worker", url.Values{"worker": {"w1"}, "action": {"pause"}}},
		{"/status/worker", url.Values{"worker": {"w1"}, "action": {"drain"}}},
		{"/status/worker", url.Values{"worker": {"w1"}, "action": {"terminate"}}},
		{"/status/worker", url.Values{"worker": {"w1"}, "action": {"resume"}}},
		{"/status/worker", url.Values{"worker": {"w1"}, "action": {"undrain"}}},
		{"/status/reload", url.Values{}},
	} {
		post.form.Set("csrf", csrf)
		if code, body, loc := f.do(t, "", post.path, post.form); code != http.StatusUnauthorized || !strings.Contains(body, hint) {
			t.Errorf("POST %s %v without credentials: %d (to %q), want 401 saying %q:\n%.300s", post.path, post.form, code, loc, hint, body)
		}
	}
	if c := f.srv.Scheduler().WorkerControlOf("w1"); c != (scheduler.WorkerControl{}) {
		t.Errorf("posts without credentials changed the worker: %+v", c)
	}
	if info, err := f.srv.Scheduler().Operation(queued); err != nil || info.Done {
		t.Errorf("a post without credentials killed %s: %+v %v", queued, info, err)
	}
	// A browser is sent to the login form instead.
	req, _ := http.NewRequest("GET", f.base+"/status", nil)
	req.Header.Set("Accept", "text/html")
	r, err := noRedirect.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	if loc := r.Header.Get("Location"); r.StatusCode != http.StatusSeeOther || !strings.HasPrefix(loc, "/login?next=") {
		t.Errorf("a browser without credentials: %d to %q, want 303 to /login", r.StatusCode, loc)
	}
	if code, body, _ := f.do(t, "", "/healthz", nil); code != http.StatusOK || !strings.HasPrefix(body, "ok") {
		t.Errorf("/healthz without credentials: %d %q, want 200 (probes need it)", code, body)
	}
	if len(logLines(t, f.log.String(), openHTTPWarning, nil)) != 0 {
		t.Error("the opt-out warning was logged although the port requires credentials")
	}
}

// TestPprofNeedsAdmin: the profiler (goroutine dumps, traces) needs the
// admin permission on every instance besides status; status alone shows
// the pages and /metrics only.
func TestPprofNeedsAdmin(t *testing.T) {
	f := startAuthStatusFarm(t)
	for _, path := range []string{"/debug/pprof/", "/debug/pprof/goroutine?debug=2", "/debug/pprof/heap", "/debug/pprof/profile?seconds=1", "/debug/pprof/trace?seconds=1", "/debug/pprof/symbol"} {
		want := `token:viewer lacks permission admin on every instance (a rule with instances: ["*"]) for GET ` + strings.SplitN(path, "?", 2)[0] + "; ask the server's administrator to grant it in auth.policy"
		if code, body, _ := f.do(t, "viewer", path, nil); code != http.StatusForbidden || !strings.Contains(body, want) {
			t.Errorf("GET %s as viewer (status): %d, want 403 saying %q:\n%.300s", path, code, want, body)
		}
	}
	if code, _, _ := f.do(t, "viewer", "/metrics", nil); code != http.StatusOK {
		t.Errorf("/metrics as viewer (status): %d, want 200", code)
	}
	for path, want := range map[string]string{"/debug/pprof/": "goroutine", "/debug/pprof/goroutine?debug=2": "goroutine ", "/debug/pprof/symbol": "num_symbols"} {
		if code, body, _ := f.do(t, "op", path, nil); code != http.StatusOK || !strings.Contains(body, want) {
			t.Errorf("GET %s as op (status and admin): %d, want 200 with %q:\n%.300s", path, code, want, body)
		}
	}
}

// TestHTTPPortOptOutWarns: auth.http_require_token: false opts the HTTP
// port out explicitly; it is then open, and the server logs a warning at
// start naming what it leaves open.
func TestHTTPPortOptOutWarns(t *testing.T) {
	f := startAuthStatusFarm(t, func(cfg *config.Config) {
		open := false
		cfg.Auth.HTTPRequireToken = &open
	})
	for _, path := range []string{"/status", "/metrics", "/debug/pprof/"} {
		if code, body, _ := f.do(t, "", path, nil); code != http.StatusOK {
			t.Errorf("GET %s without credentials, opted out: %d, want 200:\n%.300s", path, code, body)
		}
	}
	lines := logLines(t, f.log.String(), openHTTPWarning, map[string]string{"http": f.srv.HTTPAddr(), "open": "kill operations"})
	if len(lines) != 1 || lines[0]["level"] != "WARN" {
		t.Errorf("want one warning %q naming the port and the buttons, got %v in:\n%s", openHTTPWarning, lines, f.log.String())
	}
}

// TestHTTPRequireTokenNeedsRestart: a reload cannot open (or close) the
// HTTP port: it is refused, naming the key, and the port stays closed.
func TestHTTPRequireTokenNeedsRestart(t *testing.T) {
	f := startAuthStatusFarm(t)
	cfg := f.srv.config()
	open := false
	cfg.Auth.HTTPRequireToken = &open
	if err := f.srv.Reload(cfg); err == nil || !strings.Contains(err.Error(), "auth.http_require_token: changing whether the HTTP port requires credentials needs a restart") {
		t.Errorf("reload opting the HTTP port out: %v, want a refusal", err)
	}
	if code, _, _ := f.do(t, "", "/metrics", nil); code != http.StatusUnauthorized {
		t.Errorf("/metrics without credentials after the refused reload: %d, want 401", code)
	}
}
