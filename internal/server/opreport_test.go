package server

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/gantry-build/gantry/internal/config"
	"github.com/gantry-build/gantry/internal/digest"
	"github.com/gantry-build/gantry/internal/protocol"
	"github.com/gantry-build/gantry/internal/testutil"
)

// statusHTML gets a status page of f as a browser does.
func statusHTML(t *testing.T, f *farm, path string) string {
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

// heldAction is an action that says it started (its marker file) and
// then runs until its release file exists.
func heldAction(t *testing.T, f *farm) (ad digest.Digest, started, release string) {
	t.Helper()
	dir := t.TempDir()
	started, release = filepath.Join(dir, "started"), filepath.Join(dir, "release")
	t.Cleanup(func() { os.WriteFile(release, nil, 0o644) })
	cmd := shCmd(fmt.Sprintf("echo > %s; while [ ! -e %s ]; do sleep 0.02; done; echo released", started, release))
	return f.put(&repb.Action{CommandDigest: f.put(cmd).Proto(), InputRootDigest: emptyRoot(f).Proto()}), started, release
}

// bazelLike is ctx carrying the RequestMetadata of a Bazel action.
func bazelLike(ctx context.Context, build string) context.Context {
	rm, _ := proto.Marshal(&repb.RequestMetadata{ToolDetails: &repb.ToolDetails{ToolName: "bazel", ToolVersion: "7.4.1"},
		ToolInvocationId: build, TargetId: "//app:gen", ActionMnemonic: "Genrule"})
	return metadata.AppendToOutgoingContext(ctx, protocol.RequestMetadataHeader, string(rm))
}

// An operation whose only caller went away (a Ctrl-C'd CI job, a crashed
// Bazel) still logs its completion line and enters the history, with
// what its Execute call carried: when its action completes, or when it
// is cancelled because nobody waited for it.
func TestOperationWithoutCallerIsLoggedAndKept(t *testing.T) {
	for _, tc := range []struct {
		name    string
		grace   time.Duration
		release bool
		status  string
	}{
		{"completes", time.Minute, true, "OK"},
		{"abandoned", 300 * time.Millisecond, false, "Canceled"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs testutil.SyncBuffer
			f := observedFarm(t, slog.New(slog.NewJSONHandler(&logs, nil)), func(c *config.Config) {
				c.Scheduler.CallerGrace = config.Duration(tc.grace)
			})
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			ad, started, release := heldAction(t, f)
			build := "inv-gone-" + tc.name
			ectx, hangUp := context.WithCancel(bazelLike(ctx, build))
			stream, err := repb.NewExecutionClient(f.conn).Execute(ectx, &repb.ExecuteRequest{ActionDigest: ad.Proto(), InstanceName: "team"})
			if err != nil {
				t.Fatal(err)
			}
			name := mustRecv(t, stream).Name
			waitForFile(t, ctx, started)
			hangUp() // the only caller is gone
			if tc.release {
				if err := os.WriteFile(release, nil, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			var line map[string]any
			obsWaitFor(t, "the completion line of "+name, func() bool {
				lines := logLines(t, logs.String(), "operation finished", map[string]string{"operation": name})
				if len(lines) > 0 {
					line = lines[0]
				}
				return line != nil
			})
			if line["instance"] != "team" || line["action"] != ad.String() || line["tool"] != "bazel 7.4.1" || line["status"] != tc.status {
				t.Errorf("completion line %v: want instance team, action %s, tool bazel 7.4.1, status %s", line, ad, tc.status)
			}
			if inv, _ := line["invocation"].(map[string]any); inv["tool_invocation_id"] != build {
				t.Errorf("completion line's invocation = %v, want tool_invocation_id %s", line["invocation"], build)
			}
			var page string
			obsWaitFor(t, "build "+build+" in the history", func() bool {
				page = statusHTML(t, f, "/status/invocations")
				return strings.Contains(page, `href="/status/build?id=`+build+`"`)
			})
			if !strings.Contains(page, "bazel 7.4.1") {
				t.Errorf("the builds page lacks the build's tool:\n%s", page)
			}
			page = statusHTML(t, f, "/status/build?id="+build)
			for _, want := range []string{"/status/operation?name=" + name, "//app:gen (Genrule)"} {
				if !strings.Contains(page, want) {
					t.Errorf("the build page lacks %q:\n%s", want, page)
				}
			}
		})
	}
}

// An operation watched by two callers (Execute and a WaitExecution), and
// one that joined it (an identical action: its own operation), are each
// logged, counted and kept once.
func TestOperationWatchedTwiceIsReportedOnce(t *testing.T) {
	var logs testutil.SyncBuffer
	f := observedFarm(t, slog.New(slog.NewJSONHandler(&logs, nil)), nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ad, started, release := heldAction(t, f)
	before := sample(scrape(t, f.srv.HTTPAddr()), "gantry_operations_total")
	execute := func() (string, chan error) {
		stream, err := repb.NewExecutionClient(f.conn).Execute(bazelLike(ctx, "inv-twice"), &repb.ExecuteRequest{ActionDigest: ad.Proto()})
		if err != nil {
			t.Fatal(err)
		}
		name := mustRecv(t, stream).Name
		done := make(chan error, 1)
		go func() { done <- drain(stream) }()
		return name, done
	}
	first, firstDone := execute()
	waitForFile(t, ctx, started)
	wait, err := repb.NewExecutionClient(f.conn).WaitExecution(ctx, &repb.WaitExecutionRequest{Name: first})
	if err != nil {
		t.Fatal(err)
	}
	waitDone := make(chan error, 1)
	go func() { waitDone <- drain(wait) }()
	joined, joinedDone := execute()
	waitFor(ctx, t, "the joined operation to share the running task", func() bool {
		info, err := f.srv.Scheduler().Operation(joined)
		return err == nil && info.Stage == repb.ExecutionStage_EXECUTING
	})
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, done := range []chan error{firstDone, waitDone, joinedDone} {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	// Every call has ended: each Execute after its operation was
	// reported, the WaitExecution after it saw it done.
	for _, name := range []string{first, joined} {
		if n := len(logLines(t, logs.String(), "operation finished", map[string]string{"operation": name})); n != 1 {
			t.Errorf("%d completion lines for %s; want 1", n, name)
		}
	}
	if n := sample(scrape(t, f.srv.HTTPAddr()), "gantry_operations_total") - before; n != 2 {
		t.Errorf("gantry_operations_total grew by %v for 2 operations", n)
	}
	page := statusHTML(t, f, "/status/build?id=inv-twice")
	for _, name := range []string{first, joined} {
		if n := strings.Count(page, "/status/operation?name="+name); n != 1 {
			t.Errorf("the build page lists %s %d times; want once:\n%s", name, n, page)
		}
	}
}

// drain reads an Operation stream to its end: nil when it ended after a
// done operation.
func drain(s grpc.ServerStreamingClient[longrunningpb.Operation]) error {
	done := false
	for {
		op, err := s.Recv()
		if err == io.EOF {
			if !done {
				return fmt.Errorf("the stream ended before the operation was done")
			}
			return nil
		}
		if err != nil {
			return err
		}
		done = done || op.Done
	}
}
