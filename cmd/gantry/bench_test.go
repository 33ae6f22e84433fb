package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	workerpb "github.com/gantry-build/gantry/api/worker/v1"
	"github.com/gantry-build/gantry/internal/actioncache"
	"github.com/gantry-build/gantry/internal/blobstore"
	"github.com/gantry-build/gantry/internal/client"
	"github.com/gantry-build/gantry/internal/digest"
	"github.com/gantry-build/gantry/internal/frontend"
	"github.com/gantry-build/gantry/internal/loadgen"
)

// parseFlags runs "bench args..." with a runner that only captures the plan.
func parseFlags(t *testing.T, args ...string) (*loadgen.Plan, error) {
	t.Helper()
	var plan *loadgen.Plan
	cmd := newBenchCommandWith(func(_ context.Context, p *loadgen.Plan, _, _ io.Writer) error {
		plan = p
		return nil
	})
	cmd.SetArgs(args)
	cmd.SetOut(io.Discard)
	cmd.SetErr(io.Discard)
	err := cmd.Execute()
	return plan, err
}

func TestBenchFlags(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		wantErr string // substring; "" means valid
		check   func(*loadgen.Plan) string
	}{
		{name: "defaults", check: func(p *loadgen.Plan) string {
			if p.Server != serverFromEnv() || p.Instance != "" || p.Concurrency != 8 || p.Actions != 1000 || p.Duration != 0 ||
				!p.OutputFile || p.Platform != nil || p.SkipCacheLookup || p.NoopWorkers != 0 {
				return fmt.Sprintf("%+v", *p)
			}
			return ""
		}},
		{name: "everything", args: []string{"--server", "bb:8980", "--instance", "a/b", "--concurrency", "3", "--actions", "5",
			"--output-file=false", "--skip-cache-lookup", "--noop-workers", "2"}, check: func(p *loadgen.Plan) string {
			if p.Server != "bb:8980" || p.Instance != "a/b" || p.Concurrency != 3 || p.Actions != 5 || p.OutputFile || !p.SkipCacheLookup || p.NoopWorkers != 2 {
				return fmt.Sprintf("%+v", *p)
			}
			return ""
		}},
		{name: "duration", args: []string{"--duration", "90s"}, check: func(p *loadgen.Plan) string {
			if p.Duration != 90*time.Second || p.Actions != 0 {
				return fmt.Sprintf("duration %s, actions %d; want 90s and no count", p.Duration, p.Actions)
			}
			return ""
		}},
		{name: "platform sorted", args: []string{"--platform", "b=2", "--platform", "a=x=y", "--platform", "b=1", "--platform", "c="},
			check: func(p *loadgen.Plan) string {
				var got []string
				for _, pp := range p.Platform.GetProperties() {
					got = append(got, pp.Name+"="+pp.Value)
				}
				if s := strings.Join(got, " "); s != "a=x=y b=1 b=2 c=" {
					return "properties " + s
				}
				return ""
			}},
		{name: "actions and duration", args: []string{"--actions", "5", "--duration", "1s"}, wantErr: "use one"},
		{name: "zero actions", args: []string{"--actions", "0"}, wantErr: "--actions 0"},
		{name: "negative duration", args: []string{"--duration", "-1s"}, wantErr: "must be positive"},
		{name: "zero duration", args: []string{"--duration", "0s"}, wantErr: "must be positive"},
		{name: "zero concurrency", args: []string{"--concurrency", "0"}, wantErr: "--concurrency 0"},
		{name: "negative workers", args: []string{"--noop-workers", "-1"}, wantErr: "--noop-workers -1"},
		{name: "empty server", args: []string{"--server", " "}, wantErr: "--server is empty"},
		{name: "reserved instance", args: []string{"--instance", "x/blobs"}, wantErr: "reserved word"},
		{name: "platform without =", args: []string{"--platform", "OSFamily"}, wantErr: "expected name=value"},
		{name: "platform without name", args: []string{"--platform", "=linux"}, wantErr: "expected name=value"},
		{name: "platform twice", args: []string{"--platform", "a=1", "--platform", "a=1"}, wantErr: "given twice"},
		{name: "stray argument", args: []string{"extra"}, wantErr: "unknown command"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			plan, err := parseFlags(t, tt.args...)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("bench %v: %v, want an error containing %q", tt.args, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("bench %v: %v", tt.args, err)
			}
			if msg := tt.check(plan); msg != "" {
				t.Errorf("bench %v: wrong plan: %s", tt.args, msg)
			}
		})
	}
}

func TestBenchHelpMentionsGantryOnlyWorkers(t *testing.T) {
	var out bytes.Buffer
	cmd := newBenchCommand()
	cmd.SetArgs([]string{"--help"})
	cmd.SetOut(&out)
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"--noop-workers", "only against a\nGantry server", "--server", "RESULT"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("help does not mention %q:\n%s", want, out.String())
		}
	}
}

// fakeExecutor is an Execution service that "runs" bench actions itself:
// it reads the Action and Command from the CAS, writes the output the
// echo would, and fails every failEvery-th action with exit code 1.
type fakeExecutor struct {
	repb.UnimplementedExecutionServer
	cas       blobstore.Store
	failEvery int64

	n         atomic.Int64
	mu        sync.Mutex
	actions   map[digest.Digest]bool
	requests  []*repb.ExecuteRequest
	platforms []*repb.Platform
}

func (f *fakeExecutor) Execute(req *repb.ExecuteRequest, stream repb.Execution_ExecuteServer) error {
	ctx := stream.Context()
	action, cmd, ad, err := readAction(ctx, f.cas, req)
	if err != nil {
		return err
	}
	n := f.n.Add(1)
	f.mu.Lock()
	f.actions[ad] = true
	f.requests = append(f.requests, req)
	f.platforms = append(f.platforms, action.Platform)
	f.mu.Unlock()

	name := fmt.Sprintf("operations/%d", n)
	if err := stream.Send(&longrunningpb.Operation{Name: name}); err != nil {
		return err
	}
	res := &repb.ActionResult{}
	if f.failEvery > 0 && n%f.failEvery == 0 {
		res.ExitCode, res.StderrRaw = 1, []byte("boom")
	} else if len(cmd.OutputPaths) > 0 {
		// Like a server of REAPI 2.1 or later, the fake reads only
		// output_paths. Arguments are ["/bin/sh", "-c", "echo <id> > out"].
		data := []byte(strings.Fields(cmd.Arguments[2])[1] + "\n")
		d := digest.Compute(digest.SHA256, data)
		if err := blobstore.Put(ctx, f.cas, d, data); err != nil {
			return err
		}
		res.OutputFiles = []*repb.OutputFile{{Path: cmd.OutputPaths[0], Digest: d.Proto()}}
	}
	return sendDone(stream, name, res)
}

// readAction fetches the Action and Command of req from the CAS.
func readAction(ctx context.Context, cas blobstore.Store, req *repb.ExecuteRequest) (*repb.Action, *repb.Command, digest.Digest, error) {
	ad, err := digest.FromProto(req.DigestFunction, req.ActionDigest)
	if err != nil {
		return nil, nil, ad, status.Error(codes.InvalidArgument, err.Error())
	}
	action, cmd := &repb.Action{}, &repb.Command{}
	data, err := blobstore.Get(ctx, cas, ad)
	if err == nil {
		err = proto.Unmarshal(data, action)
	}
	if err == nil {
		var cd digest.Digest
		if cd, err = digest.FromProto(digest.SHA256, action.CommandDigest); err == nil {
			if data, err = blobstore.Get(ctx, cas, cd); err == nil {
				err = proto.Unmarshal(data, cmd)
			}
		}
	}
	if err != nil {
		return nil, nil, ad, status.Errorf(codes.FailedPrecondition, "action %s: %v", ad, err)
	}
	return action, cmd, ad, nil
}

func sendDone(stream repb.Execution_ExecuteServer, name string, res *repb.ActionResult) error {
	resp, err := anypb.New(&repb.ExecuteResponse{Result: res})
	if err != nil {
		return err
	}
	return stream.Send(&longrunningpb.Operation{Name: name, Done: true, Result: &longrunningpb.Operation_Response{Response: resp}})
}

// serve starts a gRPC server on 127.0.0.1:0 with Gantry's storage services
// (execution advertised as execEnabled says) plus what register adds.
func serve(t *testing.T, execEnabled bool, register func(*grpc.Server, blobstore.Store)) string {
	t.Helper()
	mem := blobstore.NewMemory(0)
	g := grpc.NewServer(frontend.ServerCodec())
	frontend.New(mem, actioncache.NewMemory(0), frontend.Options{ExecEnabled: execEnabled}).Register(g)
	if register != nil {
		register(g, mem)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); g.Serve(lis) }()
	t.Cleanup(func() { g.Stop(); <-done })
	return lis.Addr().String()
}

// runBenchCommand runs gantry bench with args and returns its stdout,
// stderr and the fields of its RESULT line.
func runBenchCommand(t *testing.T, args ...string) (stdout, stderr string, result map[string]string, err error) {
	t.Helper()
	var out, errOut bytes.Buffer
	cmd := newBenchCommand()
	cmd.SetArgs(args)
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	err = cmd.Execute()
	result = map[string]string{}
	for _, line := range strings.Split(out.String(), "\n") {
		if rest, ok := strings.CutPrefix(line, "RESULT "); ok {
			for _, kv := range strings.Fields(rest) {
				k, v, _ := strings.Cut(kv, "=")
				result[k] = v
			}
		}
	}
	return out.String(), errOut.String(), result, err
}

func TestBenchAgainstServer(t *testing.T) {
	tests := []struct {
		name       string
		args       []string
		failEvery  int64
		wantOK     string
		wantErrors string
		wantErr    string
	}{
		{"output file", []string{"--actions", "40", "--concurrency", "4", "--platform", "OSFamily=linux", "--platform", "Arch=amd64"}, 0, "40", "0", ""},
		{"no outputs, skip cache", []string{"--actions", "10", "--output-file=false", "--skip-cache-lookup", "--instance", "ci"}, 0, "10", "0", ""},
		{"some fail", []string{"--actions", "20", "--concurrency", "3"}, 5, "16", "4", "4 of 20 actions failed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fake := &fakeExecutor{failEvery: tt.failEvery, actions: map[digest.Digest]bool{}}
			addr := serve(t, true, func(g *grpc.Server, cas blobstore.Store) {
				fake.cas = cas
				repb.RegisterExecutionServer(g, fake)
			})
			stdout, stderr, result, err := runBenchCommand(t, append([]string{"--server", addr}, tt.args...)...)
			if tt.wantErr == "" && err != nil {
				t.Fatalf("bench: %v\nstdout:\n%s\nstderr:\n%s", err, stdout, stderr)
			}
			if tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("bench: %v, want an error containing %q", err, tt.wantErr)
			}
			if result["actions"] != tt.wantOK || result["errors"] != tt.wantErrors {
				t.Errorf("RESULT actions=%s errors=%s, want %s and %s\n%s", result["actions"], result["errors"], tt.wantOK, tt.wantErrors, stdout)
			}
			for _, k := range []string{"rate", "p50_ms", "p90_ms", "p99_ms", "max_ms", "elapsed_s"} {
				if _, err := strconv.ParseFloat(result[k], 64); err != nil {
					t.Errorf("RESULT %s=%q is not a number", k, result[k])
				}
			}
			fake.mu.Lock()
			defer fake.mu.Unlock()
			if int64(len(fake.actions)) != fake.n.Load() {
				t.Errorf("%d Execute calls for %d distinct actions; every action must be unique", fake.n.Load(), len(fake.actions))
			}
			for _, req := range fake.requests {
				if req.InstanceName != valueAfter(tt.args, "--instance") || req.SkipCacheLookup != contains(tt.args, "--skip-cache-lookup") {
					t.Errorf("ExecuteRequest instance %q skip_cache_lookup %v, not as the flags say", req.InstanceName, req.SkipCacheLookup)
				}
			}
			if contains(tt.args, "--platform") {
				want := &repb.Platform{Properties: []*repb.Platform_Property{{Name: "Arch", Value: "amd64"}, {Name: "OSFamily", Value: "linux"}}}
				for _, p := range fake.platforms {
					if !proto.Equal(p, want) {
						t.Errorf("action platform %v, want %v", p, want)
					}
				}
			}
			if tt.failEvery > 0 && !strings.Contains(stdout, "first error: ") {
				t.Errorf("the report does not show the first error:\n%s", stdout)
			}
		})
	}
}

func contains(args []string, s string) bool {
	for _, a := range args {
		if a == s {
			return true
		}
	}
	return false
}

func valueAfter(args []string, flag string) string {
	for i, a := range args {
		if a == flag && i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}

func TestBenchServerChecks(t *testing.T) {
	cacheOnly := serve(t, false, nil)
	noExecution := serve(t, true, nil) // advertises execution, lacks the service
	// Executes nothing and has no worker protocol: only the no-op workers'
	// failure can end a run against it.
	blocking := serve(t, true, func(g *grpc.Server, _ blobstore.Store) {
		repb.RegisterExecutionServer(g, &blockingExecutor{})
	})
	unreachable := func() string {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := lis.Addr().String()
		lis.Close()
		return addr
	}()
	tests := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"cache only", []string{"--server", cacheOnly, "--actions", "1"}, "exec_enabled is false"},
		{"no Execution service", []string{"--server", noExecution, "--actions", "1"}, "does not implement the Execution service"},
		{"unreachable", []string{"--server", unreachable, "--actions", "1"}, "check --server"},
		{"no-op workers need Gantry", []string{"--server", blocking, "--duration", "1h", "--noop-workers", "1"}, "only against a Gantry scheduler"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, _, err := runBenchCommand(t, tt.args...)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("bench %v: %v, want an error containing %q", tt.args, err, tt.wantErr)
			}
		})
	}
}

// fakeGantry is a minimal scheduler: Execute queues an assignment for the
// worker protocol and answers with the result a worker completes it with.
type fakeGantry struct {
	repb.UnimplementedExecutionServer
	workerpb.UnimplementedWorkersServer
	cas   blobstore.Store
	queue chan *workerpb.Assignment

	mu        sync.Mutex
	results   map[string]chan *workerpb.CompleteRequest
	workers   map[string]bool
	completed map[string]string // lease -> worker
}

func (f *fakeGantry) Execute(req *repb.ExecuteRequest, stream repb.Execution_ExecuteServer) error {
	ctx := stream.Context()
	_, _, ad, err := readAction(ctx, f.cas, req)
	if err != nil {
		return err
	}
	actionBytes, _ := blobstore.Get(ctx, f.cas, ad)
	action := &repb.Action{}
	proto.Unmarshal(actionBytes, action)
	cd, _ := digest.FromProto(digest.SHA256, action.CommandDigest)
	cmdBytes, _ := blobstore.Get(ctx, f.cas, cd)

	lease := client.NewUUID()
	ch := make(chan *workerpb.CompleteRequest, 1)
	f.mu.Lock()
	f.results[lease] = ch
	f.mu.Unlock()
	f.queue <- &workerpb.Assignment{
		LeaseId: lease, TaskId: lease, ActionDigest: &workerpb.Digest{Hash: ad.Hash, SizeBytes: ad.Size, DigestFunction: int32(ad.Function)},
		Action: actionBytes, Command: cmdBytes, Cores: 1, Attempt: 1,
	}
	select {
	case c := <-ch:
		res := &repb.ActionResult{}
		if err := proto.Unmarshal(c.ActionResult, res); err != nil {
			return status.Errorf(codes.Internal, "worker result: %v", err)
		}
		return sendDone(stream, "operations/"+lease, res)
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (f *fakeGantry) Register(_ context.Context, req *workerpb.RegisterRequest) (*workerpb.RegisterResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.workers[req.WorkerId] = true
	return &workerpb.RegisterResponse{HeartbeatIntervalMs: 1000, HeartbeatTimeoutMs: 10000}, nil
}

func (f *fakeGantry) Poll(ctx context.Context, req *workerpb.PollRequest) (*workerpb.PollResponse, error) {
	resp := &workerpb.PollResponse{}
	for _, c := range req.Completions {
		c.WorkerId = req.WorkerId
		done, _ := f.Complete(ctx, c)
		resp.CompletionsAccepted = append(resp.CompletionsAccepted, done.Accepted)
	}
	select {
	case a := <-f.queue:
		resp.Assignment = a
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(time.Duration(req.WaitMs) * time.Millisecond):
		return resp, nil
	}
	// Hand out more queued work, up to what the worker asked for.
	for n := 1; n < int(req.MaxAssignments); n++ {
		select {
		case a := <-f.queue:
			resp.MoreAssignments = append(resp.MoreAssignments, a)
		default:
			return resp, nil
		}
	}
	return resp, nil
}

func (f *fakeGantry) Heartbeat(context.Context, *workerpb.HeartbeatRequest) (*workerpb.HeartbeatResponse, error) {
	return &workerpb.HeartbeatResponse{}, nil
}

func (f *fakeGantry) Complete(_ context.Context, req *workerpb.CompleteRequest) (*workerpb.CompleteResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	ch, ok := f.results[req.LeaseId]
	if !ok {
		return &workerpb.CompleteResponse{Accepted: false}, nil
	}
	delete(f.results, req.LeaseId)
	f.completed[req.LeaseId] = req.WorkerId
	ch <- req
	return &workerpb.CompleteResponse{Accepted: true}, nil
}

func TestBenchWithNoopWorkers(t *testing.T) {
	for _, outputFile := range []bool{true, false} {
		t.Run(fmt.Sprintf("output-file=%v", outputFile), func(t *testing.T) {
			fake := &fakeGantry{queue: make(chan *workerpb.Assignment, 100), results: map[string]chan *workerpb.CompleteRequest{},
				workers: map[string]bool{}, completed: map[string]string{}}
			addr := serve(t, true, func(g *grpc.Server, cas blobstore.Store) {
				fake.cas = cas
				repb.RegisterExecutionServer(g, fake)
				workerpb.RegisterWorkersServer(g, fake)
			})
			stdout, stderr, result, err := runBenchCommand(t, "--server", addr, "--noop-workers", "3", "--actions", "30",
				"--concurrency", "5", fmt.Sprintf("--output-file=%v", outputFile))
			if err != nil {
				t.Fatalf("bench: %v\nstdout:\n%s\nstderr:\n%s", err, stdout, stderr)
			}
			if result["actions"] != "30" || result["errors"] != "0" {
				t.Errorf("RESULT actions=%s errors=%s, want 30 and 0\n%s", result["actions"], result["errors"], stdout)
			}
			fake.mu.Lock()
			defer fake.mu.Unlock()
			if len(fake.workers) != 3 {
				t.Errorf("%d workers registered, want 3: %v", len(fake.workers), fake.workers)
			}
			if len(fake.completed) != 30 {
				t.Errorf("workers completed %d leases, want 30", len(fake.completed))
			}
			for _, w := range fake.completed {
				if !fake.workers[w] {
					t.Errorf("lease completed by unregistered worker %q", w)
				}
			}
		})
	}
}

// --workers-only runs the no-op workers alone: a second bench without
// workers (another process, in real use) gets its actions run by them, and
// the workers report what they completed when interrupted.
func TestBenchWorkersOnly(t *testing.T) {
	fake := &fakeGantry{queue: make(chan *workerpb.Assignment, 100), results: map[string]chan *workerpb.CompleteRequest{},
		workers: map[string]bool{}, completed: map[string]string{}}
	addr := serve(t, true, func(g *grpc.Server, cas blobstore.Store) {
		fake.cas = cas
		repb.RegisterExecutionServer(g, fake)
		workerpb.RegisterWorkersServer(g, fake)
	})
	plan, err := parseFlags(t, "--server", addr, "--workers-only", "--noop-workers", "2", "--noop-slots", "1", "--output-file=false")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out bytes.Buffer
	errc := make(chan error, 1)
	go func() { errc <- runBench(ctx, plan, &out, io.Discard) }()
	stdout, stderr, result, err := runBenchCommand(t, "--server", addr, "--actions", "20", "--concurrency", "4", "--output-file=false")
	if err != nil || result["actions"] != "20" || result["errors"] != "0" {
		t.Fatalf("the load without workers: %v, RESULT %v\nstdout:\n%s\nstderr:\n%s", err, result, stdout, stderr)
	}
	cancel()
	if err := <-errc; err != nil {
		t.Fatalf("--workers-only after an interrupt: %v", err)
	}
	if !strings.Contains(out.String(), "RESULT workers=2 finished=20 ") {
		t.Errorf("--workers-only report:\n%s\nwant the 2 workers and the 20 actions they finished", out.String())
	}
	for _, args := range [][]string{{"--workers-only"}, {"--workers-only", "--noop-workers", "1", "--actions", "5"}} {
		if _, err := parseFlags(t, args...); err == nil {
			t.Errorf("bench %q: no error", args)
		}
	}
}

// Interrupting stops the run and reports it as an error, not as failures.
func TestBenchInterrupted(t *testing.T) {
	exec := &blockingExecutor{started: make(chan struct{}, 100)}
	addr := serve(t, true, func(g *grpc.Server, _ blobstore.Store) { repb.RegisterExecutionServer(g, exec) })
	plan, err := parseFlags(t, "--server", addr, "--duration", "1h", "--concurrency", "2")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out bytes.Buffer
	errc := make(chan error, 1)
	go func() { errc <- runBench(ctx, plan, &out, io.Discard) }()
	select {
	case <-exec.started:
	case err := <-errc:
		t.Fatalf("runBench ended before any action started: %v", err)
	}
	cancel()
	err = <-errc
	if err == nil || !strings.Contains(err.Error(), "interrupted after 0 actions") {
		t.Errorf("runBench after cancel = %v, want an 'interrupted after 0 actions' error", err)
	}
	if !strings.Contains(out.String(), "RESULT actions=0 errors=0") || !strings.Contains(out.String(), "cancelled by the interrupt") {
		t.Errorf("report after an interrupt:\n%s\nwant no failures and the cancelled actions", out.String())
	}
}

// blockingExecutor never finishes an action.
type blockingExecutor struct {
	repb.UnimplementedExecutionServer
	started chan struct{} // receives a value per Execute call, if not nil
}

func (b *blockingExecutor) Execute(_ *repb.ExecuteRequest, stream repb.Execution_ExecuteServer) error {
	select {
	case b.started <- struct{}{}:
	default:
	}
	<-stream.Context().Done()
	return stream.Context().Err()
}
