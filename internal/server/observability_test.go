package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
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
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	adminpb "github.com/gantry-build/gantry/api/admin/v1"
	workerpb "github.com/gantry-build/gantry/api/worker/v1"
	"github.com/gantry-build/gantry/internal/blobstore"
	"github.com/gantry-build/gantry/internal/client"
	"github.com/gantry-build/gantry/internal/config"
	"github.com/gantry-build/gantry/internal/digest"
	"github.com/gantry-build/gantry/internal/protocol"
	"github.com/gantry-build/gantry/internal/testutil"
	"github.com/gantry-build/gantry/internal/tracing"
)

// scrape reads /metrics over HTTP and parses it.
func scrape(t *testing.T, addr string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parsing /metrics: %v", err)
	}
	return fams
}

// sample returns the value of the series of family name whose labels
// include want (counter, gauge, or a histogram's sample count); the sum
// over all matching series (0 for none: gauges of label sets never used
// are absent).
func sample(fams map[string]*dto.MetricFamily, name string, want ...string) float64 {
	f := fams[name]
	if f == nil {
		return 0
	}
	total := 0.0
	for _, m := range f.Metric {
		labels := map[string]string{}
		for _, l := range m.Label {
			labels[l.GetName()] = l.GetValue()
		}
		match := true
		for i := 0; i+1 < len(want); i += 2 {
			if labels[want[i]] != want[i+1] {
				match = false
			}
		}
		if !match {
			continue
		}
		switch {
		case m.Counter != nil:
			total += m.Counter.GetValue()
		case m.Gauge != nil:
			total += m.Gauge.GetValue()
		case m.Histogram != nil:
			total += float64(m.Histogram.GetSampleCount())
		}
	}
	return total
}

func obsWaitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); {
		if cond() {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s", what)
}

func observedFarm(t *testing.T, log *slog.Logger, mod func(*config.Config), opts ...Option) *farm {
	t.Helper()
	return startFarmWith(t, log, func(c *config.Config) {
		c.HTTPListen = "127.0.0.1:0"
		c.Worker.AcceptUnknownProperties = false
		if mod != nil {
			mod(c)
		}
	}, opts...)
}

func emptyRoot(f *farm) digest.Digest { return f.put(&repb.Directory{}) }

// TestMetricsAfterKnownScenario runs actions through a real server with
// its embedded worker (3 succeed, 1 exits non-zero, 1 is a cache hit, 1
// waits for a worker that does not exist, 1 is executing) and checks the
// values /metrics reports.
func TestMetricsAfterKnownScenario(t *testing.T) {
	f := observedFarm(t, quietLogger(), nil)
	addr := f.srv.HTTPAddr()
	ctx := context.Background()
	root := emptyRoot(f)
	obsWaitFor(t, "the embedded worker to register", func() bool {
		return sample(scrape(t, addr), "gantry_workers", "state", "idle") == 1
	})

	for i := 0; i < 3; i++ {
		if r := f.run(ctx, root, shCmd(fmt.Sprintf("echo %d", i))); r.Result.GetExitCode() != 0 || r.CachedResult {
			t.Fatalf("action %d: %v", i, r)
		}
	}
	if r := f.run(ctx, root, shCmd("exit 3")); r.Result.GetExitCode() != 3 {
		t.Fatalf("failing action: %v", r)
	}
	if r := f.run(ctx, root, shCmd("echo 0")); !r.CachedResult {
		t.Fatalf("the repeated action was not a cache hit: %v", r)
	}

	// The worker observes its stage durations just after it reports the
	// result, so the client can see an operation finish a moment before
	// its stages are counted.
	obsWaitFor(t, "the worker's stage durations of 4 executed actions", func() bool {
		return sample(scrape(t, addr), "gantry_worker_stage_duration_seconds", "stage", "worker") >= 4
	})
	m := scrape(t, addr)
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"gantry_operations_total", []string{"result", "success", "code", "OK"}, 3},
		{"gantry_operations_total", []string{"result", "nonzero_exit", "code", "OK"}, 1},
		{"gantry_operations_total", []string{"result", "cache_hit", "code", "OK"}, 1},
		{"gantry_operations_total", []string{"result", "error"}, 0},
		{"gantry_action_cache_lookups_total", []string{"source", "execute", "result", "hit"}, 1},
		{"gantry_action_cache_lookups_total", []string{"source", "execute", "result", "miss"}, 4},
		{"gantry_scheduler_dispatch_latency_seconds", nil, 4},
		{"gantry_scheduler_handoff_seconds", nil, 4},
		{"gantry_operation_queue_time_seconds", nil, 4},
		{"gantry_worker_stage_duration_seconds", []string{"stage", "input_fetch"}, 4},
		{"gantry_worker_stage_duration_seconds", []string{"stage", "execute"}, 4},
		{"gantry_worker_stage_duration_seconds", []string{"stage", "output_upload"}, 4},
		{"gantry_worker_stage_duration_seconds", []string{"stage", "worker"}, 4},
		{"gantry_scheduler_retries_total", nil, 0},
		{"gantry_queue_length", nil, 0},
		{"gantry_executing_actions", nil, 0},
		{"gantry_workers", []string{"state", "idle"}, 1},
		{"gantry_worker_cores", nil, 2},
		// The embedded worker's cache_max_size (10 GiB), less the quarter
		// its chunk cache takes (worker.chunk_threshold is on by default).
		{"gantry_worker_input_cache_max_bytes", nil, 10<<30 - (10<<30)/4},
	} {
		if got := sample(m, c.name, c.labels...); got != c.want {
			t.Errorf("%s%v = %g, want %g", c.name, c.labels, got, c.want)
		}
	}

	// GetActionResult: a hit for the cached action, a miss for another.
	ac := repb.NewActionCacheClient(f.conn)
	hit := f.put(&repb.Action{CommandDigest: f.put(shCmd("echo 1")).Proto(), InputRootDigest: root.Proto()})
	if _, err := ac.GetActionResult(ctx, &repb.GetActionResultRequest{ActionDigest: hit.Proto()}); err != nil {
		t.Fatal(err)
	}
	miss := f.put(&repb.Action{CommandDigest: f.put(shCmd("never run")).Proto(), InputRootDigest: root.Proto()})
	if _, err := ac.GetActionResult(ctx, &repb.GetActionResultRequest{ActionDigest: miss.Proto()}); err == nil {
		t.Fatal("GetActionResult of an action never run succeeded")
	}
	m = scrape(t, addr)
	if h, ms := sample(m, "gantry_action_cache_lookups_total", "source", "get_action_result", "result", "hit"), sample(m, "gantry_action_cache_lookups_total", "source", "get_action_result", "result", "miss"); h != 1 || ms != 1 {
		t.Errorf("GetActionResult lookups: %g hits, %g misses; want 1 and 1", h, ms)
	}

	// CAS traffic: a 3 MiB upload and its download, exactly.
	big := bytes.Repeat([]byte("gantry!"), 3<<20/7)
	before := scrape(t, addr)
	d := f.putBytes(big)
	mid := scrape(t, addr)
	if got := sample(mid, "gantry_cas_received_bytes_total") - sample(before, "gantry_cas_received_bytes_total"); got != float64(len(big)) {
		t.Errorf("CAS received %g bytes for a %d-byte upload", got, len(big))
	}
	back, err := blobstore.Get(ctx, f.cas, d)
	if err != nil || !bytes.Equal(back, big) {
		t.Fatalf("reading the blob back: %v", err)
	}
	after := scrape(t, addr)
	if got := sample(after, "gantry_cas_sent_bytes_total") - sample(mid, "gantry_cas_sent_bytes_total"); got != float64(len(big)) {
		t.Errorf("CAS sent %g bytes for a %d-byte download", got, len(big))
	}

	// One action no worker can run waits in the queue; one runs.
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		a := f.put(&repb.Action{CommandDigest: f.put(shCmd("true")).Proto(), InputRootDigest: root.Proto(),
			Platform: &repb.Platform{Properties: []*repb.Platform_Property{{Name: "pool", Value: "nowhere"}}}})
		client.Execute(cctx, f.conn, &repb.ExecuteRequest{ActionDigest: a.Proto(), InstanceName: "tenant-a"})
	}()
	go func() {
		a := f.put(&repb.Action{CommandDigest: f.put(shCmd("sleep 30")).Proto(), InputRootDigest: root.Proto()})
		client.Execute(cctx, f.conn, &repb.ExecuteRequest{ActionDigest: a.Proto()})
	}()
	obsWaitFor(t, "one queued and one executing action", func() bool {
		m := scrape(t, addr)
		return sample(m, "gantry_queue_length", "instance", "tenant-a", "queue", "default") == 1 &&
			sample(m, "gantry_executing_actions", "instance", "", "queue", "default") == 1 &&
			sample(m, "gantry_workers", "state", "busy") == 1 && sample(m, "gantry_worker_busy_cores") == 1 &&
			sample(m, "gantry_worker_active_leases") == 1
	})
}

func TestInstanceLabelIsCapped(t *testing.T) {
	f := observedFarm(t, quietLogger(), func(c *config.Config) { c.Metrics.MaxInstances = 2 })
	addr := f.srv.HTTPAddr()
	root := emptyRoot(f)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a := f.put(&repb.Action{CommandDigest: f.put(shCmd("true")).Proto(), InputRootDigest: root.Proto(),
		Platform: &repb.Platform{Properties: []*repb.Platform_Property{{Name: "pool", Value: "nowhere"}}}})
	for _, inst := range []string{"i1", "i2", "i3", "i4"} {
		go client.Execute(ctx, f.conn, &repb.ExecuteRequest{ActionDigest: a.Proto(), InstanceName: inst})
	}
	obsWaitFor(t, "four queued actions", func() bool { return sample(scrape(t, addr), "gantry_queue_length") == 4 })
	m := scrape(t, addr)
	series := map[string]float64{}
	for _, s := range m["gantry_queue_length"].Metric {
		for _, l := range s.Label {
			if l.GetName() == "instance" {
				series[l.GetValue()] += s.Gauge.GetValue()
			}
		}
	}
	if len(series) != 3 || series["other"] != 2 {
		t.Errorf("queue length by instance = %v; want two instances of their own and other=2", series)
	}
}

func TestOperationCompletionLogLine(t *testing.T) {
	var out testutil.SyncBuffer
	f := observedFarm(t, slog.New(slog.NewJSONHandler(&out, nil)), nil)
	root := emptyRoot(f)
	cmd := shCmd("exit 7")
	a := f.put(&repb.Action{CommandDigest: f.put(cmd).Proto(), InputRootDigest: root.Proto()})
	rm, _ := proto.Marshal(&repb.RequestMetadata{ToolInvocationId: "inv-42", CorrelatedInvocationsId: "build-7"})
	ctx := metadata.AppendToOutgoingContext(context.Background(), protocol.RequestMetadataHeader, string(rm))
	resp, _, err := client.Execute(ctx, f.conn, &repb.ExecuteRequest{ActionDigest: a.Proto(), InstanceName: "team"})
	if err != nil || resp.Result.GetExitCode() != 7 {
		t.Fatalf("Execute: %v %v", resp, err)
	}
	var line map[string]any
	obsWaitFor(t, "the completion line", func() bool {
		for _, l := range strings.Split(out.String(), "\n") {
			if strings.Contains(l, `"operation finished"`) {
				if err := json.Unmarshal([]byte(l), &line); err != nil {
					t.Fatalf("log line %q is not JSON: %v", l, err)
				}
				return true
			}
		}
		return false
	})
	if line["instance"] != "team" || line["queue"] != "default" || line["status"] != "OK" || line["cached"] != false || line["exit_code"] != 7.0 {
		t.Errorf("completion line %v: want instance team, queue default, status OK, not cached, exit code 7", line)
	}
	if w, _ := line["worker"].(string); !strings.HasSuffix(w, "-embedded") {
		t.Errorf("worker = %v, want the embedded worker", line["worker"])
	}
	if line["action"] != a.String() {
		t.Errorf("action = %v, want %s", line["action"], a)
	}
	inv, _ := line["invocation"].(map[string]any)
	if inv["tool_invocation_id"] != "inv-42" || inv["correlated_invocations_id"] != "build-7" || inv["instance_name"] != "team" {
		t.Errorf("invocation = %v, want the request's keys", line["invocation"])
	}
	dur, _ := line["duration"].(map[string]any)
	for _, k := range []string{"queued_ms", "input_fetch_ms", "wait_core_ms", "execute_ms", "upload_ms", "report_ms", "total_ms"} {
		if v, ok := dur[k].(float64); !ok || v < 0 {
			t.Errorf("duration.%s = %v, want a duration in ms", k, dur[k])
		}
	}
	if total, exec := dur["total_ms"].(float64), dur["execute_ms"].(float64); exec > total {
		t.Errorf("execute took %gms of a %gms operation", exec, total)
	}

	// A cache hit logs its line too, cached and without a queue.
	ok := f.put(&repb.Action{CommandDigest: f.put(shCmd("true")).Proto(), InputRootDigest: root.Proto()})
	for i := 0; i < 2; i++ {
		if _, _, err := client.Execute(ctx, f.conn, &repb.ExecuteRequest{ActionDigest: ok.Proto(), InstanceName: "team"}); err != nil {
			t.Fatal(err)
		}
	}
	var hit map[string]any
	obsWaitFor(t, "the cache hit's line", func() bool {
		for _, l := range strings.Split(out.String(), "\n") {
			if strings.Contains(l, `"operation finished"`) && strings.Contains(l, `"cached":true`) {
				return json.Unmarshal([]byte(l), &hit) == nil
			}
		}
		return false
	})
	if hit["action"] != ok.String() || hit["status"] != "OK" || hit["queue"] != nil || hit["exit_code"] != 0.0 {
		t.Errorf("cache hit line %v: want action %s, status OK, no queue, exit code 0", hit, ok)
	}
	if inv, _ := hit["invocation"].(map[string]any); inv["tool_invocation_id"] != "inv-42" {
		t.Errorf("cache hit invocation = %v, want the request's keys", hit["invocation"])
	}
}

func TestTraceSpansFrontendSchedulerWorker(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	tracing.SetProvider(tp)
	t.Cleanup(func() { tracing.Disable(); tp.Shutdown(context.Background()) })
	f := observedFarm(t, quietLogger(), nil)
	if r := f.run(context.Background(), emptyRoot(f), shCmd("echo traced")); r.Result.GetExitCode() != 0 {
		t.Fatalf("action: %v", r)
	}
	byName := map[string]sdktrace.ReadOnlySpan{}
	obsWaitFor(t, "the worker's spans", func() bool {
		for _, s := range rec.Ended() {
			byName[s.Name()] = s
		}
		_, ok := byName["worker.Action"]
		return ok
	})
	parentOf := map[string]string{
		"scheduler.Submit":    "Execute",
		"scheduler.Lease":     "scheduler.Submit",
		"worker.Action":       "scheduler.Lease",
		"worker.InputFetch":   "worker.Action",
		"worker.Execute":      "worker.Action",
		"worker.OutputUpload": "worker.Action",
	}
	root, ok := byName["Execute"]
	if !ok {
		t.Fatalf("no Execute span among %v", names(byName))
	}
	if root.Parent().IsValid() {
		t.Errorf("Execute has a parent %v", root.Parent())
	}
	for child, parent := range parentOf {
		c, ok := byName[child]
		if !ok {
			t.Errorf("no %s span among %v", child, names(byName))
			continue
		}
		p := byName[parent]
		if p == nil || c.Parent().SpanID() != p.SpanContext().SpanID() || c.SpanContext().TraceID() != root.SpanContext().TraceID() {
			t.Errorf("%s is not a child of %s in the Execute trace", child, parent)
		}
	}
	if ex := byName["worker.Execute"]; ex != nil && ex.EndTime().Before(ex.StartTime()) {
		t.Errorf("worker.Execute ends before it starts")
	}
}

func names(m map[string]sdktrace.ReadOnlySpan) []string {
	var out []string
	for n := range m {
		out = append(out, n)
	}
	return out
}

func TestHealthAndReflection(t *testing.T) {
	f := observedFarm(t, quietLogger(), nil)
	ctx := context.Background()
	hc := healthpb.NewHealthClient(f.conn)
	for _, svc := range []string{"", "build.bazel.remote.execution.v2.Execution", "build.bazel.remote.execution.v2.ContentAddressableStorage", "gantry.worker.v1.Workers"} {
		r, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || r.Status != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("health of %q: %v %v, want SERVING", svc, r, err)
		}
	}
	if _, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: "no.such.Service"}); err == nil {
		t.Error("health of an unknown service succeeded")
	}

	rc, err := reflectionpb.NewServerReflectionClient(f.conn).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
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
	for _, want := range []string{"build.bazel.remote.execution.v2.Execution", "google.bytestream.ByteStream", "gantry.worker.v1.Workers", "grpc.health.v1.Health"} {
		if !listed[want] {
			t.Errorf("reflection does not list %s (lists %v)", want, listed)
		}
	}
	if err := rc.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_FileContainingSymbol{FileContainingSymbol: "gantry.worker.v1.Assignment"}}); err != nil {
		t.Fatal(err)
	}
	if resp, err = rc.Recv(); err != nil || len(resp.GetFileDescriptorResponse().GetFileDescriptorProto()) == 0 {
		t.Errorf("reflection has no descriptor for gantry.worker.v1.Assignment: %v %v", resp.GetErrorResponse(), err)
	}
	rc.CloseSend()
	if _, err := rc.Recv(); err != io.EOF {
		t.Errorf("reflection stream ended with %v", err)
	}

	f.stop()
}

// TestMemoryBackendKeepsNoJournal: with scheduler.store.backend memory
// the scheduler runs without a journal (nothing would read it), and
// actions still run.
func TestMemoryBackendKeepsNoJournal(t *testing.T) {
	f := observedFarm(t, quietLogger(), func(c *config.Config) { c.Scheduler.Store.Backend = "memory" })
	select {
	case <-f.srv.Scheduler().Stopped():
	default:
		t.Fatal("the scheduler runs a journal with the memory backend")
	}
	root := emptyRoot(f)
	if r := f.run(context.Background(), root, shCmd("echo hi")); r.Result.GetExitCode() != 0 {
		t.Fatalf("action: %v", r)
	}
}

// metricWant is one expected value on /metrics.
type metricWant struct {
	name   string
	labels []string
	want   float64
}

func checkMetrics(t *testing.T, addr string, wants ...metricWant) {
	t.Helper()
	m := scrape(t, addr)
	for _, c := range wants {
		if got := sample(m, c.name, c.labels...); got != c.want {
			t.Errorf("%s%v = %g, want %g", c.name, c.labels, got, c.want)
		}
	}
}

// waitMetric waits (up to 30 s) until the metric name without labels
// has the value want.
func waitMetric(t *testing.T, addr, name string, want float64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	waitFor(ctx, t, fmt.Sprintf("%s = %g", name, want), func() bool { return sample(scrape(t, addr), name) == want })
}

// TestPreemptionMetric: instance "flood" fills the only core of the
// cohort, and the worker's pipeline holds another flood action behind it
// (a third waits in the queue); instance "small" has min_quota 1, so its
// action gets the core by pre-emption: the running flood action and the
// one waiting behind it on the same worker are taken back, exactly 2
// pre-emptions, neither a retry nor a lost lease.
func TestPreemptionMetric(t *testing.T) {
	f := observedFarm(t, quietLogger(), func(c *config.Config) {
		c.Worker.Cores = 1
		c.Worker.AcceptUnknownProperties = true
		c.Scheduler.Labels = []config.LabelConfig{{Name: "linux", Properties: map[string]string{"OSFamily": "linux"}}}
		c.Scheduler.Cohorts = []config.CohortConfig{{Name: "x86", Labels: []string{"linux"}}}
		c.Scheduler.PreemptionDelay = config.Duration(500 * time.Millisecond)
	})
	addr := f.srv.HTTPAddr()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin := adminpb.NewAdminClient(f.conn)
	if _, err := admin.PutQuota(ctx, &adminpb.PutQuotaRequest{InstanceName: "small", Cohort: "x86", MinQuota: 1}); err != nil {
		t.Fatal(err)
	}
	execute := func(ctx context.Context, instance, script string) (*repb.ExecuteResponse, error) {
		a := f.put(&repb.Action{CommandDigest: f.put(shCmd(script)).Proto(), InputRootDigest: digest.Empty(digest.SHA256).Proto(), DoNotCache: true})
		resp, _, err := client.Execute(ctx, f.conn, &repb.ExecuteRequest{InstanceName: instance, ActionDigest: a.Proto()})
		return resp, err
	}
	floodCtx, stopFlood := context.WithCancel(ctx)
	defer stopFlood()
	for i := 0; i < 3; i++ {
		go execute(floodCtx, "flood", fmt.Sprintf("sleep 60; echo %d", i))
	}
	obsWaitFor(t, "the flood to fill the worker", func() bool {
		st, err := admin.GetQuota(ctx, &adminpb.GetQuotaRequest{InstanceName: "flood", Cohort: "x86"})
		m := scrape(t, addr)
		// One flood action runs on the core, one waits behind it on the
		// worker: held, not executing.
		return err == nil && st.Usage == 2 && st.Queued == 1 && sample(m, "gantry_executing_actions", "instance", "flood") == 1 &&
			sample(m, "gantry_held_actions", "instance", "flood") == 1 &&
			sample(m, "gantry_queue_length", "instance", "flood") == 1
	})
	checkMetrics(t, addr, metricWant{"gantry_scheduler_preemptions_total", nil, 0})
	resp, err := execute(ctx, "small", "echo quick")
	if err != nil || client.CheckResponse(resp) != nil {
		t.Fatalf("small action: %v %v", err, client.CheckResponse(resp))
	}
	checkMetrics(t, addr,
		metricWant{"gantry_scheduler_preemptions_total", nil, 2},
		metricWant{"gantry_scheduler_suspended_actions", nil, 0},
		metricWant{"gantry_scheduler_suspend_expired_total", nil, 0},
		metricWant{"gantry_scheduler_retries_total", nil, 0},
		metricWant{"gantry_scheduler_lost_leases_total", nil, 0},
		metricWant{"gantry_scheduler_gave_up_total", nil, 0},
	)
	// The status page counts them too.
	r, err := http.Get("http://" + addr + "/status")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(r.Body)
	r.Body.Close()
	if !strings.Contains(string(b), "2 pre-emptions") {
		t.Error("the overview does not show 2 pre-emptions")
	}
}

// TestCASMetricsAndEviction: the CAS gauges count exactly the uploaded
// blobs, and with storage.cas.max_size for two of them a third evicts the
// least recently used one.
func TestCASMetricsAndEviction(t *testing.T) {
	const size = 100_000 // above the pack threshold: one file per blob, evicted one by one
	f := observedFarm(t, quietLogger(), func(c *config.Config) {
		c.Worker.Enabled = false
		c.Storage.CAS.MaxSize = 2*size + size/2
	})
	addr := f.srv.HTTPAddr()
	blob := func(i int) []byte { return bytes.Repeat([]byte{byte('a' + i)}, size) }
	checkMetrics(t, addr,
		metricWant{"gantry_cas_blobs", nil, 0},
		metricWant{"gantry_cas_bytes", nil, 0},
		metricWant{"gantry_cas_evictions_total", nil, 0},
		metricWant{"gantry_cas_max_bytes", nil, 2*size + size/2},
	)
	d0 := f.putBytes(blob(0))
	d1 := f.putBytes(blob(1))
	checkMetrics(t, addr,
		metricWant{"gantry_cas_blobs", nil, 2},
		metricWant{"gantry_cas_bytes", nil, 2 * size},
		metricWant{"gantry_cas_evictions_total", nil, 0},
	)
	// Read the first: the second is now the least recently used.
	if b, err := blobstore.Get(context.Background(), f.cas, d0); err != nil || !bytes.Equal(b, blob(0)) {
		t.Fatalf("reading blob 0: %v", err)
	}
	f.putBytes(blob(2))
	checkMetrics(t, addr,
		metricWant{"gantry_cas_blobs", nil, 2},
		metricWant{"gantry_cas_bytes", nil, 2 * size},
		metricWant{"gantry_cas_evictions_total", nil, 1},
	)
	missing, err := f.cas.FindMissing(context.Background(), []digest.Digest{d0, d1})
	if err != nil {
		t.Fatal(err)
	}
	if len(missing) != 1 || missing[0] != d1 {
		t.Errorf("missing after the eviction: %v, want only blob 1 (%s)", missing, d1)
	}
}

// TestCASLifetimeRefusalMetric: in a CAS with room for two and a half
// blobs, both held, and reported present by FindMissing, a third is
// refused with an error naming storage.cas.min_lifetime (on by default),
// and gantry_cas_lifetime_refusals_total counts it.
func TestCASLifetimeRefusalMetric(t *testing.T) {
	const size = 100_000
	f := observedFarm(t, quietLogger(), func(c *config.Config) {
		c.Worker.Enabled = false
		c.Storage.CAS.MaxSize = 2*size + size/2
	})
	addr := f.srv.HTTPAddr()
	blob := func(i int) []byte { return bytes.Repeat([]byte{byte('a' + i)}, size) }
	d0, d1 := f.putBytes(blob(0)), f.putBytes(blob(1))
	checkMetrics(t, addr, metricWant{"gantry_cas_lifetime_refusals_total", nil, 0})
	if missing, err := f.cas.FindMissing(context.Background(), []digest.Digest{d0, d1}); err != nil || len(missing) != 0 {
		t.Fatalf("FindMissing = %v, %v; want both present", missing, err)
	}
	err := blobstore.Put(context.Background(), f.cas, digest.Compute(digest.SHA256, blob(2)), blob(2))
	if err == nil || !strings.Contains(err.Error(), "storage.cas.min_lifetime") {
		t.Fatalf("third blob: %v; want a refusal naming storage.cas.min_lifetime", err)
	}
	checkMetrics(t, addr,
		metricWant{"gantry_cas_lifetime_refusals_total", nil, 1},
		metricWant{"gantry_cas_evictions_total", nil, 0},
	)
}

// TestCASSpareMetrics: in a CAS bounded at eight and a half 2 MiB blobs,
// the ninth evicts the first, whose file is kept as a spare
// (gantry_cas_spare_bytes), and the tenth is written into it
// (gantry_cas_recycled_total).
func TestCASSpareMetrics(t *testing.T) {
	const size = 2 << 20
	f := observedFarm(t, quietLogger(), func(c *config.Config) {
		c.Worker.Enabled = false
		c.Storage.CAS.MaxSize = 8*size + size/2
	})
	addr := f.srv.HTTPAddr()
	blob := func(i int) []byte { return bytes.Repeat([]byte{byte('a' + i)}, size) }
	for i := range 8 {
		f.putBytes(blob(i))
	}
	checkMetrics(t, addr,
		metricWant{"gantry_cas_spare_bytes", nil, 0},
		metricWant{"gantry_cas_recycled_total", nil, 0},
	)
	f.putBytes(blob(8))
	// The evicted file becomes a spare in the background.
	waitMetric(t, addr, "gantry_cas_spare_bytes", size)
	f.putBytes(blob(9))
	waitMetric(t, addr, "gantry_cas_recycled_total", 1)
	checkMetrics(t, addr,
		metricWant{"gantry_cas_evictions_total", nil, 2},
		metricWant{"gantry_cas_bytes", nil, 8 * size},
	)
}

// TestWorkerInputCacheEvictionMetric: the embedded worker's input cache
// holds one of two 1000-byte input files; the second action's input
// evicts the first's.
func TestWorkerInputCacheEvictionMetric(t *testing.T) {
	// Without chunked transfers the file cache has all of cache_max_size.
	f := observedFarm(t, quietLogger(), func(c *config.Config) { c.Worker.CacheMaxSize, c.Worker.ChunkThreshold = 1500, 0 })
	addr := f.srv.HTTPAddr()
	ctx := context.Background()
	for i := 0; i < 2; i++ {
		content := bytes.Repeat([]byte{byte('x' + i)}, 1000)
		fd := f.putBytes(content)
		root := f.put(&repb.Directory{Files: []*repb.FileNode{{Name: "in.txt", Digest: fd.Proto()}}})
		if r := f.run(ctx, root, shCmd("wc -c < in.txt")); r.Result.GetExitCode() != 0 {
			t.Fatalf("action %d: %v", i, r)
		}
	}
	// The worker lets go of an action's inputs as it reports the result.
	obsWaitFor(t, "the eviction", func() bool {
		return sample(scrape(t, addr), "gantry_worker_input_cache_evictions_total") >= 1
	})
	checkMetrics(t, addr,
		metricWant{"gantry_worker_input_cache_misses_total", nil, 2},
		metricWant{"gantry_worker_input_cache_hits_total", nil, 0},
		metricWant{"gantry_worker_input_cache_evictions_total", nil, 1},
		metricWant{"gantry_worker_input_cache_files", nil, 1},
		metricWant{"gantry_worker_input_cache_bytes", nil, 1000},
		metricWant{"gantry_worker_input_cache_downloaded_bytes_total", nil, 2000},
		metricWant{"gantry_worker_input_cache_max_bytes", nil, 1500},
	)
}

// TestRetryMetrics: a worker takes an action and goes silent, twice; the
// scheduler retries the action once, then (scheduler.max_attempts 2)
// gives up.
func TestRetryMetrics(t *testing.T) {
	f := observedFarm(t, quietLogger(), func(c *config.Config) {
		c.Scheduler.MaxAttempts = 2
		c.Scheduler.HeartbeatTimeout = config.Duration(500 * time.Millisecond)
	})
	addr := f.srv.HTTPAddr()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// Only the silent worker offers pool=ghost (the embedded worker
	// takes no unknown properties).
	a := f.put(&repb.Action{CommandDigest: f.put(shCmd("true")).Proto(), InputRootDigest: emptyRoot(f).Proto(), DoNotCache: true,
		Platform: &repb.Platform{Properties: []*repb.Platform_Property{{Name: "pool", Value: "ghost"}}}})
	type result struct {
		resp *repb.ExecuteResponse
		err  error
	}
	done := make(chan result, 1)
	go func() {
		resp, _, err := client.Execute(ctx, f.conn, &repb.ExecuteRequest{ActionDigest: a.Proto()})
		done <- result{resp, err}
	}()
	wk := workerpb.NewWorkersClient(f.conn)
	take := func(attempt int) {
		t.Helper()
		if _, err := wk.Register(ctx, &workerpb.RegisterRequest{WorkerId: "ghost", Cores: 1, Slots: 1, MemoryBytes: 1 << 30,
			Properties: []*workerpb.Property{{Name: "pool", Value: "ghost"}, {Name: "OSFamily", Value: "linux"}}}); err != nil {
			t.Fatal(err)
		}
		for {
			resp, err := wk.Poll(ctx, &workerpb.PollRequest{WorkerId: "ghost", FreeCores: 1, FreeMemoryBytes: 1 << 30, WaitMs: 2000})
			if err != nil {
				t.Fatal(err)
			}
			if as := resp.GetAssignment(); as != nil {
				if as.GetAttempt() != int32(attempt) {
					t.Errorf("attempt %d, want %d", as.GetAttempt(), attempt)
				}
				return
			}
			if ctx.Err() != nil {
				t.Fatal("the ghost worker got no work")
			}
		}
	}
	take(1)
	obsWaitFor(t, "the lost lease to be retried", func() bool {
		return sample(scrape(t, addr), "gantry_scheduler_retries_total") == 1
	})
	checkMetrics(t, addr,
		metricWant{"gantry_scheduler_retries_total", nil, 1},
		metricWant{"gantry_scheduler_lost_leases_total", nil, 1},
		metricWant{"gantry_scheduler_gave_up_total", nil, 0},
		metricWant{"gantry_queue_length", nil, 1},
	)
	take(2)
	var r result
	select {
	case r = <-done:
	case <-ctx.Done():
		t.Fatal("the action never finished")
	}
	if st := status.FromProto(r.resp.GetStatus()); r.err != nil || st.Code() != codes.Unavailable || !strings.Contains(st.Message(), "started 2 times") {
		t.Fatalf("after two lost leases: %v %v", r.err, st)
	}
	checkMetrics(t, addr,
		metricWant{"gantry_scheduler_retries_total", nil, 1},
		metricWant{"gantry_scheduler_lost_leases_total", nil, 2},
		metricWant{"gantry_scheduler_gave_up_total", nil, 1},
		metricWant{"gantry_queue_length", nil, 0},
	)
}

// otlpReceiver is a fake OTLP/gRPC trace collector: it keeps every span
// exported to it, with its resource's service.name.
type otlpReceiver struct {
	coltracepb.UnimplementedTraceServiceServer
	mu    sync.Mutex
	spans []receivedSpan
}

type receivedSpan struct {
	service string
	span    *tracepb.Span
}

func (r *otlpReceiver) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range req.ResourceSpans {
		service := ""
		for _, a := range rs.GetResource().GetAttributes() {
			if a.Key == "service.name" {
				service = a.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.ScopeSpans {
			for _, sp := range ss.Spans {
				r.spans = append(r.spans, receivedSpan{service, sp})
			}
		}
	}
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

func (r *otlpReceiver) byName() map[string]receivedSpan {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]receivedSpan{}
	for _, s := range r.spans {
		out[s.span.Name] = s
	}
	return out
}

// TestTracesExportedByOTLP: a server (role all) configured with the
// tracing.* keys exports the spans of an executed action to an OTLP/gRPC
// collector: Execute, the scheduler's submit and lease and the worker's
// stages, in one trace, parent by parent, under the configured
// service.name.
func TestTracesExportedByOTLP(t *testing.T) {
	recv := &otlpReceiver{}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(g, recv)
	go g.Serve(lis)
	defer g.Stop()

	file := filepath.Join(t.TempDir(), "gantry.yaml")
	yaml := fmt.Sprintf("role: all\ntracing:\n  otlp_endpoint: %s\n  insecure: true\n  service_name: gantry-otlp-test\n", lis.Addr())
	if err := os.WriteFile(file, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	loaded, err := config.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	f := observedFarm(t, quietLogger(), func(c *config.Config) { c.Role, c.Tracing = loaded.Role, loaded.Tracing })
	t.Cleanup(tracing.Disable)
	if !tracing.Enabled() {
		t.Fatal("tracing is off with tracing.otlp_endpoint set")
	}
	if r := f.run(context.Background(), emptyRoot(f), shCmd("echo traced")); r.Result.GetExitCode() != 0 {
		t.Fatalf("action: %v", r)
	}
	// The exporter sends in batches: flush until the worker's last span
	// has arrived.
	flusher, ok := otel.GetTracerProvider().(interface{ ForceFlush(context.Context) error })
	if !ok {
		t.Fatalf("the global tracer provider %T cannot flush", otel.GetTracerProvider())
	}
	obsWaitFor(t, "the worker.Action span at the collector", func() bool {
		flusher.ForceFlush(context.Background())
		_, ok := recv.byName()["worker.Action"]
		return ok
	})
	spans := recv.byName()
	root, ok := spans["Execute"]
	if !ok {
		t.Fatalf("no Execute span among %d exported", len(spans))
	}
	if len(root.span.ParentSpanId) != 0 {
		t.Errorf("Execute has a parent %x", root.span.ParentSpanId)
	}
	for child, parent := range map[string]string{
		"scheduler.Submit":    "Execute",
		"scheduler.Lease":     "scheduler.Submit",
		"worker.Action":       "scheduler.Lease",
		"worker.InputFetch":   "worker.Action",
		"worker.Execute":      "worker.Action",
		"worker.OutputUpload": "worker.Action",
	} {
		c, ok := spans[child]
		if !ok {
			t.Errorf("no %s span exported", child)
			continue
		}
		if !bytes.Equal(c.span.TraceId, root.span.TraceId) {
			t.Errorf("%s is in trace %x, not Execute's %x", child, c.span.TraceId, root.span.TraceId)
		}
		if p, ok := spans[parent]; !ok || !bytes.Equal(c.span.ParentSpanId, p.span.SpanId) {
			t.Errorf("%s is not a child of %s", child, parent)
		}
		if c.service != "gantry-otlp-test" {
			t.Errorf("%s has service.name %q, want tracing.service_name", child, c.service)
		}
	}
	if root.service != "gantry-otlp-test" {
		t.Errorf("Execute has service.name %q", root.service)
	}
}
