package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"

	"github.com/gantry-build/gantry/internal/client"
	"github.com/gantry-build/gantry/internal/config"
	"github.com/gantry-build/gantry/internal/execution"
	"github.com/gantry-build/gantry/internal/frontend"
	"github.com/gantry-build/gantry/internal/invocation"
	"github.com/gantry-build/gantry/internal/scheduler"
	"github.com/gantry-build/gantry/internal/statestore"
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

func clusterGRPCOptions(cfg config.Config) []grpc.ServerOption {
	maxMsg := cfg.GRPCMaxMessageSize()
	return []grpc.ServerOption{
		grpc.MaxRecvMsgSize(maxMsg),
		grpc.MaxSendMsgSize(maxMsg),
		grpc.InitialWindowSize(8 << 20),
		grpc.InitialConnWindowSize(16 << 20),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
	}
}

// clusterHTTP serves /healthz (with state's answer) and /metrics.
func clusterHTTP(addr string, reg *prometheus.Registry, state func() string) (net.Listener, *http.Server, error) {
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
	return lis, &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}, nil
}

func addrOf(l net.Listener) string {
	if l == nil {
		return ""
	}
	return l.Addr().String()
}

// SchedulerNode is one of the scheduler processes sharing a PostgreSQL.
// It stands by until it takes the leadership, then restores the state
// from the database and serves Execution, Operations, the worker
// protocol and Admin on its gRPC port (to frontends). It reads actions
// from and writes results to the CAS and action cache of cluster.cas.
type SchedulerNode struct {
	cfg       config.Config
	log       *slog.Logger
	store     *statestore.Postgres
	lis       net.Listener
	httpLis   net.Listener
	http      *http.Server
	casConn   *grpc.ClientConn
	advertise string
	reg       *prometheus.Registry

	leading atomic.Bool
	term    atomic.Int64
	sched   atomic.Pointer[scheduler.Scheduler]
}

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
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	store, err := statestore.OpenPostgres(ctx, cfg.Scheduler.Store.DSN)
	if err != nil {
		return nil, fmt.Errorf("opening the scheduler's state store (scheduler.store): %w", err)
	}
	n := &SchedulerNode{cfg: cfg, log: log, store: store, reg: prometheus.NewRegistry()}
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
		return nil, err
	}
	if n.casConn, err = client.Dial(cfg.Cluster.CAS); err != nil {
		return fail(fmt.Errorf("cluster.cas: %w", err))
	}
	if n.lis, err = net.Listen("tcp", cfg.Listen); err != nil {
		return fail(fmt.Errorf("listen (gRPC) on %s: %w; pick a free address with --listen", cfg.Listen, err))
	}
	n.advertise = cfg.Cluster.Advertise
	if n.advertise == "" {
		n.advertise = dialAddr(n.lis.Addr().String())
	}
	n.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	n.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "gantry_scheduler_leader", Help: "1 while this scheduler process leads, 0 while it stands by."},
		func() float64 {
			if n.leading.Load() {
				return 1
			}
			return 0
		}))
	for _, g := range []struct {
		name, help string
		get        func(scheduler.Stats) int
	}{
		{"gantry_scheduler_queued_actions", "Actions waiting for a worker (0 on a standby).", func(s scheduler.Stats) int { return s.Queued }},
		{"gantry_scheduler_leased_actions", "Actions held by workers (0 on a standby).", func(s scheduler.Stats) int { return s.Leased }},
		{"gantry_scheduler_operations", "Operations known (0 on a standby).", func(s scheduler.Stats) int { return s.Operations }},
		{"gantry_scheduler_workers", "Registered workers (0 on a standby).", func(s scheduler.Stats) int { return s.Workers }},
	} {
		get := g.get
		n.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: g.name, Help: g.help}, func() float64 {
			if s := n.sched.Load(); s != nil {
				return float64(get(s.Stats()))
			}
			return 0
		}))
	}
	if n.httpLis, n.http, err = clusterHTTP(cfg.HTTPListen, n.reg, n.state); err != nil {
		return fail(err)
	}
	return n, nil
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

// Run stands by until this node leads, then serves until ctx ends (nil)
// or the leadership is lost (ErrLostLeadership).
func (n *SchedulerNode) Run(ctx context.Context) error {
	defer n.casConn.Close()
	if n.http != nil {
		go n.http.Serve(n.httpLis)
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			n.http.Shutdown(sctx)
			cancel()
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
			n.lis.Close()
			n.store.Close()
			return nil
		case <-time.After(interval):
		}
	}
	return n.lead(ctx, term, lost)
}

// lead restores the state and serves until ctx ends or lost closes.
func (n *SchedulerNode) lead(ctx context.Context, term int64, lost <-chan struct{}) error {
	start := time.Now()
	cfg := n.cfg
	sched := scheduler.New(schedulerConfig(cfg), scheduler.RealClock{})
	stateCtx, stopState := context.WithCancel(context.Background())
	defer n.store.Close()
	if err := sched.Attach(stateCtx, n.store); err != nil {
		stopState()
		n.lis.Close()
		return fmt.Errorf("restoring the scheduler's state from PostgreSQL: %w", err)
	}
	stopJournal := func() { stopState(); <-sched.Stopped() }
	if err := restoreQuotas(stateCtx, sched, n.store, "", n.log); err != nil {
		stopJournal()
		n.lis.Close()
		return fmt.Errorf("restoring the quotas: %w", err)
	}
	cas := newRemoteCAS(n.casConn, int64(cfg.Storage.MaxBatchSize))
	ac := remoteAC{ac: repb.NewActionCacheClient(n.casConn)}
	g := grpc.NewServer(clusterGRPCOptions(cfg)...)
	exec := execution.New(sched, cas, ac.lookup, n.log)
	keys, _ := invocation.ParseAll(cfg.Scheduler.Fairness.Keys) // checked in NewSchedulerNode
	exec.SetInvocationKeys(keys, cfg.Scheduler.Fairness.UserHeader)
	exec.Register(g)
	ws := execution.NewWorkerService(sched)
	ws.UpdateActionCache = ac.store
	ws.Attach(g)
	admin := execution.NewAdminService(sched)
	admin.KeyNames = exec.KeyNames
	admin.SaveQuotas = quotaState{store: n.store}.save
	admin.Logger = n.log
	admin.Attach(g)

	n.sched.Store(sched)
	n.term.Store(term)
	n.leading.Store(true)
	st := sched.Stats()
	n.log.Info("gantry scheduler leading", "term", term, "advertise", n.advertise, "restored_operations", st.Operations, "queued", st.Queued, "leased", st.Leased, "took", time.Since(start))
	serveErr := make(chan error, 1)
	go func() { serveErr <- g.Serve(n.lis) }()
	runCtx, stopRun := context.WithCancel(ctx)
	go sched.Run(runCtx, 250*time.Millisecond)

	var err error
	select {
	case <-ctx.Done():
		stopRun()
		done := make(chan struct{})
		go func() { g.GracefulStop(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			g.Stop()
		}
	case <-lost:
		// Deposed: no more answers from this process. Every call in
		// flight ends with UNAVAILABLE, and clients retry through a
		// frontend, which finds the new leader.
		stopRun()
		g.Stop()
		err = ErrLostLeadership
		n.log.Error("scheduler leadership lost; stopped serving", "term", term)
	case err = <-serveErr:
		stopRun()
		err = fmt.Errorf("serving gRPC: %w", err)
	}
	n.leading.Store(false)
	n.sched.Store(nil)
	stopJournal()
	return err
}

// FrontendNode serves the CAS, action cache, ByteStream and
// Capabilities from its own stores, like the all-in-one server, and
// forwards every other call (Execution, Operations, the worker
// protocol, Admin) to the leading scheduler it finds in PostgreSQL.
// Clients and workers use its address only.
type FrontendNode struct {
	cfg     config.Config
	log     *slog.Logger
	store   *statestore.Postgres
	grpc    *grpc.Server
	lis     net.Listener
	httpLis net.Listener
	http    *http.Server
	leaders *leaderConns
	// Frontend is the storage half.
	Frontend *frontend.Server
}

// NewFrontendNode opens the stores and binds the ports.
func NewFrontendNode(cfg config.Config, log *slog.Logger) (*FrontendNode, error) {
	cfg.Role = config.RoleFrontend
	if err := cfg.Validate(); err != nil {
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
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	registerCASMetrics(reg, cfg, cas)
	fe := frontend.New(cas, ac, frontend.Options{
		MaxBatchSize:      int64(cfg.Storage.MaxBatchSize),
		ReadChunkSize:     int(cfg.Storage.ReadChunkSize),
		InlineLimit:       int64(cfg.Storage.InlineLimit),
		CompletenessCheck: cfg.Storage.CompletenessCheck,
		ExecEnabled:       true,
		Logger:            log,
	})
	lc := newLeaderConns(store, cfg.Cluster.TakeoverInterval.D(), cfg.GRPCMaxMessageSize(), log)
	opts := append(clusterGRPCOptions(cfg),
		grpc.ForceServerCodecV2(newRawCodec()),
		grpc.UnknownServiceHandler(lc.handler),
		grpc.ReadBufferSize(256<<10),
		grpc.WriteBufferSize(256<<10),
		grpc.SharedWriteBuffer(true))
	g := grpc.NewServer(opts...)
	fe.Register(g)
	n := &FrontendNode{cfg: cfg, log: log, store: store, grpc: g, leaders: lc, Frontend: fe}
	if n.lis, err = net.Listen("tcp", cfg.Listen); err != nil {
		store.Close()
		return nil, fmt.Errorf("listen (gRPC) on %s: %w; pick a free address with --listen", cfg.Listen, err)
	}
	if n.httpLis, n.http, err = clusterHTTP(cfg.HTTPListen, reg, n.state); err != nil {
		n.lis.Close()
		store.Close()
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

// Run serves until ctx ends.
func (n *FrontendNode) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	lcDone := make(chan struct{})
	go func() { n.leaders.run(ctx); close(lcDone) }()
	errc := make(chan error, 2)
	go func() { errc <- n.grpc.Serve(n.lis) }()
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
		go func() { workerDone <- runWorker(ctx, plainDial(n.GRPCAddr()), n.cfg, n.log, nil) }()
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
	stopPorts(n.http, n.grpc)
	cancel()
	<-lcDone
	n.store.Close()
	return err
}
