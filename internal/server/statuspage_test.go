package server

import (
	"context"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	adminpb "github.com/gantry-build/gantry/api/admin/v1"
	"github.com/gantry-build/gantry/internal/blobstore"
	"github.com/gantry-build/gantry/internal/client"
	"github.com/gantry-build/gantry/internal/config"
	"github.com/gantry-build/gantry/internal/digest"
	"github.com/gantry-build/gantry/internal/protocol"
	"github.com/gantry-build/gantry/internal/scheduler"
	"github.com/gantry-build/gantry/internal/testutil"
)

// scenario is a farm with one worker ("w1") and three actions: one
// failed, one executing (until dir/run.go exists), one queued (no worker
// has its pool).
type scenario struct {
	*farm
	base                    string
	failed, running, queued string
}

func startScenario(t *testing.T, ctx context.Context) *scenario {
	t.Helper()
	return startScenarioLog(t, ctx, quietLogger())
}

// startScenarioLog is startScenario with the server logging to log,
// built with opts.
func startScenarioLog(t *testing.T, ctx context.Context, log *slog.Logger, opts ...Option) *scenario {
	t.Helper()
	f := observedFarm(t, log, func(c *config.Config) {
		c.Worker.ID = "w1"
		c.Worker.Cores = 1
		c.Worker.AcceptUnknownProperties = false
		c.Status.Refresh = 0
	}, opts...)
	s := &scenario{farm: f, base: "http://" + f.srv.HTTPAddr()}
	fail := f.start(withInvocation(ctx, "build-7", "test"), shCmd("echo oops-out; echo oops-err >&2; exit 3"))
	if r := fail.wait(ctx, t); r.Result.GetExitCode() != 3 {
		t.Fatalf("failing action: %v", r)
	}
	s.failed = fail.name
	run := f.start(withInvocation(ctx, "build-9", "compile"), gated(f.dir, "run"))
	waitForPID(ctx, t, filepath.Join(f.dir, "run.pid"))
	waitFor(ctx, t, "the action to be executing", func() bool {
		info, err := f.srv.Scheduler().Operation(run.name)
		return err == nil && info.Stage == repb.ExecutionStage_EXECUTING
	})
	s.running = run.name
	s.queued = f.start(withInvocation(ctx, "build-9", "link"), shCmd("echo never"), &repb.Platform_Property{Name: "pool", Value: "nowhere"}).name
	// The name comes with the first update (CACHE_CHECK), before the
	// action is queued.
	waitFor(ctx, t, "the third action to be queued", func() bool {
		info, err := f.srv.Scheduler().Operation(s.queued)
		return err == nil && info.Stage == repb.ExecutionStage_QUEUED
	})
	return s
}

// withInvocation sends Bazel's request metadata for a build (correlated
// invocations id) and one of its commands (tool invocation id).
func withInvocation(ctx context.Context, build, tool string) context.Context {
	b, _ := proto.Marshal(&repb.RequestMetadata{CorrelatedInvocationsId: build, ToolInvocationId: tool, ToolDetails: &repb.ToolDetails{ToolName: "bazel"}})
	return metadata.AppendToOutgoingContext(ctx, protocol.RequestMetadataHeader, string(b))
}

func (s *scenario) get(t *testing.T, path string, hdr ...string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", s.base+path, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

var csrfRE = regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`)

func contains(t *testing.T, what, body string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(body, w) {
			t.Errorf("%s lacks %q", what, w)
		}
	}
}

func TestStatusPages(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s := startScenario(t, ctx)

	code, body := s.get(t, "/status")
	if code != 200 {
		t.Fatalf("/status: %d\n%s", code, body)
	}
	// The port's root leads to the same page (the client follows the
	// redirect); other unknown paths are still 404.
	if code, root := s.get(t, "/"); code != 200 || !strings.Contains(root, "Gantry status") {
		t.Fatalf("/: %d\n%s", code, root)
	}
	if code, _ := s.get(t, "/nothing-here"); code != 404 {
		t.Fatalf("/nothing-here: %d, want 404", code)
	}
	contains(t, "overview", body, "1 queued · 0 held · 1 executing · 1 workers", "1 recent failures", `data-worker="w1"`, s.running, s.queued, "EXECUTING", "QUEUED", ">active<")
	// Pagination of the operations in progress.
	_, body = s.get(t, "/status?per=1&opage=2")
	contains(t, "page 2", body, "Page 2 of 2 (2 in all)", "← previous", s.queued)
	if strings.Contains(body, s.running) && !strings.Contains(body, `data-worker="w1"`) {
		t.Error("page 2 shows the first operation")
	}

	// The failed operation's page, its stdout downloaded from the CAS.
	code, body = s.get(t, "/status/operation?name="+url.QueryEscape(s.failed))
	if code != 200 {
		t.Fatalf("operation page: %d", code)
	}
	contains(t, "operation page", body, "/bin/sh -c echo oops-out", "Exit code</th><td>3", "execution started", "queued", "stdout", "stderr")
	link := regexp.MustCompile(`href="(/status/blob\?[^"]+name=stdout[^"]*)"`).FindStringSubmatch(body)
	if link == nil {
		t.Fatalf("no stdout link on\n%s", body)
	}
	if code, out := s.get(t, strings.ReplaceAll(link[1], "&amp;", "&")); code != 200 || out != "oops-out\n" {
		t.Errorf("stdout download: %d %q", code, out)
	}
	_, body = s.get(t, "/status/failures")
	contains(t, "failures", body, s.failed, ">3<", "w1")
	_, body = s.get(t, "/status/fairness", "Accept", "text/html")
	contains(t, "invocations page", body, "<table id=\"invocations\"", "(all)", "build-9", "compile", "link")
	if _, text := s.get(t, "/status/invocations"); strings.Contains(text, "<html") {
		t.Error("/status/invocations without Accept: text/html is not text")
	}

	// Errors say what to do.
	if code, body := s.get(t, "/status/operation?name=nope"); code != 404 || !strings.Contains(body, "scheduler.retention") {
		t.Errorf("unknown operation: %d", code)
	}
	if code, _ := s.get(t, "/status/blob?hash=zz&size=x"); code != 400 {
		t.Errorf("bad blob link: %d", code)
	}

	// Controls: a POST needs the page's token and the same origin.
	_, body = s.get(t, "/status")
	m := csrfRE.FindStringSubmatch(body)
	if m == nil {
		t.Fatal("no token in the page")
	}
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	post := func(form url.Values, origin string) int {
		req, _ := http.NewRequest("POST", s.base+"/status/worker", strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		resp, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if c := post(url.Values{"worker": {"w1"}, "action": {"drain"}}, ""); c != 403 {
		t.Errorf("POST without a token: %d", c)
	}
	if c := post(url.Values{"worker": {"w1"}, "action": {"drain"}, "csrf": {m[1]}}, "http://evil.example"); c != 403 {
		t.Errorf("cross-origin POST: %d", c)
	}
	if s.srv.Scheduler().WorkerControlOf("w1").Drain {
		t.Fatal("a refused POST drained the worker")
	}
	if c := post(url.Values{"worker": {"w1"}, "action": {"drain"}, "csrf": {m[1]}}, s.base); c != http.StatusSeeOther {
		t.Fatalf("POST with the token: %d", c)
	}
	if !s.srv.Scheduler().WorkerControlOf("w1").Drain {
		t.Fatal("the drain button did not drain")
	}
	_, body = s.get(t, "/status")
	contains(t, "overview after drain", body, ">draining<", `value="undrain"`)

	// The Kill button of the queued operation.
	req, _ := http.NewRequest("POST", s.base+"/status/kill", strings.NewReader(url.Values{"name": {s.queued}, "csrf": {m[1]}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := http.DefaultClient.Do(req) // follows the redirect to the overview
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	contains(t, "overview after kill", string(b), s.queued+" killed")
	if info, err := s.srv.Scheduler().Operation(s.queued); err != nil || !info.Done || info.Response.Status.GetCode() != int32(codes.Canceled) {
		t.Errorf("killed operation: %+v %v", info, err)
	}
	s.finish(t, ctx)
}

// finish lets the running action end.
func (s *scenario) finish(t *testing.T, ctx context.Context) {
	writeFile(t, filepath.Join(s.dir, "run.go"))
}

func writeFile(t *testing.T, path string) {
	t.Helper()
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

// authStatusFarm is a server whose HTTP port requires a token
// (auth.enabled alone: auth.http_require_token is left unset), on
// plain-text loopback, logging JSON to log.
// Identities: viewer (status only), alice (status; execute, read, write
// and admin on team-a/*), bob (execute, read, write on team-b/*) and op
// (status, admin and cas.read on every instance).
type authStatusFarm struct {
	srv    *Server
	base   string
	dir    string
	log    *testutil.SyncBuffer
	tokens map[string]string // subject -> token
}

func startAuthStatusFarm(t *testing.T, mods ...func(*config.Config)) *authStatusFarm {
	t.Helper()
	f := &authStatusFarm{dir: t.TempDir(), log: &testutil.SyncBuffer{}, tokens: map[string]string{}}
	var lines []string
	for _, s := range []string{"viewer", "alice", "bob", "op"} {
		f.tokens[s] = s + "-status-token-0123456789"
		lines = append(lines, s+" "+f.tokens[s])
	}
	tokensFile := filepath.Join(f.dir, "tokens")
	if err := os.WriteFile(tokensFile, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.Listen, cfg.HTTPListen = "127.0.0.1:0", "127.0.0.1:0"
	cfg.DataDir = t.TempDir()
	cfg.Worker.ID, cfg.Worker.Cores, cfg.Worker.AcceptUnknownProperties = "w1", 1, false
	cfg.Scheduler.HeartbeatInterval = config.Duration(100 * time.Millisecond)
	cfg.Scheduler.HeartbeatTimeout = config.Duration(time.Second)
	cfg.Status.Refresh = 0
	cfg.Auth.Enabled, cfg.Auth.TokensFile = true, tokensFile
	cfg.Auth.Policy = []config.PolicyRule{
		{Identities: []string{"viewer", "alice"}, Instances: []string{"*"}, Permissions: []string{"status"}},
		{Identities: []string{"alice"}, Instances: []string{"team-a/*"}, Permissions: []string{"read", "write", "execute", "admin"}},
		{Identities: []string{"bob"}, Instances: []string{"team-b/*"}, Permissions: []string{"read", "write", "execute"}},
		{Identities: []string{"op"}, Instances: []string{"*"}, Permissions: []string{"status", "admin", "cas.read"}},
	}
	for _, mod := range mods {
		mod(&cfg)
	}
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

// conn is a gRPC connection with subject's token.
func (f *authStatusFarm) conn(t *testing.T, subject string) *grpc.ClientConn {
	t.Helper()
	file := filepath.Join(f.dir, subject+".token")
	if err := os.WriteFile(file, []byte(f.tokens[subject]), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := client.DialSecure(f.srv.GRPCAddr(), client.Security{TokenFile: file})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// do sends a request as subject ("": without credentials; a form makes
// it a POST, as a browser sends it) and returns the status, the
// unescaped body and the redirect.
func (f *authStatusFarm) do(t *testing.T, subject, path string, form url.Values) (code int, body, location string) {
	t.Helper()
	method, rd := "GET", io.Reader(nil)
	if form != nil {
		method, rd = "POST", strings.NewReader(form.Encode())
	}
	req, _ := http.NewRequest(method, f.base+path, rd)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Origin", f.base)
	}
	if subject != "" {
		req.Header.Set("Authorization", "Bearer "+f.tokens[subject])
	}
	resp, err := noRedirect.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	loc, _ := url.QueryUnescape(resp.Header.Get("Location"))
	return resp.StatusCode, html.UnescapeString(string(b)), loc
}

var noRedirect = &http.Client{Timeout: 30 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

// queueOn submits an action no worker takes (pool=nowhere) to instance
// and returns its operation's name once it is queued.
func queueOn(ctx context.Context, t *testing.T, srv *Server, conn *grpc.ClientConn, instance, script string) string {
	t.Helper()
	cas := client.NewCAS(conn, instance, digest.SHA256, 0)
	put := func(m proto.Message) digest.Digest { return putMsg(ctx, t, cas, m) }
	a := put(&repb.Action{CommandDigest: put(shCmd(script)).Proto(), InputRootDigest: put(&repb.Directory{}).Proto(), DoNotCache: true,
		Platform: &repb.Platform{Properties: []*repb.Platform_Property{{Name: "pool", Value: "nowhere"}}}})
	stream, err := repb.NewExecutionClient(conn).Execute(ctx, &repb.ExecuteRequest{InstanceName: instance, ActionDigest: a.Proto()})
	if err != nil {
		t.Fatal(err)
	}
	name := mustRecv(t, stream).Name
	go func() {
		for {
			if _, err := stream.Recv(); err != nil {
				return
			}
		}
	}()
	waitFor(ctx, t, "operation "+name+" to be queued", func() bool {
		info, err := srv.Scheduler().Operation(name)
		return err == nil && info.Stage == repb.ExecutionStage_QUEUED
	})
	return name
}

// logLines returns the JSON log lines with msg whose fields include want.
func logLines(t *testing.T, log string, msg string, want map[string]string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(log, "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) != nil || m["msg"] != msg {
			continue
		}
		match := true
		for k, v := range want {
			if s, _ := m[k].(string); !strings.Contains(s, v) {
				match = false
			}
		}
		if match {
			out = append(out, m)
		}
	}
	return out
}

// TestStatusControlsNeedAdmin: with auth on the status
// permission shows the pages, but each control needs admin (on the
// operation's instance for a kill, on every instance otherwise) and a
// download cas.read on its instance; buttons the viewer may not use are
// not shown.
func TestStatusControlsNeedAdmin(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	f := startAuthStatusFarm(t)
	alice, bob := f.conn(t, "alice"), f.conn(t, "bob")

	// A finished team-a operation with stdout in the CAS, and one queued
	// operation of each team.
	cas := client.NewCAS(alice, "team-a/main", digest.SHA256, 0)
	ad := putMsg(ctx, t, cas, &repb.Action{CommandDigest: putMsg(ctx, t, cas, shCmd("echo secret-out")).Proto(), InputRootDigest: putMsg(ctx, t, cas, &repb.Directory{}).Proto()})
	resp, done, err := client.Execute(ctx, alice, &repb.ExecuteRequest{InstanceName: "team-a/main", ActionDigest: ad.Proto()})
	if err != nil || resp.Result.GetExitCode() != 0 {
		t.Fatalf("alice's action: %v %v", resp, err)
	}
	qa := queueOn(ctx, t, f.srv, alice, "team-a/main", "echo a")
	qb := queueOn(ctx, t, f.srv, bob, "team-b/x", "echo b")

	// op sees every button; the form token is the same for everyone.
	code, page, _ := f.do(t, "op", "/status", nil)
	if code != 200 {
		t.Fatalf("/status as op: %d %s", code, page)
	}
	contains(t, "overview as op", page, `value="drain"`, `value="terminate"`, `value="pause"`, `action="/status/reload"`, `value="`+qa+`"`, `value="`+qb+`"`)
	m := csrfRE.FindStringSubmatch(page)
	if m == nil {
		t.Fatal("no form token on op's page")
	}
	csrf := m[1]
	// viewer sees none; alice only the Kill button of team-a's operation.
	_, page, _ = f.do(t, "viewer", "/status", nil)
	for _, no := range []string{"<form", `value="drain"`, "/status/reload", "/status/kill", "Drain", "Reload configuration"} {
		if strings.Contains(page, no) {
			t.Errorf("overview as viewer shows %q", no)
		}
	}
	contains(t, "overview as viewer", page, "admin only", qa, qb)
	_, page, _ = f.do(t, "alice", "/status", nil)
	contains(t, "overview as alice", page, `action="/status/kill"`, `value="`+qa+`"`)
	if strings.Contains(page, `value="`+qb+`"`) || strings.Contains(page, `value="drain"`) || strings.Contains(page, "/status/reload") {
		t.Error("alice is shown controls she may not use")
	}

	// Refused: 403 naming the identity and the missing permission, and
	// nothing happens.
	denied := []struct {
		who, path string
		form      url.Values
		want      string
	}{
		{"viewer", "/status/worker", url.Values{"worker": {"w1"}, "action": {"drain"}}, `token:viewer lacks permission admin on every instance (a rule with instances: ["*"]) for POST /status/worker`},
		{"viewer", "/status/worker", url.Values{"worker": {"w1"}, "action": {"terminate"}}, `token:viewer lacks permission admin on every instance`},
		{"viewer", "/status/kill", url.Values{"name": {qa}}, fmt.Sprintf(`token:viewer lacks permission admin on instance "team-a/main" (operation %q) for POST /status/kill`, qa)},
		{"viewer", "/status/kill", url.Values{"name": {"no-such-operation"}}, `token:viewer lacks permission admin on any instance`},
		{"viewer", "/status/reload", url.Values{}, `token:viewer lacks permission admin on every instance (a rule with instances: ["*"]) for POST /status/reload`},
		{"alice", "/status/worker", url.Values{"worker": {"w1"}, "action": {"pause"}}, `token:alice lacks permission admin on every instance`},
		{"alice", "/status/kill", url.Values{"name": {qb}}, fmt.Sprintf(`token:alice lacks permission admin on instance "team-b/x" (operation %q)`, qb)},
		{"alice", "/status/reload", url.Values{}, `token:alice lacks permission admin on every instance`},
	}
	for _, d := range denied {
		d.form.Set("csrf", csrf)
		if code, body, _ := f.do(t, d.who, d.path, d.form); code != http.StatusForbidden || !strings.Contains(body, d.want) || !strings.Contains(body, "auth.policy") {
			t.Errorf("%s POST %s %v: %d, want 403 saying %q:\n%s", d.who, d.path, d.form, code, d.want, body)
		}
	}
	if c := f.srv.Scheduler().WorkerControlOf("w1"); c != (scheduler.WorkerControl{}) {
		t.Errorf("refused controls changed the worker: %+v", c)
	}
	for _, name := range []string{qa, qb} {
		if info, err := f.srv.Scheduler().Operation(name); err != nil || info.Done {
			t.Errorf("a refused kill finished %s: %+v %v", name, info, err)
		}
	}

	// An operation's page (its command, environment, outputs) needs
	// cas.read on its instance; so do downloads, on the instance they are
	// read under.
	opPage := "/status/operation?name=" + url.QueryEscape(done)
	for _, who := range []string{"viewer", "bob"} {
		want := fmt.Sprintf(`token:viewer lacks permission cas.read on instance "team-a/main" (operation %q) for GET /status/operation`, done)
		if who == "bob" {
			want = "" // bob lacks status: the port refuses him
		}
		if code, body, _ := f.do(t, who, opPage, nil); code != http.StatusForbidden || !strings.Contains(body, want) || strings.Contains(body, "secret-out") {
			t.Errorf("%s GET %s: %d, want 403 saying %q:\n%s", who, opPage, code, want, body)
		}
	}
	_, page, _ = f.do(t, "alice", opPage, nil)
	link := regexp.MustCompile(`href="(/status/blob\?[^"]+name=stdout[^"]*)"`).FindStringSubmatch(page)
	if link == nil {
		t.Fatalf("no stdout link on\n%s", page)
	}
	if !strings.Contains(link[1], "instance=team-a%2Fmain") {
		t.Errorf("the stdout link %s does not name the operation's instance", link[1])
	}
	other := strings.Replace(link[1], "instance=team-a%2Fmain", "instance=team-b%2Fx", 1)
	noInst := strings.Replace(link[1], "instance=team-a%2Fmain", "", 1)
	for _, c := range []struct {
		who, link string
		code      int
		want      string
	}{
		{"viewer", link[1], 403, `token:viewer lacks permission cas.read on instance "team-a/main" for GET /status/blob`},
		{"viewer", noInst, 403, `token:viewer lacks permission cas.read on instance ""`},
		{"alice", other, 403, `token:alice lacks permission cas.read on instance "team-b/x"`},
		{"bob", link[1], 403, ""}, // bob lacks status: the port refuses him
		{"alice", link[1], 200, "secret-out\n"},
		{"op", link[1], 200, "secret-out\n"},
	} {
		code, body, _ := f.do(t, c.who, c.link, nil)
		if code != c.code || !strings.Contains(body, c.want) || (code == 200 && body != c.want) {
			t.Errorf("%s GET %s: %d %q, want %d %q", c.who, c.link, code, body, c.code, c.want)
		}
	}

	// Allowed: alice kills team-a's operation; op drains the worker,
	// kills team-b's and reloads (this server has no --config: the
	// service answers, so the post got through).
	allowed := []struct {
		who, path string
		form      url.Values
		flash     string
	}{
		{"alice", "/status/kill", url.Values{"name": {qa}}, qa + " killed"},
		{"op", "/status/worker", url.Values{"worker": {"w1"}, "action": {"drain"}}, "w1: drain done"},
		{"op", "/status/kill", url.Values{"name": {qb}}, qb + " killed"},
		{"op", "/status/kill", url.Values{"name": {"no-such-operation"}}, `failed: operation "no-such-operation" is not known`},
		{"op", "/status/reload", url.Values{}, "failed: this server cannot reload its configuration"},
	}
	for _, a := range allowed {
		a.form.Set("csrf", csrf)
		if code, body, loc := f.do(t, a.who, a.path, a.form); code != http.StatusSeeOther || !strings.Contains(loc, a.flash) {
			t.Errorf("%s POST %s %v: %d to %q, want 303 with %q:\n%s", a.who, a.path, a.form, code, loc, a.flash, body)
		}
	}
	if !f.srv.Scheduler().WorkerControlOf("w1").Drain {
		t.Error("op's drain did not drain the worker")
	}
	for _, name := range []string{qa, qb} {
		if info, err := f.srv.Scheduler().Operation(name); err != nil || !info.Done || info.Response.Status.GetCode() != int32(codes.Canceled) {
			t.Errorf("killed operation %s: %+v %v", name, info, err)
		}
	}

	// Every control is logged, the refused ones with the identity and
	// why.
	log := f.log.String()
	for _, c := range []struct {
		msg  string
		want map[string]string
	}{
		{"admin control refused", map[string]string{"control": "drain", "worker": "w1", "by": "as token:viewer", "err": "token:viewer lacks permission admin"}},
		{"admin control refused", map[string]string{"control": "kill", "operation": qb, "by": "as token:alice", "err": "token:alice lacks permission admin on instance \"team-b/x\""}},
		{"admin control refused", map[string]string{"control": "reload", "by": "as token:viewer", "err": "lacks permission admin"}},
		{"admin control refused", map[string]string{"control": "kill", "operation": "no-such-operation", "by": "as token:op", "err": "is not known"}},
		{"admin control", map[string]string{"control": "kill", "operation": qa, "by": "status page from 127.0.0.1:"}},
		{"admin control", map[string]string{"control": "drain", "worker": "w1", "by": "as token:op"}},
	} {
		if len(logLines(t, log, c.msg, c.want)) != 1 {
			t.Errorf("want one log line %q with %v in\n%s", c.msg, c.want, log)
		}
	}

	// The gRPC admin service: a refused control is logged too.
	_, err = adminpb.NewAdminClient(alice).UndrainWorker(ctx, &adminpb.WorkerControlRequest{WorkerId: "w1", Reason: "try"})
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("alice's UndrainWorker over gRPC: %v", err)
	}
	if _, err := adminpb.NewAdminClient(f.conn(t, "op")).UndrainWorker(ctx, &adminpb.WorkerControlRequest{WorkerId: "w1", Reason: "done"}); err != nil {
		t.Fatalf("op's UndrainWorker over gRPC: %v", err)
	}
	log = f.log.String()
	if len(logLines(t, log, "admin control refused", map[string]string{"control": "undrain", "worker": "w1", "reason": "try", "by": "gRPC 127.0.0.1:", "err": "token:alice lacks permission admin"})) != 1 {
		t.Errorf("no log line for alice's refused gRPC undrain in\n%s", log)
	}
	if len(logLines(t, log, "admin control", map[string]string{"control": "undrain", "worker": "w1", "reason": "done", "by": "as token:op"})) != 1 {
		t.Errorf("no log line for op's gRPC undrain in\n%s", log)
	}
}

// putMsg uploads m and returns its digest.
func putMsg(ctx context.Context, t *testing.T, cas *client.CAS, m proto.Message) digest.Digest {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	d := digest.Compute(digest.SHA256, b)
	if err := blobstore.Put(ctx, cas, d, b); err != nil {
		t.Fatal(err)
	}
	return d
}

// htmlForm is a form of a status page, as a browser without JavaScript
// reads it.
type htmlForm struct {
	attrs   map[string]string
	fields  url.Values // hidden inputs
	buttons []htmlButton
}

type htmlButton struct {
	attrs map[string]string
	label string
}

var (
	formRE   = regexp.MustCompile(`(?s)<form\b([^>]*)>(.*?)</form>`)
	attrRE   = regexp.MustCompile(`([a-zA-Z-]+)(?:="([^"]*)")?`)
	inputRE  = regexp.MustCompile(`<input\b([^>]*)>`)
	buttonRE = regexp.MustCompile(`(?s)<button\b([^>]*)>(.*?)</button>`)
)

func attrs(s string) map[string]string {
	m := map[string]string{}
	for _, a := range attrRE.FindAllStringSubmatch(s, -1) {
		m[strings.ToLower(a[1])] = html.UnescapeString(a[2])
	}
	return m
}

// parseForms reads the forms of page.
func parseForms(page string) []htmlForm {
	var out []htmlForm
	for _, fm := range formRE.FindAllStringSubmatch(page, -1) {
		f := htmlForm{attrs: attrs(fm[1]), fields: url.Values{}}
		for _, in := range inputRE.FindAllStringSubmatch(fm[2], -1) {
			a := attrs(in[1])
			if a["type"] == "hidden" {
				f.fields.Add(a["name"], a["value"])
			}
		}
		for _, b := range buttonRE.FindAllStringSubmatch(fm[2], -1) {
			f.buttons = append(f.buttons, htmlButton{attrs: attrs(b[1]), label: b[2]})
		}
		out = append(out, f)
	}
	return out
}

// press submits the form of the button labelled label in the part of
// page that part matches (a regexp; "" for the whole page) as a browser
// does: a POST of the hidden fields and the button's name and value,
// from the same origin, following the redirect. It returns the page it
// lands on.
func (s *scenario) press(t *testing.T, page, part, label string) string {
	t.Helper()
	if part != "" {
		page = regexp.MustCompile(`(?s)` + part).FindString(page)
	}
	for _, f := range parseForms(page) {
		for _, b := range f.buttons {
			if b.label != label {
				continue
			}
			form := url.Values{}
			for k, v := range f.fields {
				form[k] = v
			}
			if b.attrs["name"] != "" {
				form.Set(b.attrs["name"], b.attrs["value"])
			}
			req, _ := http.NewRequest(strings.ToUpper(f.attrs["method"]), s.base+f.attrs["action"], strings.NewReader(form.Encode()))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			req.Header.Set("Origin", s.base)
			req.Header.Set("Sec-Fetch-Site", "same-origin")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != 200 {
				t.Fatalf("pressing %q: %d\n%s", label, resp.StatusCode, body)
			}
			return html.UnescapeString(string(body))
		}
	}
	t.Fatalf("no %q button in\n%s", label, page)
	return ""
}

var flashRE = regexp.MustCompile(`<p class="flash" role="status">([^<]*)</p>`)

// flash is the line a page shows after a control.
func flash(page string) string {
	if m := flashRE.FindStringSubmatch(page); m != nil {
		return m[1]
	}
	return ""
}

const workerRow = `<tr data-worker="w1">.*?</tr>`

// TestStatusButtons presses every button of the status page as a
// browser posts its form, and checks what it did: the worker paused
// (its action stopped), resumed, terminating, undrained; a queued
// operation killed; the configuration reloaded. Each control is logged,
// and so are refused ones.
func TestStatusButtons(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out testutil.SyncBuffer
	// The file the reload button re-reads (written below).
	cfgFile := filepath.Join(t.TempDir(), "gantry.yaml")
	s := startScenarioLog(t, ctx, slog.New(slog.NewJSONHandler(&out, nil)), WithConfigFile(cfgFile))
	defer s.finish(t, ctx)
	pid := waitForPID(ctx, t, filepath.Join(s.dir, "run.pid"))
	_, page := s.get(t, "/status")
	ctl := func() scheduler.WorkerControl { return s.srv.Scheduler().WorkerControlOf("w1") }
	state := func(page string) string {
		m := regexp.MustCompile(`(?s)<tr data-worker="w1">.*?<td class="st-([a-z]+)">`).FindStringSubmatch(page)
		if m == nil {
			t.Fatalf("no state of w1 in\n%s", page)
		}
		return m[1]
	}

	page = s.press(t, page, workerRow, "Pause")
	if f := flash(page); f != "w1: pause done" || !ctl().Pause || state(page) != "paused" {
		t.Fatalf("after Pause: flash %q, control %+v, state %s", f, ctl(), state(page))
	}
	waitFor(ctx, t, "the running action to be stopped (SIGSTOP)", func() bool { return signalStopped(pid) })

	page = s.press(t, page, workerRow, "Resume")
	if f := flash(page); f != "w1: resume done" || ctl().Pause || state(page) != "active" {
		t.Fatalf("after Resume: flash %q, control %+v, state %s", f, ctl(), state(page))
	}
	waitFor(ctx, t, "the running action to continue (SIGCONT)", func() bool { return !signalStopped(pid) })

	page = s.press(t, page, workerRow, "Terminate")
	if f, c := flash(page), ctl(); f != "w1: terminate done" || !c.Terminate || !c.Drain || state(page) != "terminating" {
		t.Fatalf("after Terminate: flash %q, control %+v, state %s", f, c, state(page))
	}
	// The worker hears it in a heartbeat response and stops polling.
	waitFor(ctx, t, "the worker to take the terminate control", func() bool {
		return strings.Contains(out.String(), "worker asked to terminate")
	})

	page = s.press(t, page, workerRow, "Undrain")
	if f := flash(page); f != "w1: undrain done" || ctl() != (scheduler.WorkerControl{}) || state(page) != "active" {
		t.Fatalf("after Undrain: flash %q, control %+v, state %s", f, ctl(), state(page))
	}

	page = s.press(t, page, `<table id="operations">.*?</table>`, "Kill")
	killed := s.running
	if !strings.Contains(flash(page), s.running+" killed") {
		killed = s.queued
	}
	if f := flash(page); f != killed+" killed" {
		t.Fatalf("after Kill: flash %q", f)
	}
	if info, err := s.srv.Scheduler().Operation(killed); err != nil || !info.Done || info.Response.Status.GetCode() != int32(codes.Canceled) {
		t.Fatalf("killed operation: %+v %v", info, err)
	}

	// Reload: the fairness keys of the file are in force.
	if err := os.WriteFile(cfgFile, []byte("scheduler:\n  fairness:\n    keys: [tool_invocation_id]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, inv := s.get(t, "/status/fairness", "Accept", "text/html"); strings.Contains(inv, "Levels: tool_invocation_id.") {
		t.Fatal("the fairness keys are already the file's")
	}
	page = s.press(t, page, "", "Reload configuration")
	if f := flash(page); f != "configuration reloaded" {
		t.Fatalf("after Reload: flash %q", f)
	}
	if _, inv := s.get(t, "/status/fairness", "Accept", "text/html"); !strings.Contains(inv, "Levels: tool_invocation_id.") {
		t.Errorf("the invocations page after the reload does not show the file's keys:\n%s", inv)
	}
	// A bad file: refused, and the page says why.
	os.WriteFile(cfgFile, []byte("scheduler: {fairness: {keys: [no_such_key]}}\n"), 0o644)
	if page = s.press(t, page, "", "Reload configuration"); !strings.Contains(flash(page), "failed: reloading the configuration failed, the old one stays in effect") {
		t.Errorf("after Reload of a bad file: flash %q", flash(page))
	}

	// Refused controls: an unknown worker and an unknown control.
	token := csrfRE.FindStringSubmatch(page)[1]
	for _, form := range []url.Values{{"worker": {"ghost"}, "action": {"drain"}}, {"worker": {"w1"}, "action": {"explode"}}} {
		form.Set("csrf", token)
		resp, err := http.PostForm(s.base+"/status/worker", form)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if f := flash(html.UnescapeString(string(b))); !strings.HasPrefix(f, "failed: ") {
			t.Errorf("POST %v: flash %q, want a failure", form, f)
		}
	}

	log := out.String()
	by := "status page from 127.0.0.1:"
	for _, c := range []struct {
		msg  string
		want map[string]string
	}{
		{"admin control", map[string]string{"control": "pause", "worker": "w1", "by": by}},
		{"admin control", map[string]string{"control": "resume", "worker": "w1", "by": by}},
		{"admin control", map[string]string{"control": "terminate", "worker": "w1", "by": by}},
		{"admin control", map[string]string{"control": "undrain", "worker": "w1", "by": by}},
		{"admin control", map[string]string{"control": "kill", "operation": killed, "by": by}},
		{"admin control", map[string]string{"control": "reload", "by": by}},
		{"admin control refused", map[string]string{"control": "reload", "by": by, "err": "no_such_key"}},
		{"admin control refused", map[string]string{"control": "drain", "worker": "ghost", "by": by, "err": "ghost"}},
		{"admin control refused", map[string]string{"control": "explode", "worker": "w1", "by": by, "err": `unknown control "explode"`}},
	} {
		if n := len(logLines(t, log, c.msg, c.want)); n != 1 {
			t.Errorf("%d log lines %q with %v, want 1, in\n%s", n, c.msg, c.want, log)
		}
	}
}

// TestStatusPagesWorkWithoutJavaScript: no page has a script (nor an
// event handler or javascript: link), the Content-Security-Policy forbids
// them, and every control is a form that a browser without JavaScript
// posts: a drain posted exactly as its form says works.
func TestStatusPagesWorkWithoutJavaScript(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s := startScenario(t, ctx)
	defer s.finish(t, ctx)
	scriptRE := regexp.MustCompile(`(?i)<script|javascript:|\son[a-z]+\s*=|<iframe|<object|<embed|\ssrc="https?:|<link\b`)
	var overview string
	for _, path := range []string{"/status", "/status/invocations", "/status/fairness", "/status/charts", "/status/failures", "/status/operation?name=" + url.QueryEscape(s.failed),
		"/status/operation?name=" + url.QueryEscape(s.running), "/status/operation?name=nope", "/status?flash=%3Cscript%3Ealert(1)%3C/script%3E"} {
		req, _ := http.NewRequest("GET", s.base+path, nil)
		req.Header.Set("Accept", "text/html")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		page := string(b)
		if path == "/status" {
			overview = page
		}
		if m := scriptRE.FindString(page); m != "" {
			t.Errorf("%s has %q", path, m)
		}
		csp := resp.Header.Get("Content-Security-Policy")
		for _, want := range []string{"default-src 'none'", "form-action 'self'", "frame-ancestors 'none'"} {
			if !strings.Contains(csp, want) {
				t.Errorf("%s: Content-Security-Policy %q lacks %q", path, csp, want)
			}
		}
		if strings.Contains(csp, "script-src") || strings.Contains(csp, "unsafe-eval") {
			t.Errorf("%s: Content-Security-Policy %q allows scripts", path, csp)
		}
		if got := resp.Header.Get("X-Content-Type-Options"); got != "nosniff" {
			t.Errorf("%s: X-Content-Type-Options %q", path, got)
		}
		for _, f := range parseForms(page) {
			if strings.ToLower(f.attrs["method"]) != "post" || !strings.HasPrefix(f.attrs["action"], "/status/") || f.fields.Get("csrf") == "" || len(f.buttons) == 0 {
				t.Errorf("%s: form %v is not a plain POST form with the token and a button", path, f)
			}
			for _, b := range f.buttons {
				if typ, ok := b.attrs["type"]; ok && typ != "submit" {
					t.Errorf("%s: button %q of type %q does not submit without JavaScript", path, b.label, typ)
				}
			}
		}
	}
	forms := parseForms(overview)
	if len(forms) < 5 { // drain, terminate, pause, 2 kills, reload
		t.Fatalf("the overview has %d forms, want one per control", len(forms))
	}
	// A browser without JavaScript sends the form's fields and the
	// pressed button's name and value, nothing else.
	for _, f := range forms {
		if len(f.buttons) != 1 || f.buttons[0].label != "Drain" {
			continue
		}
		form := url.Values{}
		for k, v := range f.fields {
			form[k] = v
		}
		form.Set(f.buttons[0].attrs["name"], f.buttons[0].attrs["value"])
		resp, err := http.PostForm(s.base+f.attrs["action"], form)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || flash(string(b)) != "w1: drain done" || !s.srv.Scheduler().WorkerControlOf("w1").Drain {
			t.Fatalf("posting the Drain form: %d, flash %q", resp.StatusCode, flash(string(b)))
		}
		return
	}
	t.Fatal("no Drain form on the overview")
}

// TestStatusRefresh: the list pages and the page of an operation in
// progress reload themselves every status.refresh (an HTML meta
// refresh, no script); a finished operation's page, ?refresh=0 and
// status.refresh: 0 do not.
func TestStatusRefresh(t *testing.T) {
	for _, c := range []struct {
		yaml string
		want int // seconds; 0: no refresh
	}{
		{"status:\n  refresh: 7s\n", 7},
		{"status:\n  refresh: 300ms\n", 1},
		{"status:\n  refresh: 0s\n", 0},
		{"", 10}, // the default
	} {
		t.Run(fmt.Sprint(c.want), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			file := filepath.Join(t.TempDir(), "gantry.yaml")
			if err := os.WriteFile(file, []byte(c.yaml), 0o644); err != nil {
				t.Fatal(err)
			}
			loaded, err := config.Load(file)
			if err != nil {
				t.Fatal(err)
			}
			f := observedFarm(t, quietLogger(), func(cfg *config.Config) {
				cfg.Status = loaded.Status
				cfg.Worker.Enabled = false
			})
			s := &scenario{farm: f, base: "http://" + f.srv.HTTPAddr()}
			// No worker: the actions stay queued.
			queue := func(script string) string {
				name := f.start(ctx, shCmd(script)).name
				waitFor(ctx, t, "the action to be queued", func() bool {
					info, err := f.srv.Scheduler().Operation(name)
					return err == nil && info.Stage == repb.ExecutionStage_QUEUED
				})
				return name
			}
			queued, killed := queue("echo never"), queue("echo killed")
			if _, err := adminpb.NewAdminClient(f.conn).KillOperation(ctx, &adminpb.KillOperationRequest{Name: killed}); err != nil {
				t.Fatal(err)
			}
			meta := regexp.MustCompile(`<meta http-equiv="refresh" content="(\d+)">`)
			for _, p := range []struct {
				path    string
				refresh bool
			}{
				{"/status", true},
				{"/status/invocations", true},
				{"/status/failures", true},
				{"/status/operation?name=" + url.QueryEscape(queued), true},
				{"/status/operation?name=" + url.QueryEscape(killed), false},
				{"/status?refresh=0", false},
				{"/status/failures?refresh=0", false},
				{"/status/operation?name=nope", false},
			} {
				_, page := s.get(t, p.path, "Accept", "text/html")
				want := ""
				if p.refresh && c.want > 0 {
					want = strconv.Itoa(c.want)
				}
				got := ""
				if m := meta.FindAllStringSubmatch(page, -1); len(m) == 1 {
					got = m[0][1]
				} else if len(m) > 1 {
					t.Errorf("%s has %d meta refreshes", p.path, len(m))
				}
				if got != want {
					t.Errorf("%s: refresh %q, want %q", p.path, got, want)
				}
				if says := strings.Contains(page, "refreshes every "+want+"s"); says != (want != "") {
					t.Errorf("%s: the header's refresh note does not match the refresh %q", p.path, want)
				}
			}
		})
	}
}
