package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"

	"github.com/gantry-build/gantry/internal/client"
	"github.com/gantry-build/gantry/internal/config"
	"github.com/gantry-build/gantry/internal/dirlock"
	"github.com/gantry-build/gantry/internal/execution"
	"github.com/gantry-build/gantry/internal/frontend"
	"github.com/gantry-build/gantry/internal/invocation"
	"github.com/gantry-build/gantry/internal/scheduler"
	"github.com/gantry-build/gantry/internal/statestore"
	"github.com/gantry-build/gantry/internal/status"
)

// Multi-node: `gantry serve --role scheduler` and `--role frontend`.
// See docs/OPERATIONS.md ("Several nodes") for the topology.

// ErrLostLeadership ends a scheduler node that was deposed: it stops
// serving at once and exits, and its supervisor starts it again as a
// standby.
var ErrLostLeadership = errors.New("this scheduler lost the leadership (its PostgreSQL lock session ended or another scheduler took over); it stopped serving, start it again to stand by")

// Node is a process of a multi-node deployment.
type Node interface {
	GRPCAddr() string
	HTTPAddr() string
	Run(ctx context.Context) error
	// Reload applies what a new configuration may change while the
	// process runs (on SIGHUP).
	Reload(cfg config.Config) error
}

// NewNode builds the process for cfg.Role: the all-in-one Server, a
// SchedulerNode or a FrontendNode.
func NewNode(cfg config.Config, log *slog.Logger) (Node, error) {
	switch cfg.Role {
	case config.RoleScheduler:
		return NewSchedulerNode(cfg, log)
	case config.RoleFrontend:
		return NewFrontendNode(cfg, log)
	default:
		return New(cfg, log)
	}
}

// leadAlone makes an all-in-one server on PostgreSQL the leader, so that
// it is fenced like a scheduler node and a second server (or a scheduler
// node) on the same database cannot run beside it.
func leadAlone(state statestore.Store, grpcAddr string) (<-chan struct{}, error) {
	pg, ok := state.(*statestore.Postgres)
	if !ok {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, lost, err := pg.Lead(ctx, dialAddr(grpcAddr))
	if errors.Is(err, statestore.ErrNotLeader) {
		li, _ := pg.Leader(ctx)
		return nil, fmt.Errorf("another Gantry scheduler (at %s) uses this PostgreSQL database (scheduler.store.dsn): stop it, or run this one with --role scheduler to stand by", li.Address)
	}
	if err != nil {
		return nil, fmt.Errorf("taking the scheduler leadership on PostgreSQL: %w", err)
	}
	return lost, nil
}

// clusterGRPCOptions are the gRPC server options of both node roles:
// sizes, windows, keepalive, TLS (and the embedded worker's in-process
// connection), and the metrics interceptors first in the chain.
func clusterGRPCOptions(cfg config.Config, sec *security, obs *observability) []grpc.ServerOption {
	maxMsg := cfg.GRPCMaxMessageSize()
	return []grpc.ServerOption{
		grpc.MaxRecvMsgSize(maxMsg),
		grpc.MaxSendMsgSize(maxMsg),
		grpc.InitialWindowSize(8 << 20),
		grpc.InitialConnWindowSize(16 << 20),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
		grpc.Creds(sec.creds()),
		grpc.ChainUnaryInterceptor(obs.unary()...),
		grpc.ChainStreamInterceptor(obs.stream()...),
	}
}

// clusterHTTP serves /healthz (with state's answer), /metrics and
// /debug/pprof/, and the status pages if pages is not nil, with TLS and
// auth.http_require_token applied as on role all.
func clusterHTTP(addr string, reg *prometheus.Registry, state func() string, pages func() *statusPages, sec *security, log *slog.Logger) (net.Listener, *http.Server, error) {
	if addr == "" {
		return nil, nil, nil
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, fmt.Errorf("listen (HTTP) on %s: %w; pick a free address with --http-listen", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprintln(w, "ok", state())
	})
	handlePprof(mux)
	if pages != nil {
		handleStatus(mux, pages)
	}
	return sec.httpListener(lis), &http.Server{Handler: sec.httpHandler(mux), ReadHeaderTimeout: 10 * time.Second,
		ErrorLog: slog.NewLogLogger(log.With("component", "http").Handler(), slog.LevelWarn)}, nil
}

func addrOf(l net.Listener) string {
	if l == nil {
		return ""
	}
	return l.Addr().String()
}

// schedulerCallHeader marks a scheduler node's calls to the frontend's
// CAS and action cache, which the frontend's metrics count apart from
// those of clients and workers (metrics.Storage.FromScheduler).
const schedulerCallHeader = "gantry-scheduler-call"

// markSchedulerCalls are the dial options that mark every call.
func markSchedulerCalls() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoke grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			return invoke(metadata.AppendToOutgoingContext(ctx, schedulerCallHeader, "1"), method, req, reply, cc, opts...)
		}),
		grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, stream grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			return stream(metadata.AppendToOutgoingContext(ctx, schedulerCallHeader, "1"), desc, cc, method, opts...)
		}),
	}
}

// isSchedulerCall reports whether a call to a frontend is a scheduler
// node's. With auth on, the mark counts only from a caller that
// authenticates as one of cluster.scheduler_identities: anyone else
// could set it to hide its bytes from the CAS counters. With auth off
// every caller is trusted with everything, this mark included.
func (s *security) isSchedulerCall(ctx context.Context) bool {
	if len(metadata.ValueFromIncomingContext(ctx, schedulerCallHeader)) == 0 {
		return false
	}
	return s.authz == nil || s.authz.IsScheduler(ctx)
}

// SchedulerNode is one of the scheduler processes sharing a PostgreSQL.
// Its gRPC port serves health and reflection from the start; it stands
// by until it takes the leadership, then restores the state from the
// database and serves Execution, Operations, the worker protocol and
// Admin there too (to frontends). It reads actions from and writes
// results to the CAS and action cache of cluster.cas.
type SchedulerNode struct {
	cfg       config.Config
	log       *slog.Logger
	store     *statestore.Postgres
	lis       net.Listener
	httpLis   net.Listener
	http      *http.Server
	grpc      *grpc.Server
	casConn   *grpc.ClientConn
	advertise string
	reg       *prometheus.Registry
	sec       *security
	obs       *observability
	services  *termServices
	// idle is an empty scheduler, what a standby's metrics read.
	idle     *scheduler.Scheduler
	stopOnce sync.Once

	leading atomic.Bool
	term    atomic.Int64
	sched   atomic.Pointer[scheduler.Scheduler]
	// pages are the status pages of the term this node leads; nil while
	// it stands by.
	pages atomic.Pointer[statusPages]
	// configFile is what the Admin ReloadConfig control re-reads ("":
	// it refuses); set before Run.
	configFile string
}

// SetConfigFile names the config file the admin ReloadConfig control (and
// the status page's reload button) re-reads while this node leads;
// without it they refuse.
func (n *SchedulerNode) SetConfigFile(path string) { n.configFile = path }

// NewSchedulerNode connects to the database and the CAS node and binds
// the ports; Run stands by and leads.
func NewSchedulerNode(cfg config.Config, log *slog.Logger) (*SchedulerNode, error) {
	cfg.Role = config.RoleScheduler
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if _, err := invocation.ParseAll(cfg.Scheduler.Fairness.Keys); err != nil {
		return nil, fmt.Errorf("scheduler.fairness.keys: %w", err)
	}
	sec, err := newSecurity(cfg)
	if err != nil {
		return nil, err
	}
	if err := checkClusterClient(cfg); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	store, err := statestore.OpenPostgres(ctx, cfg.Scheduler.Store.DSN)
	if err != nil {
		return nil, fmt.Errorf("opening the scheduler's state store (scheduler.store): %w", err)
	}
	logQueues(log, Queues(cfg.Scheduler.Queues))
	n := &SchedulerNode{cfg: cfg, log: log, store: store, reg: prometheus.NewRegistry(), sec: sec,
		services: newTermServices(), idle: scheduler.New(schedulerConfig(cfg, log), scheduler.RealClock{})}
	registerStateStoreMetrics(n.reg, cfg, store)
	fail := func(err error) (*SchedulerNode, error) {
		store.Close()
		if n.casConn != nil {
			n.casConn.Close()
		}
		if n.lis != nil {
			n.lis.Close()
		}
		if n.httpLis != nil {
			n.httpLis.Close()
		}
		if n.obs != nil {
			n.obs.stop()
		}
		return nil, err
	}
	if n.obs, err = newObservability(cfg, n.reg, n.current, nil); err != nil {
		return fail(err)
	}
	n.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "gantry_scheduler_leader", Help: "1 while this scheduler process leads, 0 while it stands by."},
		func() float64 {
			if n.leading.Load() {
				return 1
			}
			return 0
		}))
	if n.casConn, err = client.DialSecure(cfg.Cluster.CAS, clusterSecurity(cfg), markSchedulerCalls()...); err != nil {
		return fail(fmt.Errorf("cluster.cas and cluster.client: %w", err))
	}
	if n.lis, err = net.Listen("tcp", cfg.Listen); err != nil {
		return fail(fmt.Errorf("listen (gRPC) on %s: %w; pick a free address with --listen", cfg.Listen, err))
	}
	n.advertise = cfg.Cluster.Advertise
	if n.advertise == "" {
		n.advertise = dialAddr(n.lis.Addr().String())
	}
	if sec.authz != nil {
		sec.authz.OperationInstance = n.operationInstance
	}
	n.grpc = grpc.NewServer(append(clusterGRPCOptions(cfg, sec, n.obs),
		// Authentication and authorization (after the metrics).
		grpc.ChainUnaryInterceptor(sec.schedulerUnary()...),
		grpc.ChainStreamInterceptor(sec.schedulerStream()...))...)
	n.services.register(n.grpc)
	n.obs.register(n.grpc)
	n.obs.markServices(n.grpc)
	n.obs.setServing(healthpb.HealthCheckResponse_NOT_SERVING, serviceNames(n.services.descs)...)
	if n.httpLis, n.http, err = clusterHTTP(cfg.HTTPListen, n.reg, n.state, n.pages.Load, sec, log); err != nil {
		return fail(err)
	}
	return n, nil
}

// current is the scheduler whose state the metrics export: the
// leader's, or an empty one while standing by.
func (n *SchedulerNode) current() *scheduler.Scheduler {
	if s := n.sched.Load(); s != nil {
		return s
	}
	return n.idle
}

// operationInstance is the authorizer's OperationInstance.
func (n *SchedulerNode) operationInstance(name string) (string, bool) {
	s := n.sched.Load()
	if s == nil {
		return "", false
	}
	st, _, err := s.Watch(name)
	return st.Instance, err == nil
}

func (n *SchedulerNode) state() string {
	if n.leading.Load() {
		return fmt.Sprintf("leader term %d", n.term.Load())
	}
	return "standby"
}

// GRPCAddr is the bound gRPC address.
func (n *SchedulerNode) GRPCAddr() string { return n.lis.Addr().String() }

// HTTPAddr is the bound HTTP address, or "".
func (n *SchedulerNode) HTTPAddr() string { return addrOf(n.httpLis) }

// Advertise is the address published when this node leads.
func (n *SchedulerNode) Advertise() string { return n.advertise }

// Leading reports whether this node leads now.
func (n *SchedulerNode) Leading() bool { return n.leading.Load() }

// Scheduler is the scheduler core while this node leads, else nil.
func (n *SchedulerNode) Scheduler() *scheduler.Scheduler { return n.sched.Load() }

// Reload re-reads the TLS files, the tokens and keys, and the policy
// (SIGHUP); other changes need a restart.
func (n *SchedulerNode) Reload(cfg config.Config) error {
	cfg.Role = config.RoleScheduler
	if err := cfg.Validate(); err != nil {
		return err
	}
	return n.sec.reload(cfg, n.log)
}

// stopServing reports NOT_SERVING and stops the ports, giving calls in
// flight a few seconds.
func (n *SchedulerNode) stopServing() {
	n.stopOnce.Do(func() {
		n.obs.notServing()
		stopPorts(n.http, n.grpc)
	})
}

// Run stands by until this node leads, then serves until ctx ends (nil)
// or the leadership is lost (ErrLostLeadership).
func (n *SchedulerNode) Run(ctx context.Context) error {
	defer n.casConn.Close()
	defer n.obs.stop()
	defer n.store.Close()
	defer n.stopServing()
	serveErr := make(chan error, 2)
	go func() { serveErr <- n.grpc.Serve(n.lis) }()
	if n.http != nil {
		go func() {
			if err := n.http.Serve(n.httpLis); !errors.Is(err, http.ErrServerClosed) {
				serveErr <- err
			}
		}()
	}
	n.log.Info("gantry scheduler standing by", "grpc", n.GRPCAddr(), "advertise", n.advertise, "http", n.HTTPAddr())
	var (
		term int64
		lost <-chan struct{}
		err  error
	)
	interval := n.cfg.Cluster.TakeoverInterval.D()
	for logged := false; ; {
		lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		term, lost, err = n.store.Lead(lctx, n.advertise)
		cancel()
		if err == nil {
			break
		}
		if !errors.Is(err, statestore.ErrNotLeader) && ctx.Err() == nil && !logged {
			n.log.Warn("cannot try for the scheduler leadership; retrying", "err", err)
			logged = true
		}
		select {
		case <-ctx.Done():
			return nil
		case err := <-serveErr:
			return fmt.Errorf("serving the scheduler's ports: %w", err)
		case <-time.After(interval):
		}
	}
	return n.lead(ctx, term, lost, serveErr)
}

// lead restores the state and serves until ctx ends or lost closes.
func (n *SchedulerNode) lead(ctx context.Context, term int64, lost <-chan struct{}, serveErr <-chan error) error {
	start := time.Now()
	cfg := n.cfg
	sched := scheduler.New(schedulerConfig(cfg, n.log), scheduler.RealClock{})
	stateCtx, stopState := context.WithCancel(context.Background())
	if err := sched.Attach(stateCtx, n.store); err != nil {
		stopState()
		return fmt.Errorf("restoring the scheduler's state from PostgreSQL: %w", err)
	}
	logRestored(n.log, sched)
	stopJournal := func() { stopState(); <-sched.Stopped() }
	if err := restoreQuotas(stateCtx, sched, n.store, "", n.log); err != nil {
		stopJournal()
		return fmt.Errorf("restoring the quotas: %w", err)
	}
	cas := newRemoteCAS(n.casConn, int64(cfg.Storage.MaxBatchSize))
	ac := remoteAC{ac: repb.NewActionCacheClient(n.casConn)}
	exec := execution.New(sched, cas, ac.lookup, n.log)
	keys, _ := invocation.ParseAll(cfg.Scheduler.Fairness.Keys) // checked in NewSchedulerNode
	exec.SetInvocationKeys(keys, cfg.Scheduler.Fairness.UserHeader)
	ws := execution.NewWorkerService(sched)
	ws.UpdateActionCache = ac.store
	admin := execution.NewAdminService(sched)
	admin.KeyNames = exec.KeyNames
	admin.SaveQuotas = quotaState{store: n.store}.save
	admin.Logger = n.log
	if n.configFile != "" {
		admin.Reload = reloadFrom(n.configFile, n.Reload)
	}
	n.obs.observe(exec, ws)
	impls := newServiceRecorder()
	registerSchedulerServices(impls, exec, ws, admin)

	n.pages.Store(&statusPages{sched: sched, keys: exec.KeyNames,
		page: status.New(sched, admin, cas, exec.KeyNames, status.Options{Refresh: cfg.Status.Refresh.D(), Logger: n.log, Policy: n.sec.statusPolicy()})})
	n.sched.Store(sched)
	n.term.Store(term)
	n.leading.Store(true)
	n.services.set(impls.impls)
	n.obs.setServing(healthpb.HealthCheckResponse_SERVING, serviceNames(impls.descs)...)
	st := sched.Stats()
	n.log.Info("gantry scheduler leading", "term", term, "advertise", n.advertise, "restored_operations", st.Operations, "queued", st.Queued, "leased", st.Leased, "took", time.Since(start))
	runCtx, stopRun := context.WithCancel(ctx)
	go sched.Run(runCtx, 250*time.Millisecond)

	var err error
	select {
	case <-ctx.Done():
		// Workers keep their actions and report them to the next leader.
		logStopping(n.log, sched, "")
		stopRun()
	case <-lost:
		// Deposed: no more answers from this process. Every call in
		// flight ends with UNAVAILABLE, and clients retry through a
		// frontend, which finds the new leader.
		stopRun()
		n.grpc.Stop()
		err = ErrLostLeadership
		n.log.Error("scheduler leadership lost; stopped serving", "term", term)
	case err = <-serveErr:
		stopRun()
		err = fmt.Errorf("serving the scheduler's ports: %w", err)
	}
	// Calls in flight finish before the journal stops.
	n.stopServing()
	n.services.set(nil)
	n.leading.Store(false)
	n.pages.Store(nil)
	n.sched.Store(nil)
	stopJournal()
	return err
}

// FrontendNode serves the CAS, action cache, ByteStream and
// Capabilities from its own stores, like the all-in-one server, and
// forwards every other call (Execution, Operations, the worker
// protocol, Admin) to the leading scheduler it finds in PostgreSQL.
// Clients and workers use its address only. With auth on, it
// authenticates every caller and authorizes the calls of its own
// services; the leading scheduler authorizes the forwarded ones, for
// the caller the frontend names (auth.ForwardedCallerHeader).
type FrontendNode struct {
	cfg     config.Config
	log     *slog.Logger
	store   *statestore.Postgres
	grpc    *grpc.Server
	lis     net.Listener
	httpLis net.Listener
	http    *http.Server
	leaders *leaderConns
	sec     *security
	obs     *observability
	// dataDir keeps other processes out of cfg.DataDir until Run ends.
	dataDir *dirlock.Lock
	// Frontend is the storage half.
	Frontend *frontend.Server
}

// NewFrontendNode opens the stores and binds the ports.
func NewFrontendNode(cfg config.Config, log *slog.Logger) (_ *FrontendNode, err error) {
	cfg.Role = config.RoleFrontend
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	lock, err := lockDataDir(cfg)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			lock.Release()
		}
	}()
	sec, err := newSecurity(cfg)
	if err != nil {
		return nil, err
	}
	if err := checkClusterClient(cfg); err != nil {
		return nil, err
	}
	cas, err := openCAS(cfg)
	if err != nil {
		return nil, err
	}
	ac, err := openAC(cfg)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	store, err := statestore.OpenPostgres(ctx, cfg.Scheduler.Store.DSN)
	if err != nil {
		return nil, fmt.Errorf("opening the PostgreSQL database where schedulers publish their leader (scheduler.store): %w", err)
	}
	reg := prometheus.NewRegistry()
	obs, err := newObservability(cfg, reg, nil, cas)
	if err != nil {
		store.Close()
		return nil, err
	}
	obs.storage.FromScheduler = sec.isSchedulerCall
	fe := frontend.New(cas, ac, frontend.Options{
		MaxBatchSize:      int64(cfg.Storage.MaxBatchSize),
		ReadChunkSize:     int(cfg.Storage.ReadChunkSize),
		InlineLimit:       int64(cfg.Storage.InlineLimit),
		CompletenessCheck: cfg.Storage.CompletenessCheck,
		ExecEnabled:       true,
		Logger:            log,
	})
	forwarded := schedulerServiceDescs()
	lc := newLeaderConns(store, cfg.Cluster.TakeoverInterval.D(), cfg.GRPCMaxMessageSize(), clusterSecurity(cfg), log)
	lc.finished = obs.outcomes.OperationDone
	// The forwarded services are SERVING while a leader is published.
	lc.onChange = func(published bool) {
		st := healthpb.HealthCheckResponse_NOT_SERVING
		if published {
			st = healthpb.HealthCheckResponse_SERVING
		}
		obs.setServing(st, serviceNames(forwarded)...)
	}
	local := map[string]bool{} // the services served here; filled before serving
	isLocal := func(fullMethod string) bool {
		svc, _, _ := strings.Cut(strings.TrimPrefix(fullMethod, "/"), "/")
		return local[svc]
	}
	g := grpc.NewServer(append(clusterGRPCOptions(cfg, sec, obs),
		grpc.ForceServerCodecV2(newRawCodec()),
		grpc.UnknownServiceHandler(lc.handler),
		grpc.ReadBufferSize(256<<10),
		grpc.WriteBufferSize(256<<10),
		grpc.SharedWriteBuffer(true),
		// Authentication and authorization (after the metrics).
		grpc.ChainUnaryInterceptor(sec.unary()...),
		grpc.ChainStreamInterceptor(sec.frontendStream(isLocal)...))...)
	fe.Register(g)
	obs.register(g, forwarded...)
	for name := range g.GetServiceInfo() {
		local[name] = true
	}
	obs.markServices(g)
	obs.setServing(healthpb.HealthCheckResponse_NOT_SERVING, serviceNames(forwarded)...)
	n := &FrontendNode{cfg: cfg, log: log, store: store, grpc: g, leaders: lc, sec: sec, obs: obs, dataDir: lock, Frontend: fe}
	if n.lis, err = net.Listen("tcp", cfg.Listen); err != nil {
		store.Close()
		obs.stop()
		return nil, fmt.Errorf("listen (gRPC) on %s: %w; pick a free address with --listen", cfg.Listen, err)
	}
	if n.httpLis, n.http, err = clusterHTTP(cfg.HTTPListen, reg, n.state, nil, sec, log); err != nil {
		n.lis.Close()
		store.Close()
		obs.stop()
		return nil, err
	}
	return n, nil
}

func (n *FrontendNode) state() string {
	_, term, _ := n.leaders.current()
	n.leaders.mu.Lock()
	addr := n.leaders.address
	n.leaders.mu.Unlock()
	return fmt.Sprintf("frontend; scheduler leader %q term %d", addr, term)
}

// GRPCAddr is the bound gRPC address.
func (n *FrontendNode) GRPCAddr() string { return n.lis.Addr().String() }

// HTTPAddr is the bound HTTP address, or "".
func (n *FrontendNode) HTTPAddr() string { return addrOf(n.httpLis) }

// Reload re-reads the TLS files, the tokens and keys, and the policy
// (SIGHUP); other changes need a restart.
func (n *FrontendNode) Reload(cfg config.Config) error {
	cfg.Role = config.RoleFrontend
	if err := cfg.Validate(); err != nil {
		return err
	}
	return n.sec.reload(cfg, n.log)
}

// Run serves until ctx ends.
func (n *FrontendNode) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	lcDone := make(chan struct{})
	go func() { n.leaders.run(ctx); close(lcDone) }()
	errc := make(chan error, 2)
	go func() { errc <- n.grpc.Serve(n.lis) }()
	if n.sec.internal != nil {
		go n.grpc.Serve(n.sec.internal) // ends with GracefulStop
	}
	if n.http != nil {
		go func() {
			if err := n.http.Serve(n.httpLis); !errors.Is(err, http.ErrServerClosed) {
				errc <- err
			}
		}()
	}
	n.log.Info("gantry frontend serving", "grpc", n.GRPCAddr(), "http", n.HTTPAddr(), "data_dir", n.cfg.DataDir)
	var workerDone chan error // nil (never ready) without an embedded worker
	if n.cfg.Worker.Enabled {
		workerDone = make(chan error, 1)
		dial := func() (*grpc.ClientConn, error) { return n.sec.dialEmbedded(n.GRPCAddr()) }
		go func() { workerDone <- runEmbedded(ctx, dial, n.cfg, n.log, n.obs.embeddedWorker) }()
	}
	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
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
	n.obs.notServing()
	stopPorts(n.http, n.grpc)
	cancel()
	<-lcDone
	n.store.Close()
	n.obs.stop()
	n.dataDir.Release()
	return err
}
