package server

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/gantry-build/gantry/internal/client"
	"github.com/gantry-build/gantry/internal/config"
	"github.com/gantry-build/gantry/internal/execution"
	"github.com/gantry-build/gantry/internal/scheduler"
	"github.com/gantry-build/gantry/internal/statestore"
)

// ErrLostLeadership ends a scheduler that was deposed: it stops serving
// at once and exits, and its supervisor starts it again as a standby.
var ErrLostLeadership = errors.New("this scheduler lost the leadership (its PostgreSQL lock session ended or another scheduler took over); it stopped serving, start it again to stand by")

// leader is the part of a scheduler node (role scheduler): one of the
// scheduler processes sharing a PostgreSQL. Its services are registered
// from the start and answer UNAVAILABLE while it stands by; once it takes
// the leadership it restores the state from the database and serves
// Execution, Operations, the worker protocol and Admin (to frontends)
// until the process ends or the leadership is lost. It reads actions
// from and writes results to the CAS and action cache of cluster.cas.
type leader struct {
	b         *builder
	store     *statestore.Postgres
	casConn   *grpc.ClientConn
	advertise string
	services  *termServices
	// latest is the configuration a term starts with: the last reloaded.
	latest  func() config.Config
	reload  func() error
	leading atomic.Bool
}

// newLeader connects to the database and the CAS node. grpcAddr is the
// bound gRPC address, advertised unless cluster.advertise is set; latest
// returns the configuration in force.
func newLeader(b *builder, grpcAddr string, latest func() config.Config, reload func() error) (*leader, error) {
	cfg := b.cfg
	store, err := b.openClusterStore("the scheduler's state store")
	if err != nil {
		return nil, err
	}
	registerStateStoreMetrics(b.reg, cfg, store)
	l := &leader{b: b, store: store, services: newTermServices(), latest: latest, reload: reload}
	b.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "gantry_scheduler_leader", Help: "1 while this scheduler process leads, 0 while it stands by."},
		func() float64 {
			if l.leading.Load() {
				return 1
			}
			return 0
		}))
	if l.casConn, err = client.DialSecure(cfg.Cluster.CAS, clusterSecurity(cfg), markSchedulerCalls()...); err != nil {
		return nil, fmt.Errorf("cluster.cas and cluster.client: %w", err)
	}
	b.closers.push(func() { l.casConn.Close() })
	l.advertise = cfg.Cluster.Advertise
	if l.advertise == "" {
		l.advertise = dialAddr(grpcAddr)
	}
	return l, nil
}

func (l *leader) serverOptions() []grpc.ServerOption { return nil }

func (l *leader) register(g *grpc.Server) { l.services.register(g) }

func (l *leader) notServing() []string { return serviceNames(l.services.descs) }

func (l *leader) health() string {
	if t := l.b.terms.get(); t != nil && l.leading.Load() {
		return fmt.Sprintf("leader term %d", t.number)
	}
	return "standby"
}

// run stands by until this node leads, then serves until ctx ends (nil)
// or the leadership is lost (ErrLostLeadership).
func (l *leader) run(ctx context.Context) error {
	l.b.log.Info("gantry scheduler standing by", "advertise", l.advertise)
	interval := l.b.cfg.Cluster.TakeoverInterval.D()
	for logged := false; ; {
		lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		number, lost, err := l.store.Lead(lctx, l.advertise)
		cancel()
		if err == nil {
			return l.lead(ctx, number, lost)
		}
		if !errors.Is(err, statestore.ErrNotLeader) && ctx.Err() == nil && !logged {
			l.b.log.Warn("cannot try for the scheduler leadership; retrying", "err", err)
			logged = true
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(interval):
		}
	}
}

// lead restores the state and serves until ctx ends or lost closes. The
// term ends on the process's closers, after its ports stopped: calls in
// flight finish before the journal stops.
func (l *leader) lead(ctx context.Context, number int64, lost <-chan struct{}) (err error) {
	start := time.Now()
	// Frontends forward here from now on: calls wait for the restore.
	l.services.restoring()
	defer func() {
		if err != nil {
			l.services.set(nil) // the held calls fail over to the next leader
		}
	}()
	cfg, log := l.latest(), l.b.log
	ac := remoteAC{ac: repb.NewActionCacheClient(l.casConn)}
	shapes, err := loadShapes(ctx, cfg, l.store, l.b.closers, log)
	if err != nil {
		return err
	}
	sched := newScheduler(cfg, log, ac.store, shapes)
	stateCtx, stopState := context.WithCancel(context.Background())
	if err := sched.Attach(stateCtx, l.store); err != nil {
		stopState()
		return fmt.Errorf("restoring the scheduler's state from PostgreSQL: %w", err)
	}
	l.b.closers.push(func() {
		l.services.set(nil)
		l.leading.Store(false)
		l.b.terms.set(nil)
		stopState()
		<-sched.Stopped()
	})
	logRestored(log, sched)
	if err := restoreQuotas(stateCtx, sched, l.store, "", log); err != nil {
		return fmt.Errorf("restoring the quotas: %w", err)
	}
	// Before any worker polls this leader: a worker paused or drained on
	// the last one stays so.
	controls := controlState{store: l.store}
	cs, err := controls.load(stateCtx)
	if err != nil {
		return fmt.Errorf("restoring the worker controls: %w", err)
	}
	sched.RestoreWorkerControls(cs)
	cas := newRemoteCAS(l.casConn, int64(cfg.Storage.MaxBatchSize))
	t, err := newTerm(cfg, log, sched, number, termDeps{
		cas: cas, lookup: ac.lookup,
		admin:  pgAdminStore{quotas: quotaState{store: l.store}, controls: controls},
		reload: l.reload, obs: l.b.obs, policy: l.b.sec.statusPolicy(), state: l.store,
		downloads: l.b.downloads, live: l.b.live,
	})
	if err != nil {
		return err
	}
	l.b.closers.push(t.close)
	impls := newServiceRecorder()
	registerSchedulerServices(impls, t.exec, t.ws, t.admin)
	l.b.terms.set(t)
	l.leading.Store(true)
	l.services.set(impls.impls)
	l.b.obs.setServing(healthpb.HealthCheckResponse_SERVING, serviceNames(impls.descs)...)
	st := sched.Stats()
	log.Info("gantry scheduler leading", "term", number, "advertise", l.advertise, "restored_operations", st.Operations, "queued", st.Queued, "leased", st.Leased, "took", time.Since(start))
	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	go sched.Run(runCtx, 250*time.Millisecond)
	select {
	case <-ctx.Done():
		// Workers keep their actions and report them to the next leader.
		logStopping(log, sched, "")
		return nil
	case <-lost:
		// Deposed: no more answers from this process (the server stops
		// its port at once). Every call in flight ends with UNAVAILABLE,
		// and clients retry through a frontend, which finds the new
		// leader.
		log.Error("scheduler leadership lost; stopped serving", "term", number)
		return ErrLostLeadership
	}
}

// pgAdminStore keeps the quotas and the worker controls in PostgreSQL,
// where every scheduler (and the next leader) finds them.
type pgAdminStore struct {
	quotas   quotaState
	controls controlState
}

var _ execution.AdminStore = pgAdminStore{}

func (a pgAdminStore) SaveQuotas(qs []scheduler.Quota) error { return a.quotas.save(qs) }

func (a pgAdminStore) SaveWorkerControls(cs map[string]scheduler.WorkerControl) error {
	return a.controls.save(cs)
}
