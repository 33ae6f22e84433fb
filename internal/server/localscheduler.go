package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"google.golang.org/grpc"

	"github.com/gantry-build/gantry/internal/execution"
	"github.com/gantry-build/gantry/internal/scheduler"
	"github.com/gantry-build/gantry/internal/statestore"
)

// localScheduler is the part that runs the scheduler of an all-in-one
// server: for the life of the process, its state in scheduler.store, its
// actions and results in this process's stores.
type localScheduler struct {
	log  *slog.Logger
	term *term
	// lost closes when a PostgreSQL store's leadership ends (nil: never).
	lost <-chan struct{}
	// embedded is the id of the embedded worker ("": none), for the
	// stopping log.
	embedded string
}

// newLocalScheduler restores the scheduler's state (from the store being
// opened), quotas and worker controls and builds its services over
// storage. grpcAddr is published
// as the leader's address when the state is in PostgreSQL; reload
// re-reads the config file (nil: none).
func newLocalScheduler(b *builder, storage *localStorage, opening *stateOpening, grpcAddr string, reload func() error) (*localScheduler, error) {
	cfg, log := b.cfg, b.log
	cf := controlsFile{path: filepath.Join(cfg.DataDir, "scheduler", "worker-controls.json")}
	controls, err := cf.load()
	if err != nil {
		opening.discard()
		return nil, fmt.Errorf("loading the worker controls: %w", err)
	}
	state, err := opening.wait()
	if err != nil {
		return nil, fmt.Errorf("opening the scheduler's state store (scheduler.store): %w", err)
	}
	b.closers.push(func() {
		if err := state.Close(); err != nil {
			log.Error("closing the scheduler's state store", "err", err)
		}
	})
	registerStateStoreMetrics(b.reg, cfg, state)
	lost, err := leadAlone(state, grpcAddr)
	if err != nil {
		return nil, err
	}
	shapes, err := loadShapes(context.Background(), cfg, state, b.closers, log)
	if err != nil {
		return nil, err
	}
	sched := newScheduler(cfg, log, storage.fe.StoreActionResult, shapes)
	stateCtx, stopState := context.WithCancel(context.Background())
	// The journal stops after the ports did: calls in flight finish first.
	b.closers.push(func() { stopState(); <-sched.Stopped() })
	// With the memory backend nothing survives a restart, so the
	// scheduler keeps no journal at all (encoding every change into a
	// store nobody reads cost ~20% of its CPU per action); the store
	// still holds the quotas while the process runs.
	if cfg.Scheduler.Store.Backend != "memory" {
		if err := sched.Attach(stateCtx, state); err != nil {
			return nil, fmt.Errorf("restoring the scheduler's state: %w", err)
		}
		logRestored(log, sched)
	}
	// Quotas are in the state store (an older quotas.json moves there).
	if err := restoreQuotas(stateCtx, sched, state, filepath.Join(cfg.DataDir, "scheduler", "quotas.json"), log); err != nil {
		return nil, fmt.Errorf("restoring the quotas: %w", err)
	}
	sched.RestoreWorkerControls(controls)
	t, err := newTerm(cfg, log, sched, 0, termDeps{
		cas: storage.cas, lookup: storage.fe.LookupActionResult,
		admin: adminStore{quotas: quotaState{store: state}, controls: cf}, reload: reload,
		obs: b.obs, policy: b.sec.statusPolicy(), state: state, downloads: b.downloads,
		live: b.live,
	})
	if err != nil {
		return nil, err
	}
	// The history is written out before the state store closes.
	b.closers.push(t.close)
	b.terms.set(t)
	embedded := ""
	if runsEmbeddedWorker(cfg) {
		embedded = embeddedWorkerID(cfg)
	}
	return &localScheduler{log: log, term: t, lost: lost, embedded: embedded}, nil
}

// serverOptions count the builds' CAS bytes into the history (after
// authorization: refused calls move no blobs).
func (s *localScheduler) serverOptions() []grpc.ServerOption {
	return buildTraffic{hist: s.term.hist}.serverOptions()
}

func (s *localScheduler) register(g *grpc.Server) {
	registerSchedulerServices(g, s.term.exec, s.term.ws, s.term.admin)
}

// run runs the scheduler until ctx ends, or until the PostgreSQL
// leadership is lost (ErrLostLeadership).
func (s *localScheduler) run(ctx context.Context) error {
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	go s.term.sched.Run(ctx, 250*time.Millisecond)
	select {
	case <-ctx.Done():
		logStopping(s.log, s.term.sched, s.embedded)
		return nil
	case <-s.lost:
		return ErrLostLeadership
	}
}

// adminStore keeps the quotas in the scheduler's state store and the
// worker controls in a file of the data dir.
type adminStore struct {
	quotas   quotaState
	controls controlsFile
}

var _ execution.AdminStore = adminStore{}

func (a adminStore) SaveQuotas(qs []scheduler.Quota) error { return a.quotas.save(qs) }

func (a adminStore) SaveWorkerControls(cs map[string]scheduler.WorkerControl) error {
	return a.controls.save(cs)
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
