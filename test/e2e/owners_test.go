package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/gantry-build/gantry/internal/blobstore"
	"github.com/gantry-build/gantry/internal/client"
	"github.com/gantry-build/gantry/internal/digest"
	"github.com/gantry-build/gantry/internal/statestore/pgtest"
)

// TestRestartKeepsOperationOwners: with authentication on, an operation
// stays its owner's across a restart of the scheduler, whatever state it
// was in: a tenant with rights on another instance (here the default
// instance "") is refused it, and its owner is not. Checked through
// WaitExecution, GetOperation, the operation's status page and `gantry
// operation show`, for a finished, a running and a queued operation,
// after a SIGTERM restart, after kill -9, and after a fail-over between
// two schedulers on PostgreSQL.
func TestRestartKeepsOperationOwners(t *testing.T) {
	t.Run("serve", func(t *testing.T) {
		o := newOwnersFixture(t)
		cfg := o.config(t, "serve.yaml", "worker: {enabled: false}\n")
		srv := newCrashServer(t, "--config", cfg)
		p := srv.start()
		startWorker(t, p.gantryProc, "--id", "owners-worker", "--cores", "1", "--token-file", o.tokenFile("worker"))
		ops := o.submit(t, p.GRPCAddr)
		o.check(t, "before any restart", p.GRPCAddr, p.HTTPAddr, ops)

		p.term(t)
		p = srv.start()
		o.check(t, "after a SIGTERM restart", p.GRPCAddr, p.HTTPAddr, ops)

		p.kill9(t)
		p = srv.start()
		o.check(t, "after kill -9 and a restart", p.GRPCAddr, p.HTTPAddr, ops)
	})
	t.Run("failover", func(t *testing.T) {
		dsn := pgtest.CreateDatabase(t, pgtest.Start(t))
		o := newOwnersFixture(t)
		store := fmt.Sprintf("scheduler:\n  caller_grace: 10m\n  store:\n    backend: postgres\n    dsn: %q\n", dsn)
		fe := newCrashServer(t, "--role", "frontend", "--config",
			o.config(t, "frontend.yaml", store+fmt.Sprintf("worker: {enabled: false}\ncluster:\n  client:\n    token_file: %q\n", o.tokenFile("frontend-1"))))
		fe.start()
		schedCfg := o.config(t, "scheduler.yaml", store+fmt.Sprintf(
			"cluster:\n  cas: %s\n  takeover_interval: 200ms\n  frontend_identities: [frontend-1]\n  client:\n    token_file: %q\n", fe.GRPCAddr, o.tokenFile("scheduler-1")))
		leader := newCrashServer(t, "--role", "scheduler", "--config", schedCfg).start()
		waitLeading(t, leader, failoverTakeoverTimeout)
		standby := newCrashServer(t, "--role", "scheduler", "--config", schedCfg).start()
		w := &gantryProc{GRPCAddr: fe.GRPCAddr, HTTPAddr: leader.HTTPAddr}
		startWorker(t, w, "--id", "owners-worker", "--cores", "1", "--token-file", o.tokenFile("worker"))
		ops := o.submit(t, fe.GRPCAddr)
		o.check(t, "before the fail-over", fe.GRPCAddr, leader.HTTPAddr, ops)

		leader.kill9(t)
		waitLeading(t, standby, failoverTakeoverTimeout)
		o.check(t, "after kill -9 of the leader and the fail-over", fe.GRPCAddr, standby.HTTPAddr, ops)
	})
}

// term stops the server with SIGTERM, as an operator restarting it does,
// and waits until it has exited.
func (p *crashProc) term(t *testing.T) {
	t.Helper()
	p.killed = true // stopped here, not again at the end
	if err := syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM); err != nil {
		t.Fatalf("stopping gantry: %v", err)
	}
	select {
	case <-p.exited:
	case <-time.After(gantryStopTimeout):
		t.Fatalf("gantry still running %v after SIGTERM", gantryStopTimeout)
	}
}

// ownersFixture is the tenants of the test: "owner" may execute and read
// on team-b/*, "other" on the default instance only; both see the status
// pages, where an operation's page needs cas.read on its instance.
type ownersFixture struct {
	dir    string
	tokens map[string]string
}

const ownersInstance = "team-b/x"

func newOwnersFixture(t *testing.T) *ownersFixture {
	o := &ownersFixture{dir: testDir(t, "owners"), tokens: map[string]string{}}
	var lines []string
	for _, id := range []string{"owner", "other", "worker", "frontend-1", "scheduler-1"} {
		o.tokens[id] = fmt.Sprintf("%s-token-%d", id, time.Now().UnixNano())
		lines = append(lines, id+" "+o.tokens[id])
		writeFile(t, o.tokenFile(id), o.tokens[id]+"\n")
	}
	writeFile(t, filepath.Join(o.dir, "tokens"), strings.Join(lines, "\n")+"\n")
	return o
}

func (o *ownersFixture) tokenFile(id string) string { return filepath.Join(o.dir, id+".token") }

// config writes a configuration with the fixture's auth section and
// extra.
func (o *ownersFixture) config(t *testing.T, name, extra string) string {
	auth := fmt.Sprintf(`auth:
  enabled: true
  tokens_file: %q
  http_require_token: true
  policy:
    - identities: [owner]
      instances: ["team-b/*"]
      permissions: [read, cas.write, execute]
    - identities: [other]
      instances: [""]
      permissions: [read, cas.write, execute]
    - identities: [owner, other]
      instances: ["*"]
      permissions: [status]
    - identities: [worker]
      instances: ["*"]
      permissions: [worker, read, cas.write]
    - identities: [scheduler-1]
      instances: ["*"]
      permissions: [read, write]
`, filepath.Join(o.dir, "tokens"))
	if !strings.Contains(extra, "caller_grace") {
		// Nobody follows the operations between the checks: they must not
		// be cancelled for it.
		extra = "scheduler:\n  caller_grace: 10m\n" + extra
	}
	return writeFile(t, filepath.Join(o.dir, name), auth+extra)
}

func (o *ownersFixture) dial(t *testing.T, addr, id string) *grpc.ClientConn {
	t.Helper()
	conn, err := client.DialSecure(addr, client.Security{TokenFile: o.tokenFile(id)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// ownedOps are the owner's operations: finished (its stdout says
// secret), running and queued (the worker has one core).
type ownedOps struct {
	finished, running, queued string
	secret                    string
}

func (o *ownersFixture) submit(t *testing.T, addr string) ownedOps {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	conn := o.dial(t, addr, "owner")
	cas := client.NewCAS(conn, ownersInstance, digest.SHA256, 0)
	put := func(m proto.Message) *repb.Digest {
		b, _ := proto.Marshal(m)
		d := digest.Compute(digest.SHA256, b)
		if err := blobstore.Put(ctx, cas, d, b); err != nil {
			t.Fatalf("uploading as the owner: %v", err)
		}
		return d.Proto()
	}
	action := func(script string) *repb.Digest {
		return put(&repb.Action{CommandDigest: put(&repb.Command{Arguments: []string{"/bin/sh", "-c", script}}), InputRootDigest: put(&repb.Directory{})})
	}
	ops := ownedOps{secret: fmt.Sprintf("secret-b-%d", time.Now().UnixNano())}
	resp, name, err := client.Execute(ctx, conn, &repb.ExecuteRequest{InstanceName: ownersInstance, ActionDigest: action("echo " + ops.secret)})
	if err != nil || client.CheckResponse(resp) != nil {
		t.Fatalf("the finished operation: %v, %v", err, client.CheckResponse(resp))
	}
	ops.finished = name
	// Followed until the stage says what is wanted, then left alone.
	start := func(script string, stage repb.ExecutionStage_Value) string {
		sctx, stop := context.WithCancel(ctx)
		defer stop()
		stream, err := repb.NewExecutionClient(conn).Execute(sctx, &repb.ExecuteRequest{InstanceName: ownersInstance, ActionDigest: action(script), SkipCacheLookup: true})
		if err != nil {
			t.Fatal(err)
		}
		for {
			op, err := stream.Recv()
			if err != nil {
				t.Fatalf("waiting for %q to reach %v: %v", script, stage, err)
			}
			md := &repb.ExecuteOperationMetadata{}
			if err := op.GetMetadata().UnmarshalTo(md); err != nil {
				t.Fatal(err)
			}
			if md.Stage == stage {
				return op.Name
			}
		}
	}
	ops.running = start("sleep 300", repb.ExecutionStage_EXECUTING)
	ops.queued = start("sleep 301", repb.ExecutionStage_QUEUED)
	t.Logf("operations: finished %s, running %s, queued %s", ops.finished, ops.running, ops.queued)
	return ops
}

// check asks for each operation as its owner and as the other tenant.
func (o *ownersFixture) check(t *testing.T, when, grpcAddr, httpAddr string, ops ownedOps) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	owner, other := o.dial(t, grpcAddr, "owner"), o.dial(t, grpcAddr, "other")
	for _, c := range []struct {
		what, name string
		done       bool
	}{{"finished", ops.finished, true}, {"running", ops.running, false}, {"queued", ops.queued, false}} {
		// GetOperation.
		got, err := longrunningpb.NewOperationsClient(owner).GetOperation(ctx, &longrunningpb.GetOperationRequest{Name: c.name})
		if err != nil {
			t.Errorf("%s: the owner's GetOperation of the %s operation: %v", when, c.what, err)
		} else if got.Done != c.done {
			t.Errorf("%s: the owner's GetOperation of the %s operation: done %v, want %v", when, c.what, got.Done, c.done)
		}
		_, err = longrunningpb.NewOperationsClient(other).GetOperation(ctx, &longrunningpb.GetOperationRequest{Name: c.name})
		wantDenied(t, when, "the other tenant's GetOperation of the "+c.what+" operation", err)

		// WaitExecution: the first message is enough.
		first := func(conn *grpc.ClientConn) (*longrunningpb.Operation, error) {
			wctx, stop := context.WithTimeout(ctx, 20*time.Second)
			defer stop()
			s, err := repb.NewExecutionClient(conn).WaitExecution(wctx, &repb.WaitExecutionRequest{Name: c.name})
			if err != nil {
				return nil, err
			}
			return s.Recv()
		}
		op, err := first(owner)
		if err != nil {
			t.Errorf("%s: the owner's WaitExecution of the %s operation: %v", when, c.what, err)
		} else if c.done {
			o.checkSecret(ctx, t, when, owner, op, ops.secret)
		}
		_, err = first(other)
		wantDenied(t, when, "the other tenant's WaitExecution of the "+c.what+" operation", err)

		// The operation's status page.
		page := "http://" + httpAddr + "/status/operation?name=" + url.QueryEscape(c.name)
		if code, body := o.get(t, page, "owner"); code != http.StatusOK || !strings.Contains(body, ownersInstance) {
			t.Errorf("%s: the owner's %s: %d, want 200 naming %q; body:\n%.400s", when, page, code, ownersInstance, body)
		}
		if code, body := o.get(t, page, "other"); code != http.StatusForbidden {
			t.Errorf("%s: the other tenant's %s: %d, want 403; body:\n%.400s", when, page, code, body)
		}

		// gantry operation show.
		out, err := o.gantry(ctx, t, grpcAddr, "owner", "operation", "show", c.name)
		if err != nil || !strings.Contains(out, fmt.Sprintf("%q", ownersInstance)) {
			t.Errorf("%s: the owner's gantry operation show of the %s operation: %v, want it to name %q:\n%s", when, c.what, err, ownersInstance, out)
		}
		out, err = o.gantry(ctx, t, grpcAddr, "other", "operation", "show", c.name)
		if err == nil || !strings.Contains(out, "PermissionDenied") {
			t.Errorf("%s: the other tenant's gantry operation show of the %s operation: %v, want it refused (PermissionDenied):\n%s", when, c.what, err, out)
		}
	}
}

// checkSecret reads the finished operation's stdout as the owner.
func (o *ownersFixture) checkSecret(ctx context.Context, t *testing.T, when string, conn *grpc.ClientConn, op *longrunningpb.Operation, secret string) {
	t.Helper()
	resp := &repb.ExecuteResponse{}
	if !op.Done || op.GetResponse().UnmarshalTo(resp) != nil {
		t.Errorf("%s: WaitExecution of the finished operation: %v, want it done with its response", when, op)
		return
	}
	d, err := digest.FromProto(digest.SHA256, resp.GetResult().GetStdoutDigest())
	if err != nil {
		t.Errorf("%s: the finished operation's stdout digest: %v", when, err)
		return
	}
	b, err := blobstore.Get(ctx, client.NewCAS(conn, ownersInstance, digest.SHA256, 0), d)
	if err != nil || strings.TrimSpace(string(b)) != secret {
		t.Errorf("%s: the finished operation's stdout %q, %v; want %q", when, b, err, secret)
	}
}

func wantDenied(t *testing.T, when, what string, err error) {
	t.Helper()
	if status.Code(err) != codes.PermissionDenied {
		t.Errorf("%s: %s: %v, want PERMISSION_DENIED", when, what, err)
	}
}

func (o *ownersFixture) get(t *testing.T, u, id string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, u, nil)
	req.Header.Set("Authorization", "Bearer "+o.tokens[id])
	resp, err := (&http.Client{Timeout: 20 * time.Second}).Do(req)
	if err != nil {
		t.Errorf("GET %s: %v", u, err)
		return 0, ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func (o *ownersFixture) gantry(ctx context.Context, t *testing.T, addr, id string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, gantryBin(t), append(args, "--server", addr, "--token-file", o.tokenFile(id))...)
	cmd.Env = append(os.Environ(), "GANTRY_TOKEN_FILE=")
	out, err := cmd.CombinedOutput()
	return string(out), err
}
