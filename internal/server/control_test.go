package server

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	adminpb "github.com/gantry-build/gantry/api/admin/v1"
	workerpb "github.com/gantry-build/gantry/api/worker/v1"
	"github.com/gantry-build/gantry/internal/client"
	"github.com/gantry-build/gantry/internal/config"
	"github.com/gantry-build/gantry/internal/digest"
	"github.com/gantry-build/gantry/internal/scheduler"
	"github.com/gantry-build/gantry/internal/worker"
)

// started is an action running in the background.
type started struct {
	name string
	res  chan *repb.ExecuteResponse
	err  chan error
}

// start submits cmd and returns once the operation has a name.
func (f *farm) start(ctx context.Context, cmd *repb.Command, props ...*repb.Platform_Property) *started {
	f.t.Helper()
	a := &repb.Action{CommandDigest: f.put(cmd).Proto(), InputRootDigest: digest.Empty(digest.SHA256).Proto(), DoNotCache: true}
	if len(props) > 0 {
		a.Platform = &repb.Platform{Properties: props}
	}
	ad := f.put(a)
	stream, err := repb.NewExecutionClient(f.conn).Execute(ctx, &repb.ExecuteRequest{ActionDigest: ad.Proto()})
	if err != nil {
		f.t.Fatal(err)
	}
	first := mustRecv(f.t, stream)
	s := &started{name: first.Name, res: make(chan *repb.ExecuteResponse, 1), err: make(chan error, 1)}
	go func() {
		for {
			op, err := stream.Recv()
			if err != nil {
				s.err <- err
				return
			}
			if op.Done {
				s.res <- responseOf(f.t, op)
				return
			}
		}
	}()
	return s
}

func (s *started) wait(ctx context.Context, t *testing.T) *repb.ExecuteResponse {
	t.Helper()
	select {
	case r := <-s.res:
		return r
	case err := <-s.err:
		t.Fatalf("operation %s: %v", s.name, err)
	case <-ctx.Done():
		t.Fatalf("operation %s did not finish", s.name)
	}
	return nil
}

// gated is a command that writes its pid to dir/NAME.pid and waits for
// dir/NAME.go to exist.
func gated(dir, name string) *repb.Command {
	p := filepath.Join(dir, name)
	return shCmd(fmt.Sprintf("echo $$ > %s.pid; while [ ! -e %s.go ]; do sleep 0.02; done; echo %s-done", p, p, name))
}

func workerState(t *testing.T, ctx context.Context, a adminpb.AdminClient, id string) *adminpb.WorkerStatus {
	t.Helper()
	resp, err := a.ListWorkers(ctx, &adminpb.ListWorkersRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range resp.Workers {
		if w.WorkerId == id {
			return w
		}
	}
	return nil
}

// waitFor polls cond (bounded by ctx).
func waitFor(ctx context.Context, t *testing.T, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		if ctx.Err() != nil {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestDrainFinishesRunningWorkAndTakesNoMore(t *testing.T) {
	f := startFarm(t, func(c *config.Config) { c.Worker.ID = "w1" })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	admin := adminpb.NewAdminClient(f.conn)
	var mu sync.Mutex
	var leased []string
	f.srv.Scheduler().OnEvent(func(e scheduler.Event) {
		if e.Kind == scheduler.EventLeased {
			mu.Lock()
			leased = append(leased, e.Task)
			mu.Unlock()
		}
	})
	a := f.start(ctx, gated(f.dir, "a"))
	waitForPID(ctx, t, filepath.Join(f.dir, "a.pid"))

	resp, err := admin.DrainWorker(ctx, &adminpb.WorkerControlRequest{WorkerId: "w1", Reason: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Worker.State != "draining" || !resp.Worker.Drain {
		t.Fatalf("after drain: %+v, want draining", resp.Worker)
	}
	b := f.start(ctx, shCmd("echo b"))
	// The running action finishes normally.
	os.WriteFile(filepath.Join(f.dir, "a.go"), nil, 0o644)
	if r := a.wait(ctx, t); client.CheckResponse(r) != nil || !strings.Contains(string(r.Result.StdoutRaw)+f.readOpt(r.Result.StdoutDigest), "a-done") {
		t.Fatalf("the running action did not finish normally: %v", r)
	}
	// The idle worker polls, and the poll waits: it is offered nothing.
	waitFor(ctx, t, "the drained worker to poll while idle", func() bool {
		for _, w := range f.srv.Scheduler().Workers() {
			if w.Info.ID == "w1" {
				return w.Polling && len(w.Leases) == 0
			}
		}
		return false
	})
	if st := workerState(t, ctx, admin, "w1"); st.State != "drained" {
		t.Errorf("idle drained worker state %q, want drained", st.State)
	}
	if info, err := f.srv.Scheduler().Operation(b.name); err != nil || info.Stage != repb.ExecutionStage_QUEUED || info.Attempts != 0 {
		t.Fatalf("new work on a drained worker: %+v %v", info, err)
	}
	// Undrain: the queued action runs.
	if resp, err = admin.UndrainWorker(ctx, &adminpb.WorkerControlRequest{WorkerId: "w1"}); err != nil || resp.Worker.State != "active" {
		t.Fatalf("undrain: %v %v", resp, err)
	}
	if r := b.wait(ctx, t); client.CheckResponse(r) != nil {
		t.Fatalf("after undrain: %v", r)
	}
	mu.Lock()
	if len(leased) != 2 {
		t.Errorf("leased %d times, want 2", len(leased))
	}
	mu.Unlock()
	// Unknown workers and empty ids are refused with a hint.
	if _, err := admin.DrainWorker(ctx, &adminpb.WorkerControlRequest{WorkerId: "nope"}); status.Code(err) != codes.NotFound || !strings.Contains(err.Error(), "gantry workers list") {
		t.Errorf("drain of an unknown worker: %v", err)
	}
	if _, err := admin.PauseWorker(ctx, &adminpb.WorkerControlRequest{}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("pause without an id: %v", err)
	}
}

// readOpt reads a digest's blob, "" for none.
func (f *farm) readOpt(d *repb.Digest) string {
	if d == nil {
		return ""
	}
	return f.read(d)
}

func TestDrainSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	mod := func(c *config.Config) { c.DataDir = dir; c.Worker.ID = "w1" }
	f := startFarm(t, mod)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	waitFor(ctx, t, "the worker to register", func() bool { return workerState(t, ctx, adminpb.NewAdminClient(f.conn), "w1") != nil })
	if _, err := adminpb.NewAdminClient(f.conn).DrainWorker(ctx, &adminpb.WorkerControlRequest{WorkerId: "w1"}); err != nil {
		t.Fatal(err)
	}
	f.stop()
	f2 := startFarm(t, mod)
	admin := adminpb.NewAdminClient(f2.conn)
	var st *adminpb.WorkerStatus
	waitFor(ctx, t, "the worker to register again", func() bool { st = workerState(t, ctx, admin, "w1"); return st != nil })
	if st.State != "drained" {
		t.Fatalf("after a restart the worker is %q, want drained", st.State)
	}
	b := f2.start(ctx, shCmd("echo b"))
	if _, err := admin.UndrainWorker(ctx, &adminpb.WorkerControlRequest{WorkerId: "w1"}); err != nil {
		t.Fatal(err)
	}
	if r := b.wait(ctx, t); client.CheckResponse(r) != nil {
		t.Fatal(r)
	}
}

func TestTerminateExitsWorkerOnceIdle(t *testing.T) {
	f := startFarm(t, func(c *config.Config) { c.Worker.Enabled = false })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	wc := config.Default().Worker
	wc.ID, wc.Cores, wc.WorkDir = "remote", 1, filepath.Join(f.dir, "remote")
	w, err := worker.New(f.conn, workerpb.NewWorkersClient(f.conn), WorkerConfig(wc, quietLogger()))
	if err != nil {
		t.Fatal(err)
	}
	wctx, stopWorker := context.WithCancel(ctx)
	defer stopWorker()
	exited := make(chan error, 1)
	go func() { exited <- w.Run(wctx) }()
	a := f.start(ctx, gated(f.dir, "a"))
	waitForPID(ctx, t, filepath.Join(f.dir, "a.pid"))
	admin := adminpb.NewAdminClient(f.conn)
	resp, err := admin.TerminateWorker(ctx, &adminpb.WorkerControlRequest{WorkerId: "remote"})
	if err != nil || resp.Worker.State != "terminating" {
		t.Fatalf("terminate: %v %v", resp, err)
	}
	select {
	case err := <-exited:
		t.Fatalf("the worker exited with an action running: %v", err)
	default:
	}
	os.WriteFile(filepath.Join(f.dir, "a.go"), nil, 0o644)
	if r := a.wait(ctx, t); client.CheckResponse(r) != nil {
		t.Fatalf("the running action did not finish: %v", r)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("worker exited with %v", err)
		}
	case <-ctx.Done():
		t.Fatal("the terminated worker did not exit once idle")
	}
	if wctx.Err() != nil {
		t.Fatal("worker context ended: the exit was not the terminate's")
	}
}

func TestTerminateEmbeddedWorkerKeepsServer(t *testing.T) {
	f := startFarm(t, func(c *config.Config) { c.Worker.ID = "emb" })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	admin := adminpb.NewAdminClient(f.conn)
	waitFor(ctx, t, "the worker to register", func() bool { return workerState(t, ctx, admin, "emb") != nil })
	if _, err := admin.TerminateWorker(ctx, &adminpb.WorkerControlRequest{WorkerId: "emb"}); err != nil {
		t.Fatal(err)
	}
	// Once it stops heartbeating the scheduler forgets it; the server
	// still answers.
	waitFor(ctx, t, "the terminated worker to go", func() bool { return workerState(t, ctx, admin, "emb") == nil })
	if _, err := repb.NewCapabilitiesClient(f.conn).GetCapabilities(ctx, &repb.GetCapabilitiesRequest{}); err != nil {
		t.Fatalf("server after terminating its worker: %v", err)
	}
}

func TestKillOperationReturnsCancelled(t *testing.T) {
	f := startFarm(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	a := f.start(ctx, gated(f.dir, "a"))
	pid := waitForPID(ctx, t, filepath.Join(f.dir, "a.pid"))
	admin := adminpb.NewAdminClient(f.conn)
	resp, err := admin.KillOperation(ctx, &adminpb.KillOperationRequest{Name: a.name, Reason: "stuck"})
	if err != nil || resp.AlreadyDone {
		t.Fatalf("kill: %v %v", resp, err)
	}
	r := a.wait(ctx, t)
	if codes.Code(r.Status.GetCode()) != codes.Canceled || !strings.Contains(r.Status.GetMessage(), "stuck") {
		t.Fatalf("client got %v, want CANCELLED with the reason", r.Status)
	}
	waitGone(ctx, t, pid)
	if resp, err := admin.KillOperation(ctx, &adminpb.KillOperationRequest{Name: a.name}); err != nil || !resp.AlreadyDone {
		t.Errorf("second kill: %v %v", resp, err)
	}
	if _, err := admin.KillOperation(ctx, &adminpb.KillOperationRequest{Name: "no-such-op"}); status.Code(err) != codes.NotFound {
		t.Errorf("kill of an unknown operation: %v", err)
	}
	if _, err := admin.ReloadConfig(ctx, &adminpb.ReloadConfigRequest{}); status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "--config") {
		t.Errorf("reload without a config file: %v", err)
	}
}

// TestKillOperationThatSticks: a kill with refuse_seconds cancels the
// running action and makes a new Execute of the same action fail with
// FAILED_PRECONDITION naming the kill; other actions still run.
func TestKillOperationThatSticks(t *testing.T) {
	f := startFarm(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := gated(f.dir, "loop")
	a := f.start(ctx, cmd)
	pid := waitForPID(ctx, t, filepath.Join(f.dir, "loop.pid"))
	admin := adminpb.NewAdminClient(f.conn)
	if _, err := admin.KillOperation(ctx, &adminpb.KillOperationRequest{Name: a.name, Reason: "loops forever", RefuseSeconds: -1}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("refuse_seconds -1: %v, want INVALID_ARGUMENT", err)
	}
	if _, err := admin.KillOperation(ctx, &adminpb.KillOperationRequest{Name: a.name, Reason: "loops forever", RefuseSeconds: 600}); err != nil {
		t.Fatal(err)
	}
	if r := a.wait(ctx, t); codes.Code(r.Status.GetCode()) != codes.Canceled {
		t.Fatalf("client got %v, want CANCELLED", r.Status)
	}
	waitGone(ctx, t, pid)
	// The client submits the same action again, as Bazel does.
	ad := f.put(&repb.Action{CommandDigest: f.put(cmd).Proto(), InputRootDigest: digest.Empty(digest.SHA256).Proto(), DoNotCache: true})
	stream, err := repb.NewExecutionClient(f.conn).Execute(ctx, &repb.ExecuteRequest{ActionDigest: ad.Proto()})
	for err == nil { // CACHE_CHECK first, then the refusal
		_, err = stream.Recv()
	}
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "loops forever") || !strings.Contains(err.Error(), a.name) {
		t.Fatalf("Execute of the killed action: %v, want FAILED_PRECONDITION naming the kill", err)
	}
	if r := f.run(ctx, digest.Empty(digest.SHA256), shCmd("echo other")); r.Status.GetCode() != 0 || r.Result.GetExitCode() != 0 {
		t.Fatalf("another action after the kill: %v", r)
	}
}

func TestReloadConfigAppliesQueues(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gantry.yaml")
	f := startFarmWith(t, quietLogger(), func(c *config.Config) { c.Worker.Enabled = false }, WithConfigFile(path))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin := adminpb.NewAdminClient(f.conn)
	os.WriteFile(path, []byte("scheduler:\n  queues: [{name: big, properties: {pool: [big]}}, {name: rest, allow_unmatched: true}]\n"), 0o644)
	if _, err := admin.ReloadConfig(ctx, &adminpb.ReloadConfigRequest{}); err != nil {
		t.Fatal(err)
	}
	ex, err := admin.ExplainPlatform(ctx, &adminpb.ExplainPlatformRequest{Properties: []*adminpb.Property{{Name: "pool", Value: "big"}}})
	if err != nil || len(ex.Queues) != 2 || ex.Queues[0].Queue != "big" || !ex.Queues[0].Chosen {
		t.Fatalf("queues after reload: %v %v", ex, err)
	}
	os.WriteFile(path, []byte("scheduler: {queues: [{name: x, properties: 7}]}\n"), 0o644)
	if _, err := admin.ReloadConfig(ctx, &adminpb.ReloadConfigRequest{}); status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "old one stays") {
		t.Errorf("reload of a bad file: %v", err)
	}
}

// cpuTicks is a process's user plus system CPU time in clock ticks, and
// its state letter, from /proc/PID/stat.
func cpuTicks(t *testing.T, pid int) (ticks int64, state string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		t.Fatal(err)
	}
	// Fields after the command name in parentheses: state is the 3rd
	// field of the line, utime and stime the 14th and 15th.
	rest := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	ut, _ := strconv.ParseInt(rest[11], 10, 64)
	st, _ := strconv.ParseInt(rest[12], 10, 64)
	return ut + st, rest[0]
}

func TestPauseStopsAndResumeRestartsCPU(t *testing.T) {
	f := startFarm(t, func(c *config.Config) { c.Worker.ID = "w1" })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	admin := adminpb.NewAdminClient(f.conn)
	// A busy loop in the shell itself, until a file appears.
	p := filepath.Join(f.dir, "busy")
	a := f.start(ctx, shCmd(fmt.Sprintf("echo $$ > %s.pid; while [ ! -e %s.go ]; do :; done; echo busy-done", p, p)))
	pid := waitForPID(ctx, t, p+".pid")
	waitFor(ctx, t, "the busy loop to use CPU", func() bool { n, _ := cpuTicks(t, pid); return n > 0 })

	if resp, err := admin.PauseWorker(ctx, &adminpb.WorkerControlRequest{WorkerId: "w1", Reason: "measure"}); err != nil || resp.Worker.State != "paused" {
		t.Fatalf("pause: %v %v", resp, err)
	}
	waitFor(ctx, t, "the action to stop", func() bool { _, st := cpuTicks(t, pid); return st == "T" })
	paused0, _ := cpuTicks(t, pid)
	time.Sleep(time.Second)
	paused1, st := cpuTicks(t, pid)
	if paused1 != paused0 || st != "T" {
		t.Fatalf("while paused the action used %d ticks (state %s), want none", paused1-paused0, st)
	}
	if _, err := admin.ResumeWorker(ctx, &adminpb.WorkerControlRequest{WorkerId: "w1"}); err != nil {
		t.Fatal(err)
	}
	waitFor(ctx, t, "the action to run again", func() bool { _, st := cpuTicks(t, pid); return st != "T" })
	run0, _ := cpuTicks(t, pid)
	time.Sleep(time.Second)
	run1, _ := cpuTicks(t, pid)
	waitFor(ctx, t, "CPU progress after resume", func() bool { n, _ := cpuTicks(t, pid); return n > paused1 })
	t.Logf("CPU ticks (1/100 s) over 1 s: paused %d, resumed %d", paused1-paused0, run1-run0)
	os.WriteFile(p+".go", nil, 0o644)
	if r := a.wait(ctx, t); client.CheckResponse(r) != nil {
		t.Fatalf("after resume the action did not finish: %v", r)
	}
}
