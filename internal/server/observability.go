package server

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
	reflectionv1 "google.golang.org/grpc/reflection/grpc_reflection_v1"
	reflectionv1alpha "google.golang.org/grpc/reflection/grpc_reflection_v1alpha"

	"github.com/gantry-build/gantry/internal/blobstore"
	"github.com/gantry-build/gantry/internal/config"
	"github.com/gantry-build/gantry/internal/execution"
	"github.com/gantry-build/gantry/internal/metrics"
	"github.com/gantry-build/gantry/internal/protocol"
	"github.com/gantry-build/gantry/internal/scheduler"
	"github.com/gantry-build/gantry/internal/statestore"
	"github.com/gantry-build/gantry/internal/tracing"
	"github.com/gantry-build/gantry/internal/worker"
)

// observability holds the metrics, tracing and health parts of a
// process. Each metric is exported where its source is: the all-in-one
// server has everything; a frontend node the gRPC, outcome, cache lookup
// and CAS metrics; a scheduler node the gRPC, scheduler, queue time and
// worker stage metrics.
type observability struct {
	reg  prometheus.Registerer
	grpc *metrics.GRPC
	// outcomes: where callers see operations finish (roles all, frontend).
	outcomes *metrics.Outcomes
	// timings: where the scheduler runs (roles all, scheduler).
	timings *metrics.Timings
	// storage: where the CAS is (roles all, frontend).
	storage *metrics.Storage
	health  *health.Server
	// worker is the embedded worker once it runs (nil before, and in a
	// process without one), for its persistent worker page.
	worker atomic.Pointer[worker.Worker]
	// stopTracing flushes and stops the trace exporter.
	stopTracing func(context.Context) error
}

// newObservability registers the metrics of what this process does and
// starts the trace exporter when tracing is configured. With storage, it
// counts the storage traffic and operation outcomes; schedulerCall tells
// the calls of a scheduler node apart (nil: none call here). With
// runsScheduler, it times the actions a scheduler here runs.
func newObservability(cfg config.Config, reg prometheus.Registerer, storage bool, schedulerCall func(context.Context) bool, runsScheduler bool) (*observability, error) {
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	o := &observability{reg: reg, grpc: metrics.NewGRPC(reg), health: health.NewServer()}
	if storage {
		o.outcomes = metrics.NewOutcomes(reg)
		o.storage = metrics.NewStorage(reg, o.outcomes, schedulerCall)
	}
	if runsScheduler {
		o.timings = metrics.NewTimings(reg)
	}
	stop, err := startTracing(cfg)
	if err != nil {
		return nil, err
	}
	o.stopTracing = stop
	return o, nil
}

// startTracing starts the trace exporter of the tracing section.
func startTracing(cfg config.Config) (func(context.Context) error, error) {
	tc := cfg.Tracing
	return tracing.Setup(context.Background(), tracing.Config{OTLPEndpoint: tc.OTLPEndpoint, Insecure: tc.Insecure, SampleRatio: tc.SampleRatio, Service: tc.ServiceName})
}

// unary and stream are the metrics interceptors, first in the chain.
func (o *observability) unary() []grpc.UnaryServerInterceptor {
	if o.storage == nil {
		return []grpc.UnaryServerInterceptor{o.grpc.Unary}
	}
	return []grpc.UnaryServerInterceptor{o.grpc.Unary, o.storage.Unary}
}

func (o *observability) stream() []grpc.StreamServerInterceptor {
	if o.storage == nil {
		return []grpc.StreamServerInterceptor{o.grpc.Stream}
	}
	return []grpc.StreamServerInterceptor{o.grpc.Stream, o.storage.Stream}
}

// register adds the health and reflection services to g. Reflection
// also lists the forwarded services (a frontend node's: served by the
// leading scheduler, through the frontend).
func (o *observability) register(g *grpc.Server, forwarded ...*grpc.ServiceDesc) {
	healthpb.RegisterHealthServer(g, o.health)
	if len(forwarded) == 0 {
		reflection.Register(g)
		return
	}
	services := reflectedServices{g: g, forwarded: map[string]grpc.ServiceInfo{}}
	for _, sd := range forwarded {
		info := grpc.ServiceInfo{Metadata: sd.Metadata}
		for _, m := range sd.Methods {
			info.Methods = append(info.Methods, grpc.MethodInfo{Name: m.MethodName})
		}
		for _, s := range sd.Streams {
			info.Methods = append(info.Methods, grpc.MethodInfo{Name: s.StreamName, IsClientStream: s.ClientStreams, IsServerStream: s.ServerStreams})
		}
		services.forwarded[sd.ServiceName] = info
	}
	reflectionv1.RegisterServerReflectionServer(g, reflection.NewServerV1(reflection.ServerOptions{Services: services}))
	reflectionv1alpha.RegisterServerReflectionServer(g, reflection.NewServer(reflection.ServerOptions{Services: services}))
}

// reflectedServices are the services of g and the forwarded ones.
type reflectedServices struct {
	g         *grpc.Server
	forwarded map[string]grpc.ServiceInfo
}

func (r reflectedServices) GetServiceInfo() map[string]grpc.ServiceInfo {
	m := r.g.GetServiceInfo()
	for name, info := range r.forwarded {
		m[name] = info
	}
	return m
}

// The observability of a process is the execution services' Observer:
// operations finished, cache lookups and workers' results feed the
// metrics this process exports.
var _ execution.Observer = (*observability)(nil)

// Finished implements execution.Observer.
func (o *observability) Finished(f protocol.Finished) {
	if o.outcomes != nil {
		o.outcomes.OperationDone(f.Response)
	}
	if o.timings != nil {
		o.timings.Queued(f.Response, f.Accepted)
	}
}

// CacheLookup implements execution.Observer.
func (o *observability) CacheLookup(hit bool) {
	if o.outcomes != nil {
		o.outcomes.CacheLookup("execute", hit)
	}
}

// WorkerCompleted implements execution.Observer.
func (o *observability) WorkerCompleted(_ string, resp *repb.ExecuteResponse) {
	if o.timings != nil {
		o.timings.WorkerCompleted(resp.GetResult().GetExecutionMetadata())
	}
}

// operationDone counts an operation a frontend node saw finish for a
// caller (a forwarded Execute or WaitExecution).
func (o *observability) operationDone(resp *repb.ExecuteResponse) {
	if o.outcomes != nil {
		o.outcomes.OperationDone(resp)
	}
}

// markServices reports every service registered on g as SERVING.
func (o *observability) markServices(g *grpc.Server) {
	o.setServing(healthpb.HealthCheckResponse_SERVING, keysOf(g.GetServiceInfo())...)
}

// setServing reports the named services in status st.
func (o *observability) setServing(st healthpb.HealthCheckResponse_ServingStatus, services ...string) {
	for _, name := range services {
		o.health.SetServingStatus(name, st)
	}
}

func keysOf[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for n := range m {
		out = append(out, n)
	}
	return out
}

// notServing reports every service NOT_SERVING, as the server stops.
func (o *observability) notServing() { o.health.Shutdown() }

// stop flushes the traces.
func (o *observability) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	o.stopTracing(ctx)
}

// embeddedWorker adds the embedded worker's leases and input cache to
// the server's metrics, and keeps the worker for its persistent worker
// page (its stage durations are already there, from its
// results). A second embedded worker (Run called again) keeps the first
// one's registration.
func (o *observability) embeddedWorker(w *worker.Worker) error {
	o.worker.Store(w)
	var already prometheus.AlreadyRegisteredError
	if err := w.RegisterMetrics(o.reg, false); err != nil && !errors.As(err, &already) {
		return fmt.Errorf("registering the embedded worker's metrics: %w", err)
	}
	return nil
}

// statser is implemented by stores that can report their size.
type statser interface {
	Stats() (blobs int, bytes int64)
}

// registerCASMetrics exports the size, limit and evictions of the CAS.
// registerStateStoreMetrics registers the scheduler state store's commit
// metrics (gantry_state_*) when the store reports them.
func registerStateStoreMetrics(reg prometheus.Registerer, cfg config.Config, store statestore.Store) {
	if in, ok := store.(statestore.Instrumented); ok {
		metrics.NewStateStore(reg, in, cfg.Scheduler.Store.Backend)
	}
}

// For a CAS in a bucket, cas is the disk tier and limit its size.
func registerCASMetrics(reg prometheus.Registerer, cas blobstore.Store, limit config.ByteSize) {
	if st, ok := cas.(statser); ok {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "gantry_cas_blobs", Help: "Blobs held in the CAS.",
		}, func() float64 { n, _ := st.Stats(); return float64(n) }))
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "gantry_cas_bytes", Help: "Bytes held in the CAS.",
		}, func() float64 { _, b := st.Stats(); return float64(b) }))
	}
	if ev, ok := cas.(interface{ Evicted() int64 }); ok {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "gantry_cas_evictions_total", Help: "Blobs evicted from the CAS to stay under storage.cas.max_size.",
		}, func() float64 { return float64(ev.Evicted()) }))
	}
	if rf, ok := cas.(interface{ Refused() int64 }); ok {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "gantry_cas_lifetime_refusals_total", Help: "Blobs refused because the CAS held only blobs under storage.cas.min_lifetime; builds fail while it grows: raise storage.cas.max_size.",
		}, func() float64 { return float64(rf.Refused()) }))
	}
	if sp, ok := cas.(interface{ Spares() (int64, int64) }); ok {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "gantry_cas_spare_bytes", Help: "Bytes of evicted blob files kept for new uploads to overwrite (on top of gantry_cas_bytes).",
		}, func() float64 { b, _ := sp.Spares(); return float64(b) }))
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "gantry_cas_recycled_total", Help: "Uploads written into the file of an evicted blob instead of a new one.",
		}, func() float64 { _, n := sp.Spares(); return float64(n) }))
	}
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "gantry_cas_max_bytes", Help: "The CAS size limit (storage.cas.max_size; with the s3 backend, the disk tier's storage.cas.cache.max_size).",
	}, func() float64 { return float64(limit) }))
}

// registerSchedulerMetrics exports the state of the scheduler sched
// returns, read when scraped. A standby scheduler node returns an empty
// scheduler, so every value is 0 there.
func registerSchedulerMetrics(reg prometheus.Registerer, cfg config.Config, sched func() scheduler.Snapshot) {
	for _, g := range []struct {
		name, help string
		get        func(scheduler.Stats) int
	}{
		{"gantry_scheduler_queued_actions", "Actions waiting for a worker.", func(s scheduler.Stats) int { return s.Queued }},
		{"gantry_scheduler_leased_actions", "Actions leased to workers: gantry_held_actions (not started) plus gantry_executing_actions.", func(s scheduler.Stats) int { return s.Leased }},
		{"gantry_scheduler_operations", "Operations known (running and recently finished).", func(s scheduler.Stats) int { return s.Operations }},
		{"gantry_scheduler_workers", "Registered workers.", func(s scheduler.Stats) int { return s.Workers }},
		{"gantry_scheduler_suspended_actions", "Actions stopped (SIGSTOP) for pre-emption now (scheduler.preemption: suspend).", func(s scheduler.Stats) int { return s.Suspended }},
	} {
		get := g.get
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: g.name, Help: g.help}, func() float64 { return float64(get(sched().Stats())) }))
	}
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "gantry_scheduler_preemptions_total",
		Help: "Actions pre-empted for instances below their min quota."}, func() float64 { return float64(sched().Stats().Preemptions) }))
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "gantry_scheduler_suspend_expired_total",
		Help: "Suspended actions cancelled and queued again after scheduler.max_suspend."}, func() float64 { return float64(sched().Stats().SuspendExpired) }))
	metrics.NewScheduler(reg, func() scheduler.MetricsSnapshot { return sched().MetricsSnapshot() }, metrics.NewInstances(cfg.Metrics.MaxInstances))
}
