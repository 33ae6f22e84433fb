package execution

import (
	"context"
	"net"
	"sort"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	adminpb "github.com/gantry-build/gantry/api/admin/v1"
	workerpb "github.com/gantry-build/gantry/api/worker/v1"
	"github.com/gantry-build/gantry/internal/actioncache"
	"github.com/gantry-build/gantry/internal/blobstore"
	"github.com/gantry-build/gantry/internal/frontend"
	"github.com/gantry-build/gantry/internal/platform"
	"github.com/gantry-build/gantry/internal/scheduler"
)

// queueEnv is newEnv with provision queues and the admin service.
type queueEnv struct {
	*env
	admin adminpb.AdminClient
}

func newQueueEnv(t *testing.T, queues []platform.Queue) *queueEnv {
	t.Helper()
	cas := blobstore.NewMemory(0)
	ac := actioncache.NewMemory(0)
	fe := frontend.New(cas, ac, frontend.Options{CompletenessCheck: true, ExecEnabled: true})
	sched := scheduler.New(scheduler.Config{HeartbeatInterval: 50 * time.Millisecond, HeartbeatTimeout: 2 * time.Second, Queues: queues}, nil, ResultStore(fe.StoreActionResult))
	g := grpc.NewServer(frontend.ServerCodec())
	fe.Register(g)
	New(sched, cas, fe.LookupActionResult, Unobserved{}, nil).Register(g)
	ws := NewWorkerService(sched, Unobserved{})
	ws.MaxPollWait = 2 * time.Second
	ws.Attach(g)
	NewAdminService(sched, nil, InMemory{}, nil, nil).Attach(g)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go g.Serve(lis)
	ctx, cancel := context.WithCancel(context.Background())
	go sched.Run(ctx, 20*time.Millisecond)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(); cancel(); g.Stop() })
	return &queueEnv{
		env: &env{t: t, cas: cas, ac: ac, sched: sched, conn: conn,
			exec: repb.NewExecutionClient(conn), ops: longrunningpb.NewOperationsClient(conn), wk: workerpb.NewWorkersClient(conn)},
		admin: adminpb.NewAdminClient(conn),
	}
}

func issueQueues() []platform.Queue {
	cpu := platform.Queue{Name: "cpu", AllowUnmatched: true, Properties: platform.Properties{{Name: "max-cores", Value: "*"}, {Name: "min-cores", Value: "*"}}}
	gpu := platform.Queue{Name: "gpu", AllowUnmatched: true, Properties: platform.Properties{{Name: "gpu", Value: "1"}}}
	return []platform.Queue{cpu, gpu}
}

// platformOf builds a sorted REAPI platform from name=value strings.
func platformOf(kv ...string) *repb.Platform {
	p := &repb.Platform{}
	for _, s := range kv {
		k, v, _ := strings.Cut(s, "=")
		p.Properties = append(p.Properties, &repb.Platform_Property{Name: k, Value: v})
	}
	sort.Slice(p.Properties, func(i, j int) bool {
		a, b := p.Properties[i], p.Properties[j]
		return a.Name < b.Name || (a.Name == b.Name && a.Value < b.Value)
	})
	return p
}

func cmdWithPlatform(kv ...string) *repb.Command {
	return &repb.Command{Arguments: []string{"/bin/true"}, Platform: platformOf(kv...)}
}

func TestExecuteWithNoEligibleQueueIsFailedPrecondition(t *testing.T) {
	e := newQueueEnv(t, issueQueues())
	ad := e.action(emptyRoot(), cmdWithPlatform("OSFamily=linux", "gpu=2"))
	ops, err := e.execute(context.Background(), &repb.ExecuteRequest{ActionDigest: ad.Proto()})
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("Execute = %v (ops %v), want FAILED_PRECONDITION", err, ops)
	}
	st := status.Convert(err)
	for _, w := range []string{"no provision queue accepts", "gpu=2", `queue "cpu": missing property`, `queue "gpu": value mismatch gpu`, "gantry queues explain"} {
		if !strings.Contains(st.Message(), w) {
			t.Errorf("message %q lacks %q", st.Message(), w)
		}
	}
	got := map[string]string{}
	for _, d := range st.Details() {
		pf, ok := d.(*errdetails.PreconditionFailure)
		if !ok {
			continue
		}
		for _, v := range pf.Violations {
			if v.Type != "PLATFORM" {
				t.Errorf("violation type %q, want PLATFORM", v.Type)
			}
			got[v.Subject] = v.Description
		}
	}
	want := map[string]string{
		"queue:cpu/max-cores": "missing property max-cores",
		"queue:cpu/min-cores": "missing property min-cores",
		"queue:gpu/gpu":       "value mismatch gpu (action: 2, offered: 1)",
	}
	if len(got) != len(want) {
		t.Fatalf("violations %v, want %v", got, want)
	}
	for subj, desc := range want {
		if !strings.HasPrefix(got[subj], desc) {
			t.Errorf("violation %s = %q, want prefix %q", subj, got[subj], desc)
		}
	}
	// Each description says what would make the queue eligible.
	if !strings.Contains(got["queue:gpu/gpu"], "use gpu=1") || !strings.Contains(got["queue:cpu/min-cores"], "add min-cores=") {
		t.Errorf("descriptions lack the fix: %v", got)
	}
	if st := e.sched.Stats(); st.Queued != 0 || st.Operations != 0 {
		t.Fatalf("refused action left state behind: %+v", st)
	}
}

func TestExecuteRejectsBadSpecialProperties(t *testing.T) {
	e := newQueueEnv(t, nil)
	for _, tc := range []struct {
		name  string
		props []string
		want  string
	}{
		{"min-cores zero", []string{"min-cores=0"}, "min-cores"},
		{"min-cores negative", []string{"min-cores=-1"}, "min-cores"},
		{"max-cores below min-cores", []string{"min-cores=4", "max-cores=2"}, "max-cores=2 is less than min-cores=4"},
		{"max-cores zero", []string{"max-cores=0"}, "max-cores"},
		{"min-mem not a number", []string{"min-mem=1G"}, "min-mem"},
		{"bad resource amount", []string{"resource:gpu=none"}, "resource:gpu"},
		{"two Worker pins", []string{"Worker=a", "Worker=b"}, "Worker"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ad := e.action(emptyRoot(), cmdWithPlatform(tc.props...))
			_, err := e.execute(context.Background(), &repb.ExecuteRequest{ActionDigest: ad.Proto()})
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Execute = %v, want INVALID_ARGUMENT naming %s", err, tc.want)
			}
		})
	}
	if st := e.sched.Stats(); st.Queued != 0 || st.Operations != 0 {
		t.Fatalf("invalid actions left state behind: %+v", st)
	}
}

// TestExecuteRoutesByQueue: an action whose Action.platform says gpu
// goes to the gpu worker that registered over the worker protocol, not
// to the cpu worker that polls first.
func TestExecuteRoutesByQueue(t *testing.T) {
	e := newQueueEnv(t, issueQueues())
	ctx := context.Background()
	register := func(req *workerpb.RegisterRequest) {
		t.Helper()
		if _, err := e.wk.Register(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	register(&workerpb.RegisterRequest{WorkerId: "cpu-1", Cores: 4, AcceptUnknownProperties: true, Queues: []string{"cpu"}})
	register(&workerpb.RegisterRequest{WorkerId: "gpu-1", Cores: 4, AcceptUnknownProperties: true, Queues: []string{"gpu"},
		Properties: []*workerpb.Property{{Name: "gpu", Value: "1"}}, Resources: map[string]int64{"gpu": 1}})
	// The Command says cpu; the Action's platform, which wins, says gpu.
	ad := e.action(emptyRoot(), cmdWithPlatform("max-cores=1", "min-cores=1"), func(a *repb.Action) {
		a.Platform = platformOf("gpu=1", "resource:gpu=1")
	})
	done := make(chan []*longrunningpb.Operation, 1)
	go func() {
		ops, err := e.execute(ctx, &repb.ExecuteRequest{ActionDigest: ad.Proto()})
		if err != nil {
			t.Error(err)
		}
		done <- ops
	}()
	for e.sched.Stats().Queued == 0 { // wait for the state, not a time
		time.Sleep(time.Millisecond)
	}
	resp, err := e.wk.Poll(ctx, &workerpb.PollRequest{WorkerId: "cpu-1", FreeCores: 4, WaitMs: 1})
	if err != nil || resp.Assignment != nil {
		t.Fatalf("cpu worker poll = %+v, %v; want nothing", resp, err)
	}
	resp, err = e.wk.Poll(ctx, &workerpb.PollRequest{WorkerId: "gpu-1", FreeCores: 4, WaitMs: 2000})
	if err != nil || resp.Assignment == nil || resp.Assignment.ActionDigest.Hash != ad.Hash {
		t.Fatalf("gpu worker poll = %+v, %v; want the action", resp, err)
	}
	w := &worker{e: e.env, id: "gpu-1"}
	if !w.complete(resp.Assignment, &repb.ActionResult{}, codes.OK, "") {
		t.Fatal("completion refused")
	}
	ops := <-done
	if r := responseOf(t, ops[len(ops)-1]); r.Status.GetCode() != 0 {
		t.Fatalf("response %+v", r)
	}
}

func TestAdminExplainPlatform(t *testing.T) {
	e := newQueueEnv(t, issueQueues())
	ctx := context.Background()
	for _, req := range []*workerpb.RegisterRequest{
		{WorkerId: "gpu-1", Cores: 4, AcceptUnknownProperties: true, Queues: []string{"gpu"},
			Properties: []*workerpb.Property{{Name: "gpu", Value: "1"}}, Resources: map[string]int64{"gpu": 1}},
		{WorkerId: "gpu-small", Cores: 1, AcceptUnknownProperties: true, Queues: []string{"gpu"},
			Properties: []*workerpb.Property{{Name: "gpu", Value: "1"}}, Resources: map[string]int64{"gpu": 1}},
		{WorkerId: "cpu-1", Cores: 4, Queues: []string{"cpu"}, Properties: []*workerpb.Property{{Name: "OSFamily", Value: "linux"}}},
	} {
		if _, err := e.wk.Register(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	explain := func(kv ...string) *adminpb.ExplainPlatformResponse {
		t.Helper()
		req := &adminpb.ExplainPlatformRequest{}
		for _, s := range kv {
			k, v, _ := strings.Cut(s, "=")
			req.Properties = append(req.Properties, &adminpb.Property{Name: k, Value: v})
		}
		resp, err := e.admin.ExplainPlatform(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}

	// Given out of order on purpose: the service sorts.
	resp := explain("resource:gpu=1", "min-cores=2", "gpu=1")
	if resp.Invalid != "" || len(resp.Queues) != 2 {
		t.Fatalf("response %v", resp)
	}
	cpu, gpu := resp.Queues[0], resp.Queues[1]
	if cpu.Queue != "cpu" || cpu.Eligible || cpu.Chosen || len(cpu.Reasons) != 1 || !strings.HasPrefix(cpu.Reasons[0], "missing property max-cores") {
		t.Errorf("cpu verdict %v", cpu)
	}
	if gpu.Queue != "gpu" || !gpu.Eligible || !gpu.Chosen || len(gpu.Reasons) != 0 {
		t.Errorf("gpu verdict %v", gpu)
	}
	if len(resp.Workers) != 3 {
		t.Fatalf("workers %v", resp.Workers)
	}
	if w := resp.Workers[0]; w.Worker != "gpu-1" || len(w.Reasons) != 0 {
		t.Errorf("closest worker %v, want gpu-1 able to run it", w)
	}
	if w := resp.Workers[1]; w.Worker != "gpu-small" || len(w.Reasons) != 1 || !strings.HasPrefix(w.Reasons[0], "insufficient capacity min-cores (action: 2, offered: 1)") {
		t.Errorf("second worker %v", w)
	}
	if w := resp.Workers[2]; w.Worker != "cpu-1" || !anyHasPrefix(w.Reasons, "queue not served queue (action: gpu, offered: cpu)") ||
		!anyHasPrefix(w.Reasons, "unmatched property gpu") || !anyHasPrefix(w.Reasons, "insufficient capacity resource:gpu") {
		t.Errorf("third worker %v", w)
	}

	// No queue: per-queue reasons, no worker analysis.
	resp = explain("gpu=2")
	if len(resp.Workers) != 0 || resp.Queues[0].Eligible || resp.Queues[1].Eligible || !anyHasPrefix(resp.Queues[1].Reasons, "value mismatch gpu") {
		t.Errorf("no-queue response %v", resp)
	}
	// Invalid properties are reported, with the queue analysis still given.
	resp = explain("gpu=1", "min-cores=x")
	if !strings.Contains(resp.Invalid, `min-cores="x"`) || len(resp.Queues) != 2 || len(resp.Workers) != 0 {
		t.Errorf("invalid response %v", resp)
	}
}

func anyHasPrefix(list []string, prefix string) bool {
	for _, s := range list {
		if strings.HasPrefix(s, prefix) {
			return true
		}
	}
	return false
}

// TestAdminExplainPlatformWithoutQueues: with none configured, the
// default queue takes everything.
func TestAdminExplainPlatformWithoutQueues(t *testing.T) {
	e := newQueueEnv(t, nil)
	resp, err := e.admin.ExplainPlatform(context.Background(), &adminpb.ExplainPlatformRequest{
		Properties: []*adminpb.Property{{Name: "anything", Value: "goes"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Queues) != 1 || resp.Queues[0].Queue != "default" || !resp.Queues[0].Chosen || len(resp.Workers) != 0 {
		t.Fatalf("response %v", resp)
	}
}
