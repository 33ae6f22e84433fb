// Package server assembles a Gantry process of any role from its parts:
// stores, a scheduler, the forwarder to the leading scheduler, the
// embedded worker (roles.go); every role has the same gRPC server
// (grpcserver.go), HTTP port (httpserver.go), run loop and shutdown.
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

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/gantry-build/gantry/internal/asset"
	"github.com/gantry-build/gantry/internal/config"
	"github.com/gantry-build/gantry/internal/frontend"
	"github.com/gantry-build/gantry/internal/invocation"
	"github.com/gantry-build/gantry/internal/scheduler"
	"github.com/gantry-build/gantry/internal/statestore"
)

// Server is a Gantry process of the role its configuration names
// (config.Role): all in one, a scheduler node or a frontend node (see
// docs/OPERATIONS.md, "Several nodes").
type Server struct {
	cfg config.Config
	log *slog.Logger
	// latest is the configuration in force: cfg, or the last reloaded.
	latest  atomic.Pointer[config.Config]
	sec     *security
	obs     *observability
	terms   *terms
	parts   []part
	closers *closers
	// grpcOptions are the options every role's gRPC server has.
	grpcOptions []serverOption
	grpc        *grpc.Server
	grpcLis     net.Listener
	http        *http.Server // nil without an HTTP port
	httpLis     net.Listener
	stopOnce    sync.Once
	// Frontend is the storage half (nil on a scheduler node).
	Frontend *frontend.Server
}

// builder is what every part of a process is built with.
type builder struct {
	cfg     config.Config
	log     *slog.Logger
	reg     *prometheus.Registry
	sec     *security
	obs     *observability
	terms   *terms
	closers *closers
	// downloads are the Remote Asset API's recent failed fetches, shown
	// by the status pages of this process.
	downloads *asset.FailureLog
	// live holds the live output of actions in a process with a
	// scheduler (buildParts); nil in a frontend.
	live *liveOutput
	// logs serve the frontend's ByteStream calls on live output streams.
	logs frontend.LogStreams
}

// openClusterStore checks cluster.client (how this node reaches the
// others) and opens the PostgreSQL database of scheduler.store, which is
// what (named for errors) to this node.
func (b *builder) openClusterStore(what string) (*statestore.Postgres, error) {
	if err := checkClusterClient(b.cfg); err != nil {
		return nil, err
	}
	store, err := statestore.OpenPostgresWaiting(context.Background(), b.cfg.Scheduler.Store.DSN, statestore.PostgresOptions{CommitsInFlight: b.cfg.Scheduler.Store.CommitsInFlight}, b.cfg.Scheduler.Store.StartWait.D(), 30*time.Second, b.log)
	if err != nil {
		return nil, fmt.Errorf("opening %s (scheduler.store): %w", what, err)
	}
	b.closers.push(func() { store.Close() })
	return store, nil
}

// Option adjusts how New builds a process.
type Option func(*options)

type options struct{ configFile string }

// WithConfigFile names the config file that the admin ReloadConfig
// control (and the status page's reload button) re-reads, as SIGHUP
// does; without it they refuse.
func WithConfigFile(path string) Option { return func(o *options) { o.configFile = path } }

// New builds the process of cfg.Role and binds its ports; Run serves.
func New(cfg config.Config, log *slog.Logger, opts ...Option) (_ *Server, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if runsScheduler(cfg) {
		if _, err := invocation.ParseAll(cfg.Scheduler.Fairness.Keys); err != nil {
			return nil, fmt.Errorf("scheduler.fairness.keys: %w", err)
		}
		logQueues(log, Queues(cfg.Scheduler.Queues))
	}
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	s := &Server{cfg: cfg, log: log, closers: &closers{}, terms: newTerms(cfg, log)}
	s.latest.Store(&cfg)
	defer func() {
		if err != nil {
			s.closers.close()
		}
	}()
	if servesStorage(cfg) {
		// Before anything touches the data dir: a second process must
		// not open the stores of a live one.
		lock, err := lockDataDir(cfg)
		if err != nil {
			return nil, err
		}
		s.closers.push(func() { lock.Release() })
	}
	b, err := s.newBuilder()
	if err != nil {
		return nil, err
	}
	if err := s.listen(); err != nil {
		return nil, err
	}
	if s.parts, err = s.buildParts(b, o.configFile); err != nil {
		return nil, err
	}
	s.buildGRPC()
	if cfg.HTTPListen != "" {
		var pages func() *statusPages
		if runsScheduler(cfg) {
			pages = s.terms.pages
		}
		s.http = newHTTPServer(b.reg, s.health, pages, s.obs.worker.Load, s.sec, s.httpLis.Addr().String(), log)
		s.http.Handler = withGRPCAddr(s.http.Handler, s.GRPCAddr())
	}
	return s, nil
}

// newBuilder sets up what every part uses: the metrics registry, the
// security, and the metrics, tracing and health of the process.
func (s *Server) newBuilder() (*builder, error) {
	cfg := s.cfg
	sec, err := newSecurity(cfg, s.terms)
	if err != nil {
		return nil, err
	}
	s.sec = sec
	var schedulerCall func(context.Context) bool
	if cfg.Role == config.RoleFrontend {
		schedulerCall = sec.isSchedulerCall
	}
	reg := prometheus.NewRegistry()
	if s.obs, err = newObservability(cfg, reg, servesStorage(cfg), schedulerCall, runsScheduler(cfg)); err != nil {
		return nil, err
	}
	s.closers.push(s.obs.stop)
	if runsScheduler(cfg) {
		registerSchedulerMetrics(reg, cfg, s.terms.forMetrics)
	}
	return &builder{cfg: cfg, log: s.log, reg: reg, sec: sec, obs: s.obs, terms: s.terms, closers: s.closers, downloads: asset.NewFailureLog(downloadFailuresKept)}, nil
}

// listen binds the gRPC port and, if configured, the HTTP port.
func (s *Server) listen() error {
	lis, err := net.Listen("tcp", s.cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen (gRPC) on %s: %w; pick a free address with --listen", s.cfg.Listen, err)
	}
	s.grpcLis = lis
	s.closers.push(func() { lis.Close() })
	if s.cfg.HTTPListen == "" {
		return nil
	}
	hl, err := net.Listen("tcp", s.cfg.HTTPListen)
	if err != nil {
		return fmt.Errorf("listen (HTTP) on %s: %w; pick a free address with --http-listen", s.cfg.HTTPListen, err)
	}
	s.closers.push(func() { hl.Close() })
	s.httpLis = s.sec.httpListener(hl)
	return nil
}

// buildGRPC builds the gRPC server with the options of every role and
// the parts' own, registers the parts' services, health and reflection,
// and reports every service SERVING but those a part holds back.
func (s *Server) buildGRPC() {
	var local sync.Map // the services registered here, filled before serving
	isLocal := func(fullMethod string) bool {
		svc, _, _ := strings.Cut(strings.TrimPrefix(fullMethod, "/"), "/")
		_, ok := local.Load(svc)
		return ok
	}
	s.grpcOptions = grpcServerOptions(s.cfg, s.sec, s.obs, isLocal, s.log)
	s.grpc = newGRPCServer(s.grpcOptions, s.parts)
	var forwarded []*grpc.ServiceDesc
	for _, p := range s.parts {
		p.register(s.grpc)
		if f, ok := p.(forwarding); ok {
			forwarded = append(forwarded, f.forwarded()...)
		}
	}
	s.obs.register(s.grpc, forwarded...)
	for name := range s.grpc.GetServiceInfo() {
		local.Store(name, true)
	}
	s.obs.markServices(s.grpc)
	for _, p := range s.parts {
		if sb, ok := p.(standingBy); ok {
			s.obs.setServing(notServing, sb.notServing()...)
		}
	}
}

// health is what /healthz says after "ok": what the parts report.
func (s *Server) health() string {
	st := ""
	for _, p := range s.parts {
		if h, ok := p.(healthReporter); ok {
			if st != "" {
				st += "; "
			}
			st += h.health()
		}
	}
	return st
}

// servesStorage reports whether a process of cfg holds the CAS and
// action cache (and so a data dir).
func servesStorage(cfg config.Config) bool { return cfg.Role != config.RoleScheduler }

// runsScheduler reports whether a process of cfg runs a scheduler.
func runsScheduler(cfg config.Config) bool { return cfg.Role != config.RoleFrontend }

// GRPCAddr is the bound gRPC address.
func (s *Server) GRPCAddr() string { return s.grpcLis.Addr().String() }

// HTTPAddr is the bound HTTP address, or "" if disabled.
func (s *Server) HTTPAddr() string {
	if s.httpLis == nil {
		return ""
	}
	return s.httpLis.Addr().String()
}

// Scheduler is the scheduler running in this process now: always on
// role all, while it leads on a scheduler node; else nil.
func (s *Server) Scheduler() *scheduler.Scheduler { return s.terms.scheduler() }

// Leading reports whether a scheduler runs (and leads) in this process.
func (s *Server) Leading() bool { return s.terms.get() != nil }

// Advertise is the address a scheduler node publishes when it leads
// ("" on other roles).
func (s *Server) Advertise() string {
	for _, p := range s.parts {
		if l, ok := p.(*leader); ok {
			return l.advertise
		}
	}
	return ""
}

// Run serves until ctx ends (nil), a part fails, or a scheduler loses
// its leadership (ErrLostLeadership); then it stops the process.
func (s *Server) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	serveErr := make(chan error, 2)
	go func() { serveErr <- s.grpc.Serve(s.grpcLis) }()
	if s.sec.internal != nil {
		go s.grpc.Serve(s.sec.internal) // ends with the gRPC server
	}
	if s.http != nil {
		go func() {
			if err := s.http.Serve(s.httpLis); !errors.Is(err, http.ErrServerClosed) {
				serveErr <- err
			}
		}()
	}
	s.log.Info("gantry serving", "role", s.cfg.Role, "grpc", s.GRPCAddr(), "http", s.HTTPAddr(), "data_dir", s.cfg.DataDir)
	done := make(chan error, len(s.parts))
	for _, p := range s.parts {
		go func() { done <- p.run(ctx) }()
	}
	running := len(s.parts)
	var err error
	select {
	case <-ctx.Done():
	case err = <-serveErr:
		err = fmt.Errorf("serving the ports: %w", err)
	case err = <-done:
		running--
	}
	if errors.Is(err, ErrLostLeadership) {
		s.grpc.Stop() // no more answers from a deposed scheduler
	}
	cancel()
	for ; running > 0; running-- {
		if perr := <-done; err == nil {
			err = perr
		}
	}
	s.Stop()
	return err
}

// Stop stops the ports, giving calls in flight a few seconds, then
// closes what the parts opened, last first.
func (s *Server) Stop() {
	s.stopOnce.Do(func() {
		s.obs.notServing()
		stopPorts(s.http, s.grpc)
		s.closers.close()
	})
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

// Reload applies what a new configuration may change while the process
// runs (SIGHUP, the admin ReloadConfig control): on every role the TLS
// files, the tokens and keys, and the policy; where a scheduler runs, the
// provision queues and the fairness keys (queued work stays where it
// is). Other changes need a restart.
func (s *Server) Reload(cfg config.Config) error {
	cfg.Role = s.cfg.Role
	if err := cfg.Validate(); err != nil {
		return err
	}
	keys, err := invocation.ParseAll(cfg.Scheduler.Fairness.Keys)
	if err != nil {
		return fmt.Errorf("scheduler.fairness.keys: %w", err)
	}
	if err := s.sec.reload(cfg, s.log); err != nil {
		return err
	}
	s.latest.Store(&cfg)
	if t := s.terms.get(); t != nil {
		t.apply(cfg, keys, s.log)
		s.log.Info("configuration reloaded", "queues", len(cfg.Scheduler.Queues), "fairness_keys", cfg.Scheduler.Fairness.Keys)
	}
	return nil
}

// config is the configuration in force.
func (s *Server) config() config.Config { return *s.latest.Load() }

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
