package server

import (
	"context"
	"errors"
	"fmt"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	"github.com/gantry-build/gantry/internal/blobstore"
	"github.com/gantry-build/gantry/internal/config"
	"github.com/gantry-build/gantry/internal/execution"
	"github.com/gantry-build/gantry/internal/metrics"
	"github.com/gantry-build/gantry/internal/scheduler"
	"github.com/gantry-build/gantry/internal/tracing"
	"github.com/gantry-build/gantry/internal/worker"
)

// observability holds the metrics, tracing and health parts of a server.
type observability struct {
	reg     prometheus.Registerer
	ops     *metrics.Operations
	storage *metrics.Storage
	health  *health.Server
	// stopTracing flushes and stops the trace exporter.
	stopTracing func(context.Context) error
}

// newObservability registers the operation, storage and scheduler metrics
// and starts the trace exporter when tracing is configured.
func newObservability(cfg config.Config, reg prometheus.Registerer, sched *scheduler.Scheduler, cas blobstore.Store) (*observability, error) {
	o := &observability{reg: reg, ops: metrics.NewOperations(reg), health: health.NewServer()}
	o.storage = metrics.NewStorage(reg, o.ops)
	metrics.NewScheduler(reg, sched.MetricsSnapshot, metrics.NewInstances(cfg.Metrics.MaxInstances))
	if ev, ok := cas.(interface{ Evicted() int64 }); ok {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "gantry_cas_evictions_total", Help: "Blobs evicted from the CAS to stay under storage.cas.max_size.",
		}, func() float64 { return float64(ev.Evicted()) }))
	}
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "gantry_cas_max_bytes", Help: "The CAS size limit (storage.cas.max_size).",
	}, func() float64 { return float64(cfg.Storage.CAS.MaxSize) }))
	tc := cfg.Tracing
	stop, err := tracing.Setup(context.Background(), tracing.Config{OTLPEndpoint: tc.OTLPEndpoint, Insecure: tc.Insecure, SampleRatio: tc.SampleRatio, Service: tc.ServiceName})
	if err != nil {
		return nil, err
	}
	o.stopTracing = stop
	return o, nil
}

// attach registers the health and reflection services and connects the
// execution services to the metrics.
func (o *observability) attach(g *grpc.Server, exec *execution.Service, ws *execution.WorkerService) {
	healthpb.RegisterHealthServer(g, o.health)
	reflection.Register(g)
	exec.Observer.Finished = func(f execution.Finished) { o.ops.OperationDone(f.Response, f.Accepted) }
	exec.Observer.CacheLookup = func(hit bool) { o.ops.CacheLookup("execute", hit) }
	ws.Observer.WorkerCompleted = func(_ string, resp *repb.ExecuteResponse) {
		o.ops.WorkerCompleted(resp.GetResult().GetExecutionMetadata())
	}
}

// markServices reports every service registered on g as SERVING.
func (o *observability) markServices(g *grpc.Server) {
	for name := range g.GetServiceInfo() {
		o.health.SetServingStatus(name, healthpb.HealthCheckResponse_SERVING)
	}
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
// the server's metrics (its stage durations are already there, from its
// results). A second embedded worker (Run called again) keeps the first
// one's registration.
func (o *observability) embeddedWorker(w *worker.Worker) error {
	var already prometheus.AlreadyRegisteredError
	if err := w.RegisterMetrics(o.reg, false); err != nil && !errors.As(err, &already) {
		return fmt.Errorf("registering the embedded worker's metrics: %w", err)
	}
	return nil
}
