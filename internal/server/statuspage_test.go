package server

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/gantry-build/gantry/internal/config"
	"github.com/gantry-build/gantry/internal/invocation"
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
	f := startFarm(t, func(c *config.Config) {
		c.HTTPListen = "127.0.0.1:0"
		c.Worker.ID = "w1"
		c.Worker.Cores = 1
		c.Worker.AcceptUnknownProperties = false
		c.Status.Refresh = 0
	})
	s := &scenario{farm: f, base: "http://" + f.srv.HTTPAddr()}
	fail := f.start(withInvocation(ctx, "build-7", "test"), shCmd("echo oops-out; echo oops-err >&2; exit 3"))
	if r := fail.wait(ctx, t); r.Result.GetExitCode() != 3 {
		t.Fatalf("failing action: %v", r)
	}
	s.failed = fail.name
	run := f.start(withInvocation(ctx, "build-9", "compile"), gated(f.dir, "run"))
	waitForPID(ctx, t, filepath.Join(f.dir, "run.pid"))
	waitFor(ctx, t, "the action to be executing", func() bool {
		info, err := f.srv.Scheduler.Operation(run.name)
		return err == nil && info.Stage == repb.ExecutionStage_EXECUTING
	})
	s.running = run.name
	s.queued = f.start(withInvocation(ctx, "build-9", "link"), shCmd("echo never"), &repb.Platform_Property{Name: "pool", Value: "nowhere"}).name
	// The name comes with the first update (CACHE_CHECK), before the
	// action is queued.
	waitFor(ctx, t, "the third action to be queued", func() bool {
		info, err := f.srv.Scheduler.Operation(s.queued)
		return err == nil && info.Stage == repb.ExecutionStage_QUEUED
	})
	return s
}

// withInvocation sends Bazel's request metadata for a build (correlated
// invocations id) and one of its commands (tool invocation id).
func withInvocation(ctx context.Context, build, tool string) context.Context {
	b, _ := proto.Marshal(&repb.RequestMetadata{CorrelatedInvocationsId: build, ToolInvocationId: tool, ToolDetails: &repb.ToolDetails{ToolName: "bazel"}})
	return metadata.AppendToOutgoingContext(ctx, invocation.RequestMetadataHeader, string(b))
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
	contains(t, "overview", body, "1 queued · 1 executing · 1 workers", "1 recent failures", `data-worker="w1"`, s.running, s.queued, "EXECUTING", "QUEUED", ">active<")
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
	_, body = s.get(t, "/status/invocations", "Accept", "text/html")
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
	if s.srv.Scheduler.WorkerControlOf("w1").Drain {
		t.Fatal("a refused POST drained the worker")
	}
	if c := post(url.Values{"worker": {"w1"}, "action": {"drain"}, "csrf": {m[1]}}, s.base); c != http.StatusSeeOther {
		t.Fatalf("POST with the token: %d", c)
	}
	if !s.srv.Scheduler.WorkerControlOf("w1").Drain {
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
	if info, err := s.srv.Scheduler.Operation(s.queued); err != nil || !info.Done || info.Response.Status.GetCode() != int32(codes.Canceled) {
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
