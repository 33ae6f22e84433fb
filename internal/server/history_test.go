package server

import (
	"context"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/gantry-build/gantry/internal/client"
	"github.com/gantry-build/gantry/internal/config"
	"github.com/gantry-build/gantry/internal/protocol"
)

// The builds pages list what Bazel-like clients ran, from the history,
// and still do after the server restarts on its data directory; an
// operation the restarted scheduler no longer knows is shown from it.
func TestBuildHistorySurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	retention := config.Default().Scheduler.Retention
	mod := func(c *config.Config) {
		c.DataDir = dir
		c.HTTPListen = "127.0.0.1:0"
		c.Status.Refresh = 0
		c.Scheduler.Retention = retention
	}
	f := startFarm(t, mod)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	withMD := func(md *repb.RequestMetadata) context.Context {
		b, _ := proto.Marshal(md)
		return metadata.AppendToOutgoingContext(ctx, protocol.RequestMetadataHeader, string(b))
	}
	root := f.put(&repb.Directory{})
	exec := func(ctx context.Context, cmd *repb.Command) (string, *repb.ExecuteResponse) {
		t.Helper()
		ad := f.put(&repb.Action{CommandDigest: f.put(cmd).Proto(), InputRootDigest: root.Proto()})
		var name string
		resp, _, err := client.ExecuteNamed(ctx, f.conn, &repb.ExecuteRequest{ActionDigest: ad.Proto()}, func(n string) { name = n })
		if err != nil {
			t.Fatal(err)
		}
		return name, resp
	}
	tool := &repb.ToolDetails{ToolName: "bazel", ToolVersion: "4.2.3"}
	compile, _ := exec(withMD(&repb.RequestMetadata{ToolDetails: tool, ToolInvocationId: "inv-A", CorrelatedInvocationsId: "corr-1", TargetId: "//app:lib", ActionMnemonic: "CppCompile"}),
		shCmd("i=0; while [ $i -lt 30000 ]; do i=$((i+1)); done; echo obj > lib.o", "lib.o"))
	failing, resp := exec(withMD(&repb.RequestMetadata{ToolDetails: tool, ToolInvocationId: "inv-A"}),
		shCmd("echo broken >&2; exit 3", "never.o"))
	if resp.GetResult().GetExitCode() != 3 {
		t.Fatalf("the failing action: %v", resp)
	}
	// The same action again: a cache hit for build B.
	exec(withMD(&repb.RequestMetadata{ToolDetails: tool, ToolInvocationId: "inv-B"}), shCmd("i=0; while [ $i -lt 30000 ]; do i=$((i+1)); done; echo obj > lib.o", "lib.o"))

	get := func(f *farm, path string) string {
		t.Helper()
		req, _ := http.NewRequest("GET", "http://"+f.srv.HTTPAddr()+path, nil)
		req.Header.Set("Accept", "text/html")
		r, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Body.Close()
		b, _ := io.ReadAll(r.Body)
		if r.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d %s", path, r.StatusCode, b)
		}
		return string(b)
	}
	check := func(f *farm, when string) {
		t.Helper()
		builds := get(f, "/status/invocations")
		for _, want := range []string{`href="/status/build?id=inv-A"`, `href="/status/build?id=inv-B"`, "bazel 4.2.3", "corr-1"} {
			if !strings.Contains(builds, want) {
				t.Errorf("%s: the builds page lacks %q:\n%s", when, want, builds)
			}
		}
		// inv-A: 2 executed, 0 cache hits, 1 failed.
		row := builds[strings.Index(builds, "id=inv-A"):]
		row = row[:strings.Index(row, "</tr>")]
		if !strings.Contains(row, `<td class="n">2</td><td class="n">0</td><td class="n">1</td><td class="n">0</td>`) {
			t.Errorf("%s: build inv-A's row: %s", when, row)
		}
		build := get(f, "/status/build?id=inv-A")
		// The worker reported the busy loop's CPU time.
		if !regexp.MustCompile(`<tr><th>CPU time</th><td>[1-9][0-9.]*m?s `).MatchString(build) {
			t.Errorf("%s: the build page shows no CPU time:\n%s", when, build)
		}
		for _, want := range []string{"//app:lib (CppCompile)", "sh → never.o", "exit 3", "/status/operation?name=" + failing, "/status/operation?name=" + compile} {
			if !strings.Contains(build, want) {
				t.Errorf("%s: the build page lacks %q:\n%s", when, want, build)
			}
		}
		if b := get(f, "/status/build?id=inv-B"); !strings.Contains(b, "cache hit") {
			t.Errorf("%s: build inv-B does not show its cache hit:\n%s", when, b)
		}
	}
	check(f, "before the restart")
	f.stop()

	// Restarted with a retention short enough that the scheduler lets
	// the operations go: their pages come from the history.
	retention = config.Duration(time.Millisecond)
	f = startFarm(t, mod)
	check(f, "after the restart")
	waitFor(ctx, t, "the restarted scheduler to let the operation go", func() bool {
		_, err := f.srv.Scheduler().Operation(failing)
		return err != nil
	})
	if op := get(f, "/status/operation?name="+compile); !strings.Contains(op, "Output files: lib.o") || !strings.Contains(op, "<tr><td>lib.o</td>") {
		t.Errorf("the compile's page after the restart lacks its output:\n%s", op)
	}
	op := get(f, "/status/operation?name="+failing)
	for _, want := range []string{"completed", "<tr><th>Exit code</th><td>3</td></tr>", "stderr", "/status/blob?", `<pre class="stream">broken`, `<table id="stages">`, "<td>execute</td>", "<th>total</th>"} {
		if !strings.Contains(op, want) {
			t.Errorf("the failed operation's page after the restart lacks %q:\n%s", want, op)
		}
	}
}
