package server

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	workerpb "github.com/gantry-build/gantry/api/worker/v1"
	"github.com/gantry-build/gantry/internal/blobstore"
	"github.com/gantry-build/gantry/internal/client"
	"github.com/gantry-build/gantry/internal/config"
	"github.com/gantry-build/gantry/internal/digest"
	"github.com/gantry-build/gantry/internal/worker"
)

// farm is a server on loopback plus a client connection to it.
type farm struct {
	t    *testing.T
	srv  *Server
	conn *grpc.ClientConn
	cas  *client.CAS
	dir  string
	// stop shuts the server down (also done at cleanup).
	stop func()
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func startFarm(t *testing.T, mod func(*config.Config)) *farm {
	t.Helper()
	return startFarmLogging(t, quietLogger(), mod)
}

// startFarmLogging is startFarm with the server logging to log.
func startFarmLogging(t *testing.T, log *slog.Logger, mod func(*config.Config)) *farm {
	t.Helper()
	return startFarmWith(t, log, mod)
}

// startFarmWith is startFarmLogging with the server built with opts.
func startFarmWith(t *testing.T, log *slog.Logger, mod func(*config.Config), opts ...Option) *farm {
	t.Helper()
	cfg := config.Default()
	cfg.Listen = "127.0.0.1:0"
	cfg.HTTPListen = ""
	cfg.DataDir = t.TempDir()
	cfg.Worker.Cores = 2
	cfg.Scheduler.HeartbeatInterval = config.Duration(100 * time.Millisecond)
	cfg.Scheduler.HeartbeatTimeout = config.Duration(time.Second)
	if mod != nil {
		mod(&cfg)
	}
	srv, err := New(cfg, log, opts...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { srv.Run(ctx); close(done) }()
	conn, err := client.Dial(srv.GRPCAddr())
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	stop := func() { once.Do(func() { conn.Close(); cancel(); <-done }) }
	t.Cleanup(stop)
	return &farm{t: t, srv: srv, conn: conn, cas: client.NewCAS(conn, "", digest.SHA256, 0), dir: cfg.DataDir, stop: stop}
}

func (f *farm) put(m proto.Message) digest.Digest {
	f.t.Helper()
	b, _ := proto.Marshal(m)
	return f.putBytes(b)
}

func (f *farm) putBytes(b []byte) digest.Digest {
	f.t.Helper()
	d := digest.Compute(digest.SHA256, b)
	if err := blobstore.Put(context.Background(), f.cas, d, b); err != nil {
		f.t.Fatal(err)
	}
	return d
}

func shCmd(script string, outputs ...string) *repb.Command {
	return &repb.Command{
		Arguments:            []string{"/bin/sh", "-c", script},
		EnvironmentVariables: []*repb.Command_EnvironmentVariable{{Name: "PATH", Value: "/usr/bin:/bin"}},
		OutputFiles:          outputs,
	}
}

func (f *farm) run(ctx context.Context, root digest.Digest, cmd *repb.Command, mod ...func(*repb.Action)) *repb.ExecuteResponse {
	f.t.Helper()
	a := &repb.Action{CommandDigest: f.put(cmd).Proto(), InputRootDigest: root.Proto()}
	for _, m := range mod {
		m(a)
	}
	ad := f.put(a)
	resp, _, err := client.Execute(ctx, f.conn, &repb.ExecuteRequest{ActionDigest: ad.Proto()})
	if err != nil {
		f.t.Fatal(err)
	}
	return resp
}

func (f *farm) read(d *repb.Digest) string {
	f.t.Helper()
	dd, err := digest.FromProto(digest.SHA256, d)
	if err != nil {
		f.t.Fatal(err)
	}
	b, err := blobstore.Get(context.Background(), f.cas, dd)
	if err != nil {
		f.t.Fatal(err)
	}
	return string(b)
}

func TestEmbeddedWorkerRunsActionWithInputs(t *testing.T) {
	f := startFarm(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	in := f.putBytes([]byte("hello from the input\n"))
	tool := f.putBytes([]byte("#!/bin/sh\necho tool ran\n"))
	sub := f.put(&repb.Directory{Files: []*repb.FileNode{{Name: "data.txt", Digest: in.Proto()}}})
	root := f.put(&repb.Directory{
		Files:       []*repb.FileNode{{Name: "tool.sh", Digest: tool.Proto(), IsExecutable: true}},
		Directories: []*repb.DirectoryNode{{Name: "in", Digest: sub.Proto()}},
	})
	cmd := shCmd("cat in/data.txt > out/copy.txt && ./tool.sh >> out/copy.txt && echo to-stdout && echo to-stderr >&2 && mkdir -p tree/sub && echo leaf > tree/sub/leaf && echo $GREETING > out/env.txt", "out/copy.txt", "out/env.txt")
	cmd.OutputDirectories = []string{"tree"}
	cmd.EnvironmentVariables = append([]*repb.Command_EnvironmentVariable{{Name: "GREETING", Value: "hi"}}, cmd.EnvironmentVariables...)
	resp := f.run(ctx, root, cmd)
	if err := client.CheckResponse(resp); err != nil {
		t.Fatal(err)
	}
	r := resp.Result
	files := map[string]*repb.OutputFile{}
	for _, of := range r.OutputFiles {
		files[of.Path] = of
	}
	if got := f.read(files["out/copy.txt"].GetDigest()); got != "hello from the input\ntool ran\n" {
		t.Errorf("out/copy.txt = %q", got)
	}
	if got := f.read(files["out/env.txt"].GetDigest()); got != "hi\n" {
		t.Errorf("environment not passed exactly: %q", got)
	}
	if got := f.read(r.StdoutDigest); got != "to-stdout\n" {
		t.Errorf("stdout %q", got)
	}
	if got := f.read(r.StderrDigest); got != "to-stderr\n" {
		t.Errorf("stderr %q", got)
	}
	if len(r.OutputDirectories) != 1 {
		t.Fatalf("output directories %v", r.OutputDirectories)
	}
	tree := &repb.Tree{}
	if err := proto.Unmarshal([]byte(f.read(r.OutputDirectories[0].TreeDigest)), tree); err != nil {
		t.Fatal(err)
	}
	if len(tree.Root.Directories) != 1 || tree.Root.Directories[0].Name != "sub" || len(tree.Children) != 1 {
		t.Errorf("tree %v", tree)
	}
	if r.ExecutionMetadata.GetWorker() == "" {
		t.Error("execution metadata lacks the worker")
	}
	// The result was cached: a second Execute is a cache hit.
	resp2 := f.run(ctx, root, cmd)
	if !resp2.CachedResult {
		t.Error("second run was not served from the action cache")
	}
}

func TestFailingActionIsNotCached(t *testing.T) {
	f := startFarm(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := shCmd("echo broken >&2; exit 7")
	resp := f.run(ctx, digest.Empty(digest.SHA256), cmd)
	if resp.Result.GetExitCode() != 7 || resp.Status.GetCode() != 0 {
		t.Fatalf("response %v", resp)
	}
	if got := f.read(resp.Result.StderrDigest); got != "broken\n" {
		t.Errorf("stderr %q", got)
	}
	if resp2 := f.run(ctx, digest.Empty(digest.SHA256), cmd); resp2.CachedResult {
		t.Error("a failed action was served from the cache")
	}
}

func TestTimeoutKillsAndKeepsPartialOutput(t *testing.T) {
	f := startFarm(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	start := time.Now()
	resp := f.run(ctx, digest.Empty(digest.SHA256), shCmd("echo started; sleep 60 & sleep 60"), func(a *repb.Action) { a.Timeout = durationpb.New(time.Second) })
	if codes.Code(resp.Status.GetCode()) != codes.DeadlineExceeded {
		t.Fatalf("status %v, want DEADLINE_EXCEEDED", resp.Status)
	}
	if resp.Result == nil || f.read(resp.Result.StdoutDigest) != "started\n" {
		t.Errorf("partial stdout lost: %v", resp.Result)
	}
	if time.Since(start) > 50*time.Second {
		t.Error("the timed out action was not killed")
	}
}

func TestMissingInputFoundByWorkerIsPreconditionFailure(t *testing.T) {
	f := startFarm(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	resp := f.run(ctx, digest.Empty(digest.SHA256), &repb.Command{Arguments: []string{"/no/such/program"}})
	if codes.Code(resp.Status.GetCode()) == codes.OK && resp.Result.GetExitCode() == 0 {
		t.Fatalf("a missing program succeeded: %v", resp)
	}
}

func TestWorkerLossMovesActionToAnotherWorker(t *testing.T) {
	f := startFarm(t, func(c *config.Config) { c.Worker.Enabled = false })
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	startWorker := func(id string) context.CancelFunc {
		wctx, stop := context.WithCancel(ctx)
		wc := config.Default().Worker
		wc.ID, wc.Cores, wc.WorkDir = id, 1, filepath.Join(f.dir, id)
		w, err := worker.New(f.conn, workerpb.NewWorkersClient(f.conn), WorkerConfig(wc, quietLogger()))
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() { w.Run(wctx); close(done) }()
		return func() { stop(); <-done }
	}
	stop1 := startWorker("first")
	marker := filepath.Join(f.dir, "started-on")
	cmd := shCmd("echo $WORKER_HINT >> "+marker+"; sleep 2; echo finished > out", "out")
	type result struct {
		resp *repb.ExecuteResponse
	}
	res := make(chan result, 1)
	go func() { res <- result{f.run(ctx, digest.Empty(digest.SHA256), cmd)} }()
	// Wait until the first worker has started the action, then kill it.
	for {
		if b, _ := os.ReadFile(marker); len(b) > 0 {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("action never started")
		}
		time.Sleep(20 * time.Millisecond)
	}
	stop1()
	stop2 := startWorker("second")
	defer stop2()
	r := <-res
	if err := client.CheckResponse(r.resp); err != nil {
		t.Fatal(err)
	}
	if r.resp.Result.ExecutionMetadata.GetWorker() != "second" {
		t.Errorf("completed on %q, want the second worker", r.resp.Result.ExecutionMetadata.GetWorker())
	}
	if b, _ := os.ReadFile(marker); strings.Count(string(b), "\n") != 2 {
		t.Errorf("action should have started twice, marker says %q", b)
	}
}

// waitForPID waits until the action wrote its process id to path.
func waitForPID(ctx context.Context, t *testing.T, path string) int {
	t.Helper()
	for ctx.Err() == nil {
		if b, err := os.ReadFile(path); err == nil && strings.HasSuffix(string(b), "\n") {
			pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
			if err != nil {
				t.Fatal(err)
			}
			return pid
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("action never started")
	return 0
}

func waitGone(ctx context.Context, t *testing.T, pid int) {
	t.Helper()
	for ctx.Err() == nil {
		if _, err := os.Stat(filepath.Join("/proc", strconv.Itoa(pid))); os.IsNotExist(err) {
			return
		}
		// A zombie awaiting its parent counts as gone.
		if b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat")); err == nil && strings.Contains(string(b), ") Z ") {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("process %d still runs", pid)
}

func TestCallerGoneForGraceKillsProcess(t *testing.T) {
	f := startFarm(t, func(c *config.Config) { c.Scheduler.CallerGrace = config.Duration(500 * time.Millisecond) })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pidFile := filepath.Join(f.dir, "pid")
	cmd := &repb.Command{Arguments: []string{"/bin/sh", "-c", "sleep 120 & echo $! > " + pidFile + "; wait"}}
	a := &repb.Action{CommandDigest: f.put(cmd).Proto(), InputRootDigest: digest.Empty(digest.SHA256).Proto()}
	ad := f.put(a)
	ectx, ecancel := context.WithCancel(ctx)
	stream, err := repb.NewExecutionClient(f.conn).Execute(ectx, &repb.ExecuteRequest{ActionDigest: ad.Proto()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	pid := waitForPID(ctx, t, pidFile)
	ecancel() // the only caller goes away
	waitGone(ctx, t, pid)
}

func TestCancelOperationKillsProcess(t *testing.T) {
	f := startFarm(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pidFile := filepath.Join(f.dir, "pid")
	cmd := &repb.Command{Arguments: []string{"/bin/sh", "-c", "sleep 120 & echo $! > " + pidFile + "; wait"}}
	ad := f.put(&repb.Action{CommandDigest: f.put(cmd).Proto(), InputRootDigest: digest.Empty(digest.SHA256).Proto()})
	stream, err := repb.NewExecutionClient(f.conn).Execute(ctx, &repb.ExecuteRequest{ActionDigest: ad.Proto()})
	if err != nil {
		t.Fatal(err)
	}
	first, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	pid := waitForPID(ctx, t, pidFile)
	if err := f.srv.Scheduler().Cancel(first.Name); err != nil {
		t.Fatal(err)
	}
	waitGone(ctx, t, pid)
}

func TestWorkerResourcesAndWrappersFromConfig(t *testing.T) {
	f := startFarm(t, func(c *config.Config) {
		c.Worker.Resources = map[string]int64{"gpu": 1}
		c.Worker.ProcessWrappers = map[string][]string{"tag": {"/usr/bin/env", "TAGGED=yes"}}
		c.Scheduler.UnsatisfiableWait = config.Duration(2 * time.Second)
		c.Scheduler.StartupGrace = 0
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := shCmd("echo $TAGGED $GANTRY_MAX_CORES > out", "out")
	cmd.Platform = &repb.Platform{Properties: []*repb.Platform_Property{
		{Name: "max-cores", Value: "2"}, {Name: "process-wrapper", Value: "tag"}, {Name: "resource:gpu", Value: "1"},
	}}
	resp := f.run(ctx, digest.Empty(digest.SHA256), cmd)
	if err := client.CheckResponse(resp); err != nil {
		t.Fatal(err)
	}
	if got := f.read(resp.Result.OutputFiles[0].Digest); got != "yes 2\n" {
		t.Errorf("wrapper or max-cores not applied: %q", got)
	}
	cmd.Platform.Properties[2].Value = "2" // more gpus than any worker has
	resp = f.run(ctx, digest.Empty(digest.SHA256), cmd)
	if codes.Code(resp.Status.GetCode()) != codes.FailedPrecondition || !strings.Contains(resp.Status.GetMessage(), "resource:gpu") {
		t.Fatalf("unsatisfiable action: %v", resp.Status)
	}
}

func TestLargeStdoutSpillsAndSurvives(t *testing.T) {
	f := startFarm(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// 3 MiB of output: more than the worker keeps in memory.
	resp := f.run(ctx, digest.Empty(digest.SHA256), shCmd("head -c 3145728 /dev/zero | tr '\\0' x; echo small >&2"))
	if err := client.CheckResponse(resp); err != nil {
		t.Fatal(err)
	}
	out := f.read(resp.Result.StdoutDigest)
	if len(out) != 3<<20 || strings.Trim(out, "x") != "" {
		t.Fatalf("stdout has %d bytes, want 3 MiB of x", len(out))
	}
	if got := f.read(resp.Result.StderrDigest); got != "small\n" {
		t.Errorf("stderr %q", got)
	}
	entries, _ := os.ReadDir(filepath.Join(f.dir, "worker", "logs"))
	if len(entries) != 0 {
		t.Errorf("log files left behind: %v", entries)
	}
}
