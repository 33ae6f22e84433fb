package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	dto "github.com/prometheus/client_model/go"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	adminpb "github.com/gantry-build/gantry/api/admin/v1"
	"github.com/gantry-build/gantry/internal/blobstore"
	"github.com/gantry-build/gantry/internal/client"
	"github.com/gantry-build/gantry/internal/config"
	"github.com/gantry-build/gantry/internal/digest"
	"github.com/gantry-build/gantry/internal/statestore/pgtest"
)

// healthOf is the health status of service at conn.
func healthOf(t *testing.T, conn *grpc.ClientConn, service string) healthpb.HealthCheckResponse_ServingStatus {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: service})
	if err != nil {
		t.Fatalf("health of %q: %v", service, err)
	}
	return r.Status
}

// reflected lists the services reflection names at conn, and checks
// that it describes a symbol of the worker protocol.
func reflected(t *testing.T, conn *grpc.ClientConn) map[string]bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rc, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.CloseSend()
	if err := rc.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	resp, err := rc.Recv()
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for _, s := range resp.GetListServicesResponse().GetService() {
		listed[s.Name] = true
	}
	if err := rc.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_FileContainingSymbol{FileContainingSymbol: "gantry.worker.v1.Assignment"}}); err != nil {
		t.Fatal(err)
	}
	if resp, err = rc.Recv(); err != nil || len(resp.GetFileDescriptorResponse().GetFileDescriptorProto()) == 0 {
		t.Errorf("reflection has no descriptor for gantry.worker.v1.Assignment: %v %v", resp.GetErrorResponse(), err)
	}
	return listed
}

func mustDial(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := client.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// schedulerServices are the services a scheduler serves while it leads
// (and a frontend forwards).
var schedulerServices = []string{"build.bazel.remote.execution.v2.Execution", "google.longrunning.Operations", "gantry.worker.v1.Workers", "gantry.admin.v1.Admin"}

// TestClusterHealthAndReflection: both roles serve gRPC health and
// reflection. A scheduler reports its services SERVING while it leads
// and NOT_SERVING while it stands by (the whole process, "", is SERVING
// either way); a frontend reports its own services SERVING and the
// forwarded ones SERVING while a leader is published. Reflection on the
// frontend lists the forwarded services too.
func TestClusterHealthAndReflection(t *testing.T) {
	dsn := pgtest.Start(t)
	log := quietLogger()
	fe, err := newFrontendNode(clusterConfig(t, config.RoleFrontend, dsn), log)
	if err != nil {
		t.Fatal(err)
	}
	runNode(t, fe)
	feConn := mustDial(t, fe.GRPCAddr())
	const execution = "build.bazel.remote.execution.v2.Execution"
	for svc, want := range map[string]healthpb.HealthCheckResponse_ServingStatus{
		"": healthpb.HealthCheckResponse_SERVING,
		"build.bazel.remote.execution.v2.ContentAddressableStorage": healthpb.HealthCheckResponse_SERVING,
		"google.bytestream.ByteStream":                              healthpb.HealthCheckResponse_SERVING,
		execution:                                                   healthpb.HealthCheckResponse_NOT_SERVING,
		"gantry.worker.v1.Workers":                                  healthpb.HealthCheckResponse_NOT_SERVING,
	} {
		if got := healthOf(t, feConn, svc); got != want {
			t.Errorf("frontend without a leader: health of %q = %v, want %v", svc, got, want)
		}
	}

	newScheduler := func() (*Server, *runningNode) {
		cfg := clusterConfig(t, config.RoleScheduler, dsn)
		cfg.Cluster.CAS = fe.GRPCAddr()
		n, err := newSchedulerNode(cfg, log)
		if err != nil {
			t.Fatal(err)
		}
		return n, runNode(t, n)
	}
	a, ra := newScheduler()
	clusterWaitFor(t, "the first scheduler to lead", a.Leading)
	b, _ := newScheduler()
	aConn, bConn := mustDial(t, a.GRPCAddr()), mustDial(t, b.GRPCAddr())
	for _, svc := range schedulerServices {
		if got := healthOf(t, aConn, svc); got != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("leader: health of %s = %v, want SERVING", svc, got)
		}
		if got := healthOf(t, bConn, svc); got != healthpb.HealthCheckResponse_NOT_SERVING {
			t.Errorf("standby: health of %s = %v, want NOT_SERVING", svc, got)
		}
	}
	for _, c := range []*grpc.ClientConn{aConn, bConn} {
		if got := healthOf(t, c, ""); got != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("scheduler process health = %v, want SERVING on leader and standby", got)
		}
	}
	ctx := ctxT(t)
	if err := executeErr(ctx, bConn, "", emptyDigest); status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "stands by") {
		t.Errorf("Execute at the standby: %v, want UNAVAILABLE saying it stands by", err)
	}
	clusterWaitFor(t, "the frontend to report the forwarded services SERVING", func() bool {
		return healthOf(t, feConn, execution) == healthpb.HealthCheckResponse_SERVING
	})
	for _, svc := range schedulerServices {
		if got := healthOf(t, feConn, svc); got != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("frontend with a leader: health of %s = %v, want SERVING", svc, got)
		}
	}

	listed := reflected(t, feConn)
	for _, want := range append([]string{"build.bazel.remote.execution.v2.ContentAddressableStorage", "google.bytestream.ByteStream", "grpc.health.v1.Health"}, schedulerServices...) {
		if !listed[want] {
			t.Errorf("reflection on the frontend does not list %s (lists %v)", want, listed)
		}
	}
	listed = reflected(t, bConn)
	for _, want := range append([]string{"grpc.health.v1.Health"}, schedulerServices...) {
		if !listed[want] {
			t.Errorf("reflection on the standby does not list %s (lists %v)", want, listed)
		}
	}
	// A scheduler serves ByteStream for the live output it holds only.
	if !listed["google.bytestream.ByteStream"] || !listed["build.bazel.remote.logstream.v1.LogStreamService"] {
		t.Errorf("reflection on a scheduler does not list ByteStream and LogStreamService, for live output (lists %v)", listed)
	}

	// The leader stops: the standby takes over and reports SERVING.
	ra.stop()
	<-ra.done
	clusterWaitFor(t, "the standby to lead", b.Leading)
	for _, svc := range schedulerServices {
		if got := healthOf(t, bConn, svc); got != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("new leader: health of %s = %v, want SERVING", svc, got)
		}
	}
}

// httpCluster starts a frontend node with an HTTP port on the PostgreSQL
// at dsn; newScheduler starts a scheduler node with one too, built with
// opts.
func httpCluster(t *testing.T, dsn string) (*Server, func(opts ...Option) (*Server, *runningNode)) {
	log := quietLogger()
	fcfg := clusterConfig(t, config.RoleFrontend, dsn)
	fcfg.HTTPListen = "127.0.0.1:0"
	fe, err := newFrontendNode(fcfg, log)
	if err != nil {
		t.Fatal(err)
	}
	runNode(t, fe)
	return fe, func(opts ...Option) (*Server, *runningNode) {
		cfg := clusterConfig(t, config.RoleScheduler, dsn)
		cfg.HTTPListen = "127.0.0.1:0"
		cfg.Cluster.CAS = fe.GRPCAddr()
		n, err := newSchedulerNode(cfg, log, opts...)
		if err != nil {
			t.Fatal(err)
		}
		return n, runNode(t, n)
	}
}

// TestClusterMetrics: after a known scenario each role's /metrics holds
// the metrics that belong to it. The frontend counts the outcomes its
// callers see, the action cache lookups (Execute's, made by the
// scheduler, apart from clients') and the CAS bytes of clients and
// workers (not the scheduler's reads); the leader the queue, dispatch,
// queue time and worker stages; a standby zeros.
func TestClusterMetrics(t *testing.T) {
	dsn := pgtest.Start(t)
	log := quietLogger()
	fe, newScheduler := httpCluster(t, dsn)
	leader, _ := newScheduler()
	clusterWaitFor(t, "the scheduler to lead", leader.Leading)
	standby, _ := newScheduler()
	feHTTP, scHTTP := fe.HTTPAddr(), leader.HTTPAddr()

	conn := mustDial(t, fe.GRPCAddr())
	ctx := ctxT(t)
	cas := client.NewCAS(conn, "", digest.SHA256, 0)
	put := func(b []byte) digest.Digest {
		d := digest.Compute(digest.SHA256, b)
		if err := blobstore.Put(ctx, cas, d, b); err != nil {
			t.Fatal(err)
		}
		return d
	}
	// A client's upload is counted exactly.
	big := bytes.Repeat([]byte("cluster!"), 1<<17)
	before := scrape(t, feHTTP)
	put(big)
	if got := sample(scrape(t, feHTTP), "gantry_cas_received_bytes_total") - sample(before, "gantry_cas_received_bytes_total"); got != float64(len(big)) {
		t.Errorf("frontend: CAS received %g bytes for a %d-byte upload", got, len(big))
	}
	cmd, _ := proto.Marshal(shCmd("echo metered > out", "out"))
	act, _ := proto.Marshal(&repb.Action{CommandDigest: put(cmd).Proto(), InputRootDigest: digest.Empty(digest.SHA256).Proto()})
	ad := put(act)

	// Without a worker the action queues. The leader read it from the
	// frontend's CAS, which does not count that as client traffic.
	snap := scrape(t, feHTTP)
	done := make(chan *repb.ExecuteResponse, 1)
	go func() {
		resp, _, err := client.Execute(ctx, conn, &repb.ExecuteRequest{ActionDigest: ad.Proto(), InstanceName: "tenant"})
		if err != nil {
			t.Errorf("Execute: %v", err)
		}
		done <- resp
	}()
	obsWaitFor(t, "the action in the leader's queue", func() bool {
		return sample(scrape(t, scHTTP), "gantry_queue_length", "queue", "default", "instance", "tenant") == 1
	})
	m := scrape(t, feHTTP)
	for _, name := range []string{"gantry_cas_sent_bytes_total", "gantry_cas_received_bytes_total"} {
		if d := sample(m, name) - sample(snap, name); d != 0 {
			t.Errorf("frontend: %s rose by %g for the scheduler's own reads", name, d)
		}
	}
	if got := sample(m, "gantry_action_cache_lookups_total", "source", "execute", "result", "miss"); got != 1 {
		t.Errorf("frontend: Execute's cache misses = %g, want 1", got)
	}
	if got := sample(m, "gantry_action_cache_lookups_total", "source", "get_action_result"); got != 0 {
		t.Errorf("frontend: clients' GetActionResult lookups = %g, want 0 (the scheduler's lookup counted as a client's)", got)
	}

	// A worker runs it.
	wcfg := clusterConfig(t, config.RoleFrontend, dsn)
	wcfg.Worker.Cores, wcfg.Worker.ID = 1, "w1"
	wctx, stopWorker := context.WithCancel(context.Background())
	workerDone := make(chan struct{})
	go func() { runWorker(wctx, plainDial(fe.GRPCAddr()), nil, wcfg, log, nil); close(workerDone) }()
	defer func() { stopWorker(); <-workerDone }()
	var resp *repb.ExecuteResponse
	select {
	case resp = <-done:
	case <-ctx.Done():
		t.Fatal("the action did not finish")
	}
	if err := client.CheckResponse(resp); err != nil {
		t.Fatal(err)
	}
	obsWaitFor(t, "the worker's stage durations at the leader", func() bool {
		return sample(scrape(t, scHTTP), "gantry_worker_stage_duration_seconds", "stage", "worker") == 1
	})
	// The same action again: a cache hit.
	if hit, _, err := client.Execute(ctx, conn, &repb.ExecuteRequest{ActionDigest: ad.Proto(), InstanceName: "tenant"}); err != nil || !hit.CachedResult {
		t.Fatalf("the repeated action: %v %v, want a cache hit", hit, err)
	}
	if _, err := repb.NewActionCacheClient(conn).GetActionResult(ctx, &repb.GetActionResultRequest{InstanceName: "tenant", ActionDigest: ad.Proto()}); err != nil {
		t.Fatal(err)
	}

	sm, fm, bm := scrape(t, scHTTP), scrape(t, feHTTP), scrape(t, standby.HTTPAddr())
	byRole := map[string]map[string]*dto.MetricFamily{"frontend": fm, "leader": sm, "standby": bm}
	for _, c := range []struct {
		role   string
		name   string
		labels []string
		want   float64
	}{
		{"frontend", "gantry_operations_total", []string{"result", "success", "code", "OK"}, 1},
		{"frontend", "gantry_operations_total", []string{"result", "cache_hit", "code", "OK"}, 1},
		{"frontend", "gantry_operations_total", []string{"result", "error"}, 0},
		{"frontend", "gantry_action_cache_lookups_total", []string{"source", "execute", "result", "miss"}, 1},
		{"frontend", "gantry_action_cache_lookups_total", []string{"source", "execute", "result", "hit"}, 1},
		{"frontend", "gantry_action_cache_lookups_total", []string{"source", "get_action_result", "result", "hit"}, 1},
		{"leader", "gantry_scheduler_leader", nil, 1},
		{"leader", "gantry_queue_length", []string{"instance", "tenant"}, 0},
		{"leader", "gantry_executing_actions", nil, 0},
		{"leader", "gantry_scheduler_dispatch_latency_seconds", nil, 1},
		{"leader", "gantry_operation_queue_time_seconds", nil, 1},
		{"leader", "gantry_worker_stage_duration_seconds", []string{"stage", "execute"}, 1},
		{"leader", "gantry_workers", []string{"state", "idle"}, 1},
		{"leader", "gantry_worker_cores", nil, 1},
		{"leader", "gantry_scheduler_retries_total", nil, 0},
		{"leader", "gantry_scheduler_preemptions_total", nil, 0},
		{"leader", "gantry_grpc_requests_total", []string{"method", "/build.bazel.remote.execution.v2.Execution/Execute", "code", "OK"}, 2},
		{"standby", "gantry_scheduler_leader", nil, 0},
		{"standby", "gantry_workers", nil, 0},
		{"standby", "gantry_scheduler_operations", nil, 0},
	} {
		if got := sample(byRole[c.role], c.name, c.labels...); got != c.want {
			t.Errorf("%s: %s%v = %g, want %g", c.role, c.name, c.labels, got, c.want)
		}
	}
	if _, ok := sm["gantry_queue_length"]; !ok {
		t.Error("the leader exports no gantry_queue_length")
	}
	// Each metric where its source is.
	for _, name := range []string{"gantry_operations_total", "gantry_action_cache_lookups_total", "gantry_cas_sent_bytes_total", "gantry_cas_blobs"} {
		if _, ok := sm[name]; ok {
			t.Errorf("the scheduler exports %s, which belongs to the frontend", name)
		}
		if _, ok := fm[name]; !ok {
			t.Errorf("the frontend does not export %s", name)
		}
	}
	for _, name := range []string{"gantry_queue_length", "gantry_scheduler_dispatch_latency_seconds", "gantry_operation_queue_time_seconds", "gantry_workers"} {
		if _, ok := fm[name]; ok {
			t.Errorf("the frontend exports %s, which belongs to the scheduler", name)
		}
	}
}

// traceReceiver is an OTLP/gRPC trace collector that keeps the names of
// the spans it receives, with their service.name.
type traceReceiver struct {
	coltracepb.UnimplementedTraceServiceServer
	mu    sync.Mutex
	spans map[string]string
}

func (r *traceReceiver) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range req.ResourceSpans {
		service := ""
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.GetKey() == "service.name" {
				service = kv.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.ScopeSpans {
			for _, sp := range ss.Spans {
				r.spans[sp.Name] = service
			}
		}
	}
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

func (r *traceReceiver) received() map[string]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]string{}
	for k, v := range r.spans {
		out[k] = v
	}
	return out
}

// TestClusterTracing: a scheduler node with tracing.otlp_endpoint
// exports its spans (Execute, scheduler.Submit, scheduler.Lease) to the
// collector, with the configured service name.
func TestClusterTracing(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	recv := &traceReceiver{spans: map[string]string{}}
	g := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(g, recv)
	go g.Serve(lis)
	defer g.Stop()

	dsn := pgtest.Start(t)
	log := quietLogger()
	fe, err := newFrontendNode(clusterConfig(t, config.RoleFrontend, dsn), log)
	if err != nil {
		t.Fatal(err)
	}
	runNode(t, fe)
	scfg := clusterConfig(t, config.RoleScheduler, dsn)
	scfg.Cluster.CAS = fe.GRPCAddr()
	scfg.Tracing = config.TracingConfig{OTLPEndpoint: lis.Addr().String(), Insecure: true, ServiceName: "gantry-scheduler"}
	s, err := newSchedulerNode(scfg, log)
	if err != nil {
		t.Fatal(err)
	}
	rs := runNode(t, s)
	clusterWaitFor(t, "the scheduler to lead", s.Leading)

	wcfg := clusterConfig(t, config.RoleFrontend, dsn)
	wcfg.Worker.Cores, wcfg.Worker.ID = 1, "w1"
	wctx, stopWorker := context.WithCancel(context.Background())
	workerDone := make(chan struct{})
	go func() { runWorker(wctx, plainDial(fe.GRPCAddr()), nil, wcfg, log, nil); close(workerDone) }()
	defer func() { stopWorker(); <-workerDone }()

	conn := mustDial(t, fe.GRPCAddr())
	ctx := ctxT(t)
	cas := client.NewCAS(conn, "", digest.SHA256, 0)
	put := func(m proto.Message) digest.Digest { return putMsg(ctx, t, cas, m) }
	ad := put(&repb.Action{CommandDigest: put(shCmd("echo traced")).Proto(), InputRootDigest: digest.Empty(digest.SHA256).Proto()})
	resp, _, err := client.Execute(ctx, conn, &repb.ExecuteRequest{ActionDigest: ad.Proto()})
	if err != nil || client.CheckResponse(resp) != nil {
		t.Fatalf("Execute: %v %v", resp, err)
	}
	// Stopping the node flushes its spans.
	rs.stop()
	<-rs.done
	got := recv.received()
	for _, name := range []string{"Execute", "scheduler.Submit", "scheduler.Lease"} {
		if got[name] != "gantry-scheduler" {
			t.Errorf("span %s: service %q, want gantry-scheduler (received %v)", name, got[name], got)
		}
	}
}

// httpGet fetches url (following redirects) and returns the status code
// and body.
func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return resp.StatusCode, string(b)
}

// The leading scheduler serves the status pages (and both roles pprof) on
// their HTTP ports, as role all does; a standby says where to look
// instead, and serves them once it leads.
func TestClusterStatusPages(t *testing.T) {
	dsn := pgtest.Start(t)
	fe, newScheduler := httpCluster(t, dsn)
	// The file the leader's ReloadConfig re-reads: not a valid config.
	configFile := filepath.Join(t.TempDir(), "gantry.yaml")
	if err := os.WriteFile(configFile, []byte("no_such_key: 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	withConfigFile := WithConfigFile(configFile)
	leader, runLeader := newScheduler(withConfigFile)
	clusterWaitFor(t, "the scheduler to lead", leader.Leading)
	standby, _ := newScheduler(withConfigFile)

	// One action, queued (no worker), in instance "tenant".
	conn := mustDial(t, fe.GRPCAddr())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cas := client.NewCAS(conn, "", digest.SHA256, 0)
	cmd := putMsg(ctx, t, cas, shCmd("echo paged > out", "out"))
	ad := putMsg(ctx, t, cas, &repb.Action{CommandDigest: cmd.Proto(), InputRootDigest: digest.Empty(digest.SHA256).Proto()})
	executed := make(chan struct{})
	go func() {
		defer close(executed)
		client.Execute(ctx, conn, &repb.ExecuteRequest{ActionDigest: ad.Proto(), InstanceName: "tenant"}) // ends with the test
	}()
	defer func() { cancel(); <-executed }()

	// queued reads how many actions the invocations JSON of the node at
	// addr shows queued (-1: no JSON).
	queued := func(addr string) int {
		code, body := httpGet(t, "http://"+addr+"/status/invocations?format=json")
		var inv struct {
			Invocations []invocationJSON `json:"invocations"`
		}
		if code != http.StatusOK || json.Unmarshal([]byte(body), &inv) != nil {
			return -1
		}
		n := 0
		for _, i := range inv.Invocations {
			n += i.SelfQueued
		}
		return n
	}
	obsWaitFor(t, "the action on the leader's invocations page", func() bool { return queued(leader.HTTPAddr()) == 1 })
	code, body := httpGet(t, "http://"+leader.HTTPAddr()+"/")
	if code != http.StatusOK || !strings.Contains(body, "1 queued") || !strings.Contains(body, "<td>tenant</td>") {
		t.Errorf("the leader's status page (%d) does not show the queued action of tenant:\n%s", code, body)
	}
	if code, body := httpGet(t, "http://"+leader.HTTPAddr()+"/status/invocations"); code != http.StatusOK || strings.Contains(body, "<html") {
		t.Errorf("the leader's /status/invocations as text: %d\n%s", code, body)
	}
	code, body = httpGet(t, "http://"+standby.HTTPAddr()+"/status")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "leading scheduler") {
		t.Errorf("a standby's status page: %d %q, want 503 naming the leading scheduler", code, body)
	}
	for _, n := range []struct{ role, addr string }{{"frontend", fe.HTTPAddr()}, {"leader", leader.HTTPAddr()}, {"standby", standby.HTTPAddr()}} {
		if code, body := httpGet(t, "http://"+n.addr+"/debug/pprof/"); code != http.StatusOK || !strings.Contains(body, "goroutine") {
			t.Errorf("%s: /debug/pprof/ = %d", n.role, code)
		}
	}
	// Reload (the status page's button, here through the frontend's
	// Admin) re-reads the leader's config file.
	if _, err := adminpb.NewAdminClient(conn).ReloadConfig(ctx, &adminpb.ReloadConfigRequest{}); err == nil || !strings.Contains(err.Error(), "no_such_key") {
		t.Errorf("ReloadConfig on the leader = %v, want the error of its config file (no_such_key)", err)
	}
	if code, _ := httpGet(t, "http://"+fe.HTTPAddr()+"/status"); code != http.StatusNotFound {
		t.Errorf("a frontend's /status = %d, want 404 (the status pages are the leader's)", code)
	}
	// A valid file: the leader applies its provision queues at once, and
	// a standby that re-read it (SIGHUP) has them when it takes over.
	valid := fmt.Sprintf("scheduler:\n  store: {backend: postgres, dsn: %q}\n  queues: [{name: big, properties: {pool: [big]}}, {name: rest, allow_unmatched: true}]\ncluster:\n  cas: %q\n", dsn, fe.GRPCAddr())
	if err := os.WriteFile(configFile, []byte(valid), 0o644); err != nil {
		t.Fatal(err)
	}
	admin := adminpb.NewAdminClient(conn)
	if _, err := admin.ReloadConfig(ctx, &adminpb.ReloadConfigRequest{}); err != nil {
		t.Fatalf("ReloadConfig of a valid file on the leader: %v", err)
	}
	chosen := func() string {
		ex, err := admin.ExplainPlatform(ctx, &adminpb.ExplainPlatformRequest{Properties: []*adminpb.Property{{Name: "pool", Value: "big"}}})
		if err != nil {
			return err.Error()
		}
		for _, q := range ex.Queues {
			if q.Chosen {
				return q.Queue
			}
		}
		return "none"
	}
	if q := chosen(); q != "big" {
		t.Errorf("after the leader's reload, pool=big goes to queue %q, want big", q)
	}
	reloaded, err := config.Load(configFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := standby.Reload(reloaded); err != nil {
		t.Fatalf("SIGHUP on the standby: %v", err)
	}

	// The standby takes over: its pages show the restored queue, and the
	// old leader's are gone with its process.
	runLeader.stop()
	<-runLeader.done
	clusterWaitFor(t, "the standby to lead", standby.Leading)
	obsWaitFor(t, "the action on the new leader's invocations page", func() bool { return queued(standby.HTTPAddr()) == 1 })
	if q := chosen(); q != "big" {
		t.Errorf("on the new leader (reloaded while standing by), pool=big goes to queue %q, want big", q)
	}
}
