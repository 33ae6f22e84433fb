// Package server assembles Gantry's roles into one process: stores, gRPC
// services, and the HTTP port with /metrics and /healthz.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"runtime"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/keepalive"

	"github.com/gantry-build/gantry/internal/actioncache"
	"github.com/gantry-build/gantry/internal/blobstore"
	"github.com/gantry-build/gantry/internal/config"
	"github.com/gantry-build/gantry/internal/dirlock"
	"github.com/gantry-build/gantry/internal/execution"
	"github.com/gantry-build/gantry/internal/frontend"
	"github.com/gantry-build/gantry/internal/invocation"
	"github.com/gantry-build/gantry/internal/platform"
	"github.com/gantry-build/gantry/internal/scheduler"
	"github.com/gantry-build/gantry/internal/statestore"
	"github.com/gantry-build/gantry/internal/status"
	"github.com/gantry-build/gantry/internal/worker"
)

// streamWorkers is how many goroutines serve gRPC calls in turn.
const streamWorkers = 64

// Server is a running all-in-one Gantry.
type Server struct {
	cfg       config.Config
	log       *slog.Logger
	grpc      *grpc.Server
	http      *http.Server
	grpcLis   net.Listener
	httpLis   net.Listener
	Frontend  *frontend.Server
	Scheduler *scheduler.Scheduler
	exec      *execution.Service
	admin     *execution.AdminService
	sec       *security
	// state keeps the scheduler's state; stopState ends its flusher.
	state      statestore.Store
	stopState  context.CancelFunc
	closeState sync.Once
	// lost closes when a PostgreSQL store's leadership ends (nil: never).
	lost <-chan struct{}
	// obs: metrics, tracing, health (observability.go).
	obs *observability
	// dataDir keeps other processes out of cfg.DataDir until Stop.
	dataDir *dirlock.Lock
}

// New builds a server from cfg and binds its ports.
func New(cfg config.Config, log *slog.Logger) (s *Server, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	// Before anything touches the data dir: a second process must not
	// open the stores of a live one.
	lock, err := lockDataDir(cfg)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			lock.Release()
		}
	}()
	cas, err := openCAS(cfg)
	if err != nil {
		return nil, err
	}
	ac, err := openAC(cfg)
	if err != nil {
		return nil, err
	}
	reg := prometheus.NewRegistry()

	fe := frontend.New(cas, ac, frontend.Options{
		MaxBatchSize:      int64(cfg.Storage.MaxBatchSize),
		ReadChunkSize:     int(cfg.Storage.ReadChunkSize),
		InlineLimit:       int64(cfg.Storage.InlineLimit),
		CompletenessCheck: cfg.Storage.CompletenessCheck,
		ExecEnabled:       true,
		Logger:            log,
	})
	sc := cfg.Scheduler
	sched := scheduler.New(schedulerConfig(cfg, log), scheduler.RealClock{})
	logQueues(log, Queues(sc.Queues))
	sec, err := newSecurity(cfg)
	if err != nil {
		return nil, err
	}
	obs, err := newObservability(cfg, reg, func() *scheduler.Scheduler { return sched }, cas)
	if err != nil {
		return nil, err
	}
	var refusedControls []grpc.UnaryServerInterceptor
	if sec.authz != nil {
		refusedControls = append(refusedControls, execution.LogRefusedControls(log))
	}
	maxMsg := cfg.GRPCMaxMessageSize()
	g := grpc.NewServer(
		grpc.MaxRecvMsgSize(maxMsg),
		grpc.MaxSendMsgSize(maxMsg),
		// Large windows let one ByteStream stream fill a fast link.
		grpc.InitialWindowSize(8<<20),
		grpc.InitialConnWindowSize(16<<20),
		// Larger socket buffers: a 256 MiB upload or download takes a
		// tenth of the read and write system calls of the default 32 KiB.
		// Write buffers go back to a pool between flushes, so idle
		// connections hold none.
		grpc.ReadBufferSize(256<<10),
		grpc.WriteBufferSize(256<<10),
		grpc.SharedWriteBuffer(true),
		// Buffers that are not zeroed on reuse, shared with the storage
		// handlers (see frontend.BufferPool).
		experimental.BufferPool(frontend.BufferPool()),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
		grpc.ChainUnaryInterceptor(obs.unary()...),
		grpc.ChainStreamInterceptor(obs.stream()...),
		// Reused handler goroutines keep their grown stacks: a new
		// goroutine per call grows its stack on every call (copystack was
		// ~10% of the CPU with many small calls). Calls beyond these
		// workers get a goroutine of their own as before.
		grpc.NumStreamWorkers(streamWorkers),
		// TLS, and the embedded worker's in-process connection.
		grpc.Creds(sec.creds()),
		// Authentication and authorization (after the metrics), with
		// the admin controls it refuses logged.
		grpc.ChainUnaryInterceptor(refusedControls...),
		grpc.ChainUnaryInterceptor(sec.unary()...),
		grpc.ChainStreamInterceptor(sec.stream()...),
	)
	fe.Register(g)
	exec := execution.New(sched, cas, fe.LookupActionResult, log)
	keys, err := invocation.ParseAll(sc.Fairness.Keys)
	if err != nil {
		return nil, fmt.Errorf("scheduler.fairness.keys: %w", err)
	}
	exec.SetInvocationKeys(keys, sc.Fairness.UserHeader)
	ws := execution.NewWorkerService(sched)
	ws.UpdateActionCache = fe.StoreActionResult
	admin := execution.NewAdminService(sched)
	admin.KeyNames = exec.KeyNames
	admin.Logger = log
	registerSchedulerServices(g, exec, ws, admin)
	cf := controlsFile{path: filepath.Join(cfg.DataDir, "scheduler", "worker-controls.json")}
	controls, err := cf.load()
	if err != nil {
		return nil, fmt.Errorf("loading the worker controls: %w", err)
	}
	sched.RestoreWorkerControls(controls)
	admin.SaveWorkerControls = cf.save

	if sec.authz != nil {
		sec.authz.OperationInstance = func(name string) (string, bool) {
			st, _, err := sched.Watch(name)
			return st.Instance, err == nil
		}
	}
	obs.attach(g, exec, ws)
	obs.markServices(g)

	s = &Server{cfg: cfg, log: log, grpc: g, Frontend: fe, Scheduler: sched, exec: exec, admin: admin, sec: sec, obs: obs, dataDir: lock}
	if s.grpcLis, err = net.Listen("tcp", cfg.Listen); err != nil {
		return nil, fmt.Errorf("listen (gRPC) on %s: %w; pick a free address with --listen", cfg.Listen, err)
	}
	if cfg.HTTPListen != "" {
		if s.httpLis, err = net.Listen("tcp", cfg.HTTPListen); err != nil {
			s.grpcLis.Close()
			return nil, fmt.Errorf("listen (HTTP) on %s: %w; pick a free address with --http-listen", cfg.HTTPListen, err)
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		handlePprof(mux)
		pages := &statusPages{sched: sched, keys: exec.KeyNames,
			page: status.New(sched, admin, cas, exec.KeyNames, status.Options{Refresh: cfg.Status.Refresh.D(), Logger: log, Policy: sec.statusPolicy()})}
		handleStatus(mux, func() *statusPages { return pages })
		mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/plain")
			fmt.Fprintln(w, "ok")
		})
		s.httpLis = sec.httpListener(s.httpLis)
		// The HTTP server's own errors (TLS handshakes, bad requests) go
		// to the structured log, not the standard logger.
		s.http = &http.Server{Handler: sec.httpHandler(mux), ReadHeaderTimeout: 10 * time.Second,
			ErrorLog: slog.NewLogLogger(log.With("component", "http").Handler(), slog.LevelWarn)}
	}
	// Last: restore the scheduler's state (the store locks it, so a
	// second server on the same data fails here, after its ports).
	state, err := openStateStore(context.Background(), cfg)
	if err != nil {
		s.closeListeners()
		return nil, fmt.Errorf("opening the scheduler's state store (scheduler.store): %w", err)
	}
	registerStateStoreMetrics(reg, cfg, state)
	if s.lost, err = leadAlone(state, s.GRPCAddr()); err != nil {
		state.Close()
		s.closeListeners()
		return nil, err
	}
	stateCtx, stopState := context.WithCancel(context.Background())
	// With the memory backend nothing survives a restart, so the
	// scheduler keeps no journal at all (encoding every change into a
	// store nobody reads cost ~20% of its CPU per action); the store
	// still holds the quotas while the process runs.
	if cfg.Scheduler.Store.Backend != "memory" {
		if err := sched.Attach(stateCtx, state); err != nil {
			stopState()
			state.Close()
			s.closeListeners()
			return nil, fmt.Errorf("restoring the scheduler's state: %w", err)
		}
		logRestored(log, sched)
	}
	// Quotas are in the state store (an older quotas.json moves there).
	if err := restoreQuotas(stateCtx, sched, state, filepath.Join(cfg.DataDir, "scheduler", "quotas.json"), log); err != nil {
		stopState()
		<-sched.Stopped()
		state.Close()
		s.closeListeners()
		return nil, fmt.Errorf("restoring the quotas: %w", err)
	}
	admin.SaveQuotas = quotaState{store: state}.save
	s.state, s.stopState = state, stopState
	return s, nil
}

// schedulerConfig is the scheduler's part of cfg; it logs to log.
func schedulerConfig(cfg config.Config, log *slog.Logger) scheduler.Config {
	sc := cfg.Scheduler
	return scheduler.Config{
		HeartbeatInterval: sc.HeartbeatInterval.D(),
		HeartbeatTimeout:  sc.HeartbeatTimeout.D(),
		MaxAttempts:       sc.MaxAttempts,
		CallerGrace:       sc.CallerGrace.D(),
		Retention:         sc.Retention.D(),
		Queues:            Queues(sc.Queues),
		UnsatisfiableWait: sc.UnsatisfiableWait.D(),
		StartupGrace:      sc.StartupGrace.D(),
		PriorityHalving:   sc.Fairness.PriorityHalving,
		Stickiness:        durations(sc.Fairness.Stickiness),
		Labels:            labels(sc.Labels),
		Cohorts:           cohorts(sc.Cohorts),
		PreemptionDelay:   sc.PreemptionDelay.D(),
		Preemption:        scheduler.PreemptionMode(sc.Preemption),
		MaxSuspend:        sc.MaxSuspend.D(),
		Logger:            log,
	}
}

func labels(ls []config.LabelConfig) []scheduler.Label {
	out := make([]scheduler.Label, len(ls))
	for i, l := range ls {
		out[i].Name = l.Name
		for k, v := range l.Properties {
			out[i].Properties = append(out[i].Properties, platform.Property{Name: k, Value: v})
		}
		out[i].Properties.Sort()
	}
	return out
}

func cohorts(cs []config.CohortConfig) []scheduler.Cohort {
	out := make([]scheduler.Cohort, len(cs))
	for i, c := range cs {
		out[i] = scheduler.Cohort{Name: c.Name, Labels: c.Labels}
	}
	return out
}

func durations(ds []config.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d.D()
	}
	return out
}

func (s *Server) closeListeners() {
	s.grpcLis.Close()
	if s.httpLis != nil {
		s.httpLis.Close()
	}
}

// GRPCAddr is the bound gRPC address.
func (s *Server) GRPCAddr() string { return s.grpcLis.Addr().String() }

// HTTPAddr is the bound HTTP address, or "" if disabled.
func (s *Server) HTTPAddr() string {
	if s.httpLis == nil {
		return ""
	}
	return s.httpLis.Addr().String()
}

// Run serves until ctx is cancelled, then stops gracefully.
func (s *Server) Run(ctx context.Context) error {
	errc := make(chan error, 2)
	go func() { errc <- s.grpc.Serve(s.grpcLis) }()
	if s.sec.internal != nil {
		go s.grpc.Serve(s.sec.internal) // ends with GracefulStop
	}
	if s.http != nil {
		go func() {
			if err := s.http.Serve(s.httpLis); !errors.Is(err, http.ErrServerClosed) {
				errc <- err
			}
		}()
	}
	s.log.Info("gantry serving", "grpc", s.GRPCAddr(), "http", s.HTTPAddr(), "data_dir", s.cfg.DataDir)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go s.Scheduler.Run(ctx, 250*time.Millisecond)
	var workerDone chan error // nil (never ready) without an embedded worker
	if s.cfg.Worker.Enabled {
		workerDone = make(chan error, 1)
		go func() { workerDone <- s.runEmbeddedWorker(ctx) }()
	}
	var err error
	select {
	case <-ctx.Done():
		embedded := ""
		if s.cfg.Worker.Enabled {
			embedded = embeddedWorkerID(s.cfg)
		}
		logStopping(s.log, s.Scheduler, embedded)
	case err = <-errc:
	case <-s.lost:
		s.grpc.Stop() // no more answers from a deposed scheduler
		err = ErrLostLeadership
	case err = <-workerDone:
		workerDone = nil
		if err != nil {
			err = fmt.Errorf("embedded worker: %w", err)
		}
	}
	cancel()
	if workerDone != nil {
		<-workerDone
	}
	s.Stop()
	return err
}

// runEmbeddedWorker runs a worker in this process that reaches the
// scheduler over the server's own gRPC port, like any other worker.
func (s *Server) runEmbeddedWorker(ctx context.Context) error {
	return runEmbedded(ctx, func() (*grpc.ClientConn, error) { return s.sec.dialEmbedded(s.GRPCAddr()) }, s.cfg, s.log, s.obs.embeddedWorker)
}

// runEmbedded runs a process's embedded worker until ctx ends. When an
// operator terminates the worker, the process keeps serving without it:
// runEmbedded then waits for ctx and returns nil.
func runEmbedded(ctx context.Context, dial func() (*grpc.ClientConn, error), cfg config.Config, log *slog.Logger, prepare func(*worker.Worker) error) error {
	err := runWorker(ctx, dial, cfg, log, prepare)
	if err != nil || ctx.Err() != nil {
		return err
	}
	log.Info("the embedded worker was terminated; the server keeps running without it (restart the server to get it back)", "worker", cfg.Worker.ID)
	<-ctx.Done()
	return nil
}

// runWorker runs the configured worker over the connection dial makes.
// It returns when ctx ends, or when an operator terminated the worker.
// prepare, if not nil, is called with the worker before it runs.
func runWorker(ctx context.Context, dial func() (*grpc.ClientConn, error), cfg config.Config, log *slog.Logger, prepare func(*worker.Worker) error) error {
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
	w, err := worker.New(conn, WorkerConfig(wc, log))
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
		WorkDir: wc.WorkDir, CacheMaxBytes: int64(wc.CacheMaxSize), Wrapper: wc.Wrapper, Logger: log,
		ProcessWrappers: wc.ProcessWrappers, Queues: wc.Queues, Resources: wc.Resources, Instances: wc.Instances,
		MinFreeDisk: int64(wc.MinFreeDisk), MaxFileSize: int64(wc.MaxFileSize),
	}
}

// dialAddr turns a listen address into one to dial: a wildcard host
// becomes loopback.
func dialAddr(listen string) string {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return listen
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port)
}

// stopPorts shuts down the HTTP server (if any) and the gRPC server,
// giving in-flight calls a few seconds.
func stopPorts(h *http.Server, g *grpc.Server) {
	if h != nil {
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		h.Shutdown(sctx)
		cancel()
	}
	done := make(chan struct{})
	go func() { g.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		g.Stop()
	}
}

// Stop shuts the server down, giving in-flight calls a few seconds.
func (s *Server) Stop() {
	s.obs.notServing()
	stopPorts(s.http, s.grpc)
	s.closeState.Do(func() {
		s.stopState()
		<-s.Scheduler.Stopped()
		if err := s.state.Close(); err != nil {
			s.log.Error("closing the scheduler's state store", "err", err)
		}
		s.obs.stop()
		s.dataDir.Release()
	})
}

func openCAS(cfg config.Config) (blobstore.Store, error) {
	c := cfg.Storage.CAS
	if c.Backend == "memory" {
		return blobstore.NewMemory(int64(c.MaxSize)), nil
	}
	s, err := blobstore.NewDisk(filepath.Join(cfg.DataDir, "cas"), blobstore.DiskOptions{MaxBytes: int64(c.MaxSize), Fsync: c.Fsync, PackThreshold: int64(c.PackThreshold), SegmentSize: int64(c.SegmentSize), DirectIOThreshold: int64(c.DirectIOThreshold)})
	if err != nil {
		return nil, fmt.Errorf("opening the CAS under %s: %w", cfg.DataDir, err)
	}
	return s, nil
}

func openAC(cfg config.Config) (actioncache.Store, error) {
	c := cfg.Storage.ActionCache
	if c.Backend == "memory" {
		return actioncache.NewMemory(int(c.MaxSize / 1024)), nil
	}
	s, err := actioncache.NewDisk(filepath.Join(cfg.DataDir, "ac"), int64(c.MaxSize))
	if err != nil {
		return nil, fmt.Errorf("opening the action cache under %s: %w", cfg.DataDir, err)
	}
	return s, nil
}

// Queues converts configured provision queues.
func Queues(qs []config.QueueConfig) []platform.Queue {
	out := make([]platform.Queue, 0, len(qs))
	for _, q := range qs {
		pq := platform.Queue{Name: q.Name, AllowUnmatched: q.AllowUnmatched}
		for k, vs := range q.Properties {
			for _, v := range vs {
				pq.Properties = append(pq.Properties, platform.Property{Name: k, Value: v})
			}
		}
		pq.Properties.Sort()
		out = append(out, pq)
	}
	return out
}

// Reload applies the parts of a new configuration that can change while
// running: the provision queues and the fairness keys. Queued work stays
// where it is.
func (s *Server) Reload(cfg config.Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	keys, err := invocation.ParseAll(cfg.Scheduler.Fairness.Keys)
	if err != nil {
		return err
	}
	if err := s.sec.reload(cfg, s.log); err != nil {
		return err
	}
	s.Scheduler.SetQueues(Queues(cfg.Scheduler.Queues))
	logQueues(s.log, Queues(cfg.Scheduler.Queues))
	s.exec.SetInvocationKeys(keys, cfg.Scheduler.Fairness.UserHeader)
	s.log.Info("configuration reloaded", "queues", len(cfg.Scheduler.Queues), "fairness_keys", cfg.Scheduler.Fairness.Keys)
	return nil
}
