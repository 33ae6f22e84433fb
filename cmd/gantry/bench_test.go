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
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
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
)

func ms2d(ms ...int) []time.Duration {
	out := make([]time.Duration, len(ms))
	for i, m := range ms {
		out[i] = time.Duration(m) * time.Millisecond
	}
	return out
}

func TestPercentile(t *testing.T) {
	oneToHundred := make([]int, 100)
	for i := range oneToHundred {
		oneToHundred[i] = i + 1
	}
	tests := []struct {
		name   string
		sorted []time.Duration
		p      float64
		want   time.Duration
	}{
		{"empty", nil, 50, 0},
		{"single p50", ms2d(7), 50, 7 * time.Millisecond},
		{"single p99", ms2d(7), 99, 7 * time.Millisecond},
		{"two p50 is the lower", ms2d(1, 2), 50, 1 * time.Millisecond},
		{"two p51 is the upper", ms2d(1, 2), 51, 2 * time.Millisecond},
		{"hundred p50", ms2d(oneToHundred...), 50, 50 * time.Millisecond},
		{"hundred p90", ms2d(oneToHundred...), 90, 90 * time.Millisecond},
		{"hundred p99", ms2d(oneToHundred...), 99, 99 * time.Millisecond},
		{"hundred p100", ms2d(oneToHundred...), 100, 100 * time.Millisecond},
		{"ten p99 is the max", ms2d(1, 2, 3, 4, 5, 6, 7, 8, 9, 10), 99, 10 * time.Millisecond},
		{"ten p90", ms2d(1, 2, 3, 4, 5, 6, 7, 8, 9, 10), 90, 9 * time.Millisecond},
		{"tiny p is the min", ms2d(3, 4, 5), 0.1, 3 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := percentile(tt.sorted, tt.p); got != tt.want {
				t.Errorf("percentile(%v, %v) = %v, want %v", tt.sorted, tt.p, got, tt.want)
			}
		})
	}
}

func TestSummarize(t *testing.T) {
	tests := []struct {
		name string
		in   []time.Duration
		want latencySummary
	}{
		{"none", nil, latencySummary{}},
		{"one", ms2d(4), latencySummary{n: 1, min: 4e6, mean: 4e6, p50: 4e6, p90: 4e6, p99: 4e6, max: 4e6}},
		{"unsorted", ms2d(30, 10, 20, 40), latencySummary{n: 4, min: 10e6, mean: 25e6, p50: 20e6, p90: 40e6, p99: 40e6, max: 40e6}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := append([]time.Duration(nil), tt.in...)
			if got := summarize(in); got != tt.want {
				t.Errorf("summarize(%v) = %+v, want %+v", tt.in, got, tt.want)
			}
			if fmt.Sprint(in) != fmt.Sprint(tt.in) {
				t.Errorf("summarize reordered its input to %v", in)
			}
		})
	}
}

func TestResultLine(t *testing.T) {
	s := &benchStats{ok: 200, failed: 3, cached: 1, concurrency: 8, elapsed: 4 * time.Second,
		latency: summarize(ms2d(1, 2, 3, 4))}
	want := "RESULT actions=200 errors=3 cached=1 concurrency=8 elapsed_s=4.000 rate=50.00 min_ms=1.000 mean_ms=2.500 p50_ms=2.000 p90_ms=4.000 p99_ms=4.000 max_ms=4.000"
	if got := s.resultLine(); got != want {
		t.Errorf("resultLine =\n%s\nwant\n%s", got, want)
	}
	if got := (&benchStats{}).rate(); got != 0 {
		t.Errorf("rate with no elapsed time = %v, want 0", got)
	}
}

// parseFlags runs "bench args..." with a runner that only captures the plan.
func parseFlags(t *testing.T, args ...string) (*benchPlan, error) {
	t.Helper()
	var plan *benchPlan
	cmd := newBenchCommandWith(func(_ context.Context, p *benchPlan, _, _ io.Writer) error {
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
		check   func(*benchPlan) string
	}{
		{name: "defaults", check: func(p *benchPlan) string {
			if p.server != serverFromEnv() || p.instance != "" || p.concurrency != 8 || p.actions != 1000 || p.duration != 0 ||
				!p.outputFile || p.platform != nil || p.skipCacheLookup || p.noopWorkers != 0 {
				return fmt.Sprintf("%+v", *p)
			}
			return ""
		}},
		{name: "everything", args: []string{"--server", "bb:8980", "--instance", "a/b", "--concurrency", "3", "--actions", "5",
			"--output-file=false", "--skip-cache-lookup", "--noop-workers", "2"}, check: func(p *benchPlan) string {
			if p.server != "bb:8980" || p.instance != "a/b" || p.concurrency != 3 || p.actions != 5 || p.outputFile || !p.skipCacheLookup || p.noopWorkers != 2 {
				return fmt.Sprintf("%+v", *p)
			}
			return ""
		}},
		{name: "duration", args: []string{"--duration", "90s"}, check: func(p *benchPlan) string {
			if p.duration != 90*time.Second || p.actions != 0 {
				return fmt.Sprintf("duration %s, actions %d; want 90s and no count", p.duration, p.actions)
			}
			return ""
		}},
		{name: "platform sorted", args: []string{"--platform", "b=2", "--platform", "a=x=y", "--platform", "b=1", "--platform", "c="},
			check: func(p *benchPlan) string {
				var got []string
				for _, pp := range p.platform.GetProperties() {
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

func TestBuildAction(t *testing.T) {
	plat, err := parsePlatform([]string{"OSFamily=linux"})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		plan      benchPlan
		wantArgs  string
		wantFiles []string
	}{
		{"output file", benchPlan{outputFile: true, platform: plat}, "/bin/sh -c echo ID > out", []string{"out"}},
		{"no outputs", benchPlan{}, "true", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd, action := buildAction(&tt.plan, "ID")
			if got := strings.Join(cmd.Arguments, " "); got != tt.wantArgs {
				t.Errorf("arguments %q, want %q", got, tt.wantArgs)
			}
			if fmt.Sprint(cmd.OutputFiles) != fmt.Sprint(tt.wantFiles) {
				t.Errorf("output files %v, want %v", cmd.OutputFiles, tt.wantFiles)
			}
			// A server of REAPI 2.1 or later reads only output_paths.
			if fmt.Sprint(cmd.OutputPaths) != fmt.Sprint(tt.wantFiles) {
				t.Errorf("output paths %v, want %v", cmd.OutputPaths, tt.wantFiles)
			}
			env := cmd.EnvironmentVariables
			if len(env) == 0 || env[0].Name != benchIDVar || env[0].Value != "ID" {
				t.Errorf("environment %v does not start with %s=ID", env, benchIDVar)
			}
			for i := 1; i < len(env); i++ {
				if env[i-1].Name >= env[i].Name {
					t.Errorf("environment %v is not sorted by name", env)
				}
			}
			if !proto.Equal(cmd.Platform, tt.plan.platform) || !proto.Equal(action.Platform, tt.plan.platform) {
				t.Errorf("platforms %v (command), %v (action), want %v on both", cmd.Platform, action.Platform, tt.plan.platform)
			}
			if !proto.Equal(action.InputRootDigest, digest.Empty(digest.SHA256).Proto()) {
				t.Errorf("input root %v, want the empty directory", action.InputRootDigest)
			}
			// Different ids make different commands, hence different actions.
			other, _ := buildAction(&tt.plan, "ID2")
			if proto.Equal(cmd, other) {
				t.Error("two actions with different ids have the same command")
			}
		})
	}
}

func TestCheckBenchResponse(t *testing.T) {
	good := digest.Compute(digest.SHA256, []byte("ID\n")).Proto()
	empty := digest.Empty(digest.SHA256).Proto()
	withOut := func(d *repb.Digest) *repb.ExecuteResponse {
		return &repb.ExecuteResponse{Result: &repb.ActionResult{OutputFiles: []*repb.OutputFile{{Path: "other", Digest: empty}, {Path: "out", Digest: d}}}}
	}
	tests := []struct {
		name       string
		resp       *repb.ExecuteResponse
		outputFile bool
		noop       bool
		wantErr    string
	}{
		{"good output", withOut(good), true, false, ""},
		{"no outputs wanted", &repb.ExecuteResponse{Result: &repb.ActionResult{}}, false, false, ""},
		{"empty output from a no-op worker", withOut(empty), true, true, ""},
		{"empty output from a real worker", withOut(empty), true, false, "the server returned the wrong output"},
		{"wrong output", withOut(digest.Compute(digest.SHA256, []byte("x")).Proto()), true, true, "wrong output"},
		{"missing output", &repb.ExecuteResponse{Result: &repb.ActionResult{}}, true, false, `no output file "out"`},
		{"exit code", &repb.ExecuteResponse{Result: &repb.ActionResult{ExitCode: 3}}, false, false, "exited with code 3"},
		{"status", &repb.ExecuteResponse{Status: &rpcstatus.Status{Code: int32(codes.Internal), Message: "worker lost"}}, false, false, "worker lost"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := checkBenchResponse(tt.resp, tt.outputFile, "ID", tt.noop)
			if tt.wantErr == "" && err != nil {
				t.Errorf("checkBenchResponse = %v, want nil", err)
			}
			if tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Errorf("checkBenchResponse = %v, want an error containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestRunLoad(t *testing.T) {
	t.Run("count", func(t *testing.T) {
		var mu sync.Mutex
		seen := map[int]int{}
		run := func(_ context.Context, i int) (time.Duration, bool, error) {
			mu.Lock()
			seen[i]++
			mu.Unlock()
			switch {
			case i%10 == 3:
				return 0, false, fmt.Errorf("action %d broke", i)
			case i%10 == 5:
				return time.Duration(i), true, nil
			}
			return time.Duration(i), false, nil
		}
		var errOut bytes.Buffer
		s := runLoad(context.Background(), &benchPlan{concurrency: 7, actions: 100}, run, progress{}, &errOut)
		if len(seen) != 100 {
			t.Errorf("ran %d distinct actions, want 100", len(seen))
		}
		for i, n := range seen {
			if i < 0 || i >= 100 || n != 1 {
				t.Errorf("action %d ran %d times", i, n)
			}
		}
		if s.ok != 90 || s.failed != 10 || s.cached != 10 || s.cancelled != 0 || s.concurrency != 7 {
			t.Errorf("stats ok %d failed %d cached %d cancelled %d concurrency %d; want 90, 10, 10, 0, 7", s.ok, s.failed, s.cached, s.cancelled, s.concurrency)
		}
		if s.firstErr == nil || !strings.Contains(errOut.String(), "first failure: "+s.firstErr.Error()) {
			t.Errorf("first error %v, stderr %q; want it reported once", s.firstErr, errOut.String())
		}
		if s.latency.n != 90 || s.latency.max != 99 {
			t.Errorf("latency summary %+v, want 90 values up to 99", s.latency)
		}
	})
	t.Run("duration", func(t *testing.T) {
		var n atomic.Int64
		run := func(context.Context, int) (time.Duration, bool, error) {
			n.Add(1)
			time.Sleep(time.Millisecond)
			return time.Millisecond, false, nil
		}
		s := runLoad(context.Background(), &benchPlan{concurrency: 2, duration: 20 * time.Millisecond}, run, progress{}, io.Discard)
		if s.ok == 0 || int64(s.ok) != n.Load() {
			t.Errorf("ok %d of %d run; want all of at least one", s.ok, n.Load())
		}
	})
	t.Run("stalled", func(t *testing.T) {
		// The one action completes only after a progress line asked
		// why nothing has (or, if none does, after a while).
		asked := make(chan struct{})
		var once sync.Once
		prog := progress{every: time.Millisecond, stalled: func(context.Context) string {
			once.Do(func() { close(asked) })
			return "NOTE"
		}}
		run := func(context.Context, int) (time.Duration, bool, error) {
			select {
			case <-asked:
			case <-time.After(10 * time.Second): // the test fails below
			}
			return time.Millisecond, false, nil
		}
		var errOut lockedBuffer
		s := runLoad(context.Background(), &benchPlan{concurrency: 1, actions: 1}, run, prog, &errOut)
		if s.ok != 1 || !strings.Contains(errOut.String(), "0 ok, 0 failed, 1 in flight (NOTE)") {
			t.Errorf("ok %d, stderr %q; want the stalled note on the progress line", s.ok, errOut.String())
		}
	})
	t.Run("interrupted", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		var n atomic.Int64
		run := func(ctx context.Context, i int) (time.Duration, bool, error) {
			if n.Add(1) == 5 {
				cancel()
			}
			if ctx.Err() != nil {
				return 0, false, ctx.Err()
			}
			return time.Millisecond, false, nil
		}
		s := runLoad(ctx, &benchPlan{concurrency: 1, actions: 100}, run, progress{}, io.Discard)
		if s.ok != 4 || s.failed != 0 || s.cancelled != 1 {
			t.Errorf("ok %d failed %d cancelled %d; want 4, 0, 1 (the interrupted action is not a failure)", s.ok, s.failed, s.cancelled)
		}
	})
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
