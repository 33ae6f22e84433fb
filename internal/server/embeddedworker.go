package server

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"runtime"
	"time"

	"google.golang.org/grpc"

	workerpb "github.com/gantry-build/gantry/api/worker/v1"
	"github.com/gantry-build/gantry/internal/config"
	"github.com/gantry-build/gantry/internal/execution"
	"github.com/gantry-build/gantry/internal/worker"
	"github.com/gantry-build/gantry/internal/worker/persistent"
)

// embeddedWorker is the part that runs a worker in this process (roles
// all and frontend, with worker.enabled). It reaches the scheduler over
// the process's own gRPC port, like any other worker (over the
// in-process listener when TLS or auth is on).
type embeddedWorker struct {
	passive
	cfg  config.Config
	log  *slog.Logger
	dial func() (*grpc.ClientConn, error)
	// local is the scheduler's worker service when it runs in this
	// process (role all), nil otherwise: the worker then calls it over
	// execution.InProcess.
	local *execution.WorkerService
	obs   *observability
}

// runsEmbeddedWorker reports whether a process of cfg runs a worker.
func runsEmbeddedWorker(cfg config.Config) bool {
	return cfg.Worker.Enabled && cfg.Role != config.RoleScheduler
}

func newEmbeddedWorker(b *builder, grpcAddr string, local *execution.WorkerService) *embeddedWorker {
	sec := b.sec
	return &embeddedWorker{cfg: b.cfg, log: b.log, obs: b.obs, local: local,
		dial: func() (*grpc.ClientConn, error) { return sec.dialEmbedded(grpcAddr) }}
}

// run runs the worker until ctx ends. When an operator terminates the
// worker, the process keeps serving without it: run then waits for ctx
// and returns nil.
func (w *embeddedWorker) run(ctx context.Context) error {
	err := runWorker(ctx, w.dial, w.local, w.cfg, w.log, w.obs.embeddedWorker)
	if err != nil {
		return fmt.Errorf("embedded worker: %w", err)
	}
	if ctx.Err() == nil {
		w.log.Info("the embedded worker was terminated; the server keeps running without it (restart the server to get it back)", "worker", w.cfg.Worker.ID)
		<-ctx.Done()
	}
	return nil
}

// runWorker runs the configured worker over the connection dial makes,
// with its worker-protocol calls made in process on local when it is not
// nil (execution.InProcess). It
// returns when ctx ends, or when an operator terminated the worker.
// prepare, if not nil, is called with the worker before it runs.
func runWorker(ctx context.Context, dial func() (*grpc.ClientConn, error), local *execution.WorkerService, cfg config.Config, log *slog.Logger, prepare func(*worker.Worker) error) error {
	conn, err := dial()
	if err != nil {
		return err
	}
	defer conn.Close()
	wc := cfg.Worker
	wc.ID = embeddedWorkerID(cfg)
	if wc.WorkDir == "" {
		wc.WorkDir = filepath.Join(cfg.DataDir, "worker")
	}
	wc.Sandbox.HiddenPaths = hideDataDir(wc.Sandbox.HiddenPaths, cfg.DataDir)
	var sched workerpb.WorkersClient = workerpb.NewWorkersClient(conn)
	if local != nil {
		sched = execution.NewInProcess(local, sched)
	}
	w, err := worker.New(conn, sched, WorkerConfig(wc, log))
	if err != nil {
		return err
	}
	if prepare != nil {
		if err := prepare(w); err != nil {
			return err
		}
	}
	return w.Run(ctx)
}

// WorkerConfig turns the config file's worker section into a worker.Config.
func WorkerConfig(wc config.WorkerConfig, log *slog.Logger) worker.Config {
	cores := wc.Cores
	if cores <= 0 {
		cores = runtime.NumCPU()
	}
	mem := int64(wc.Memory)
	if mem <= 0 {
		mem = worker.HostMemory()
	}
	props := map[string][]string{}
	for k, vs := range wc.Properties {
		props[k] = vs
	}
	sbc, all := SandboxConfig(wc.Sandbox)
	return worker.Config{
		Sandbox: sbc, SandboxAll: all,
		ID: wc.ID, Cores: cores, MemoryBytes: mem,
		InputFetchSlots: wc.InputFetchSlots, ReportSlots: wc.ReportSlots,
		Properties: worker.Properties(props), AcceptUnknownProperties: wc.AcceptUnknownProperties,
		WorkDir: wc.WorkDir, CacheMaxBytes: int64(wc.CacheMaxSize), ChunkThreshold: int64(wc.ChunkThreshold), Wrapper: wc.Wrapper, Logger: log,
		ProcessWrappers: wc.ProcessWrappers, Queues: wc.Queues, Resources: wc.Resources, Instances: wc.Instances,
		MinFreeDisk: int64(wc.MinFreeDisk), MaxFileSize: int64(wc.MaxFileSize),
		LinkInputDirectories: wc.LinkInputDirectories != config.LinkInputDirectoriesOff,
		PersistentWorkers:    persistentWorkers(wc.PersistentWorkers, cores),
		StoreResultsLater:    wc.StoreResultsLater,
	}
}

// persistentWorkers is the pool configuration of worker.persistent_workers
// (nil when off), its bounds defaulting from the worker's cores.
func persistentWorkers(pc config.PersistentWorkersConfig, cores int) *persistent.Config {
	if !pc.Enabled {
		return nil
	}
	c := &persistent.Config{MaxPerKey: pc.MaxPerKey, MaxTotal: pc.MaxTotal, MaxMultiplex: pc.MaxMultiplex,
		IdleTimeout: time.Duration(pc.IdleTimeout), MinFreeMemory: int64(pc.MinFreeMemory)}
	if c.MaxPerKey == 0 {
		c.MaxPerKey = cores
	}
	if c.MaxTotal == 0 {
		c.MaxTotal = max(2*cores, c.MaxPerKey)
	}
	return c
}
