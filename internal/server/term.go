package server

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/gantry-build/gantry/internal/asset"
	"github.com/gantry-build/gantry/internal/auth"
	"github.com/gantry-build/gantry/internal/blobstore"
	"github.com/gantry-build/gantry/internal/config"
	"github.com/gantry-build/gantry/internal/execution"
	"github.com/gantry-build/gantry/internal/history"
	"github.com/gantry-build/gantry/internal/invocation"
	"github.com/gantry-build/gantry/internal/protocol"
	"github.com/gantry-build/gantry/internal/scheduler"
	"github.com/gantry-build/gantry/internal/statestore"
	"github.com/gantry-build/gantry/internal/status"
)

// A term is a scheduler running in this process with the services that
// serve it: for the life of the process on role all, while it leads on a
// scheduler node.
type term struct {
	sched *scheduler.Scheduler
	exec  *execution.Service
	ws    *execution.WorkerService
	admin *execution.AdminService
	pages *statusPages
	// hist is the history of finished operations (nil: none kept).
	hist *history.Recorder
	// number is the leadership term (0 on role all).
	number int64
}

// termDeps are what a term's services use besides the scheduler: the
// CAS and action cache (local or another node's), where quotas and
// worker controls are kept, the configuration reload, the metrics and
// the status pages' policy.
type termDeps struct {
	cas    blobstore.Store
	lookup execution.ResultLookup
	admin  execution.AdminStore
	// reload re-reads the config file; nil without one.
	reload func() error
	obs    execution.Observer
	policy func() *auth.Policy
	// state is the scheduler's state store, where the history is kept.
	state statestore.Store
	// downloads are this process's failed Remote Asset fetches.
	downloads *asset.FailureLog
	// live holds the live output of the actions (nil: none is kept).
	live *liveOutput
}

// newTerm builds the services of sched: Execution and Operations, the
// worker protocol, Admin, and the status pages.
func newTerm(cfg config.Config, log *slog.Logger, sched *scheduler.Scheduler, number int64, d termDeps) (*term, error) {
	keys, err := invocation.ParseAll(cfg.Scheduler.Fairness.Keys)
	if err != nil {
		return nil, fmt.Errorf("scheduler.fairness.keys: %w", err)
	}
	var hist *history.Recorder
	obs := d.obs
	if h := cfg.Status.History; h.MaxOperations > 0 && d.state != nil {
		ctx, cancel := context.WithTimeout(context.Background(), historyLoadTimeout)
		hist, err = history.New(ctx, d.state, history.Options{MaxOperations: h.MaxOperations, MaxBuilds: h.MaxBuilds, MaxAge: h.MaxAge.D()}, log)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("loading the history (status.history): %w", err)
		}
		obs = historyObserver{Observer: d.obs, hist: hist}
	}
	if d.live != nil {
		sched.OnFinished(d.live.finished)
	}
	exec := execution.New(sched, d.cas, d.lookup, obs, log)
	exec.SetInvocationKeys(keys, cfg.Scheduler.Fairness.UserHeader)
	ws := execution.NewWorkerService(sched, obs)
	admin := execution.NewAdminService(sched, exec.KeyNames, d.admin, d.reload, log)
	pages := &statusPages{sched: sched, keys: exec.KeyNames,
		page: status.New(sched, admin, d.cas, hist, exec.KeyNames, d.policy, status.Options{Refresh: cfg.Status.Refresh.D(), Logger: log, Downloads: d.downloads, Live: d.live.statusLive(), Shapes: sched.Config().Shapes, SizeClasses: sched.Config().SizeClasses})}
	return &term{sched: sched, exec: exec, ws: ws, admin: admin, pages: pages, hist: hist, number: number}, nil
}

// historyLoadTimeout bounds reading the history when a term starts.
const historyLoadTimeout = time.Minute

// close writes what the term's history has not stored yet.
func (t *term) close() {
	if t.hist != nil {
		t.hist.Close()
	}
}

// historyObserver records every operation that finishes (once, whether
// or not a caller waits for it) in the history, besides telling the
// process's observer.
type historyObserver struct {
	execution.Observer
	hist *history.Recorder
}

// Finished implements execution.Observer.
func (o historyObserver) Finished(f protocol.Finished) {
	o.Observer.Finished(f)
	o.hist.Record(history.FromFinished(f, time.Now()))
}

// newScheduler is the scheduler of cfg, logging to log, that writes the
// results workers ask to cache to results (nil: nowhere) and learns
// durations in shapes (nil: none; loadShapes).
func newScheduler(cfg config.Config, log *slog.Logger, results execution.ResultStore, shapes *scheduler.ShapeHistory) *scheduler.Scheduler {
	sc := schedulerConfig(cfg, log)
	sc.Shapes = shapes
	var err error
	if sc.SizeClasses, err = sizeClasses(cfg.Scheduler.SizeClasses, shapes); err != nil {
		// Config.Validate makes the same checks: a bad config never gets here.
		log.Error("size classes are off", "err", err)
	}
	return scheduler.New(sc, scheduler.RealClock{}, results)
}

// apply applies what a reloaded configuration may change while the
// scheduler runs: the provision queues, the ignored properties and the
// fairness keys (cfg's, parsed). Queued work stays where it is.
func (t *term) apply(cfg config.Config, keys []invocation.Extractor, log *slog.Logger) {
	queues := Queues(cfg.Scheduler.Queues)
	t.sched.SetQueues(queues)
	t.sched.SetIgnoredProperties(cfg.Scheduler.IgnoredProperties)
	logQueues(log, queues)
	t.exec.SetInvocationKeys(keys, cfg.Scheduler.Fairness.UserHeader)
}

// terms holds the term running in this process now, if any: what the
// metrics, the status pages, the authorizer and a reload look at.
type terms struct {
	current atomic.Pointer[term]
	// idle is an empty scheduler, what the metrics read while no term
	// runs (a standby).
	idle *scheduler.Scheduler
}

func newTerms(cfg config.Config, log *slog.Logger) *terms {
	return &terms{idle: newScheduler(cfg, log, nil, nil)}
}

// set makes t the current term (nil: none).
func (ts *terms) set(t *term) { ts.current.Store(t) }

// get is the current term, or nil.
func (ts *terms) get() *term { return ts.current.Load() }

// scheduler is the current term's scheduler, or nil.
func (ts *terms) scheduler() *scheduler.Scheduler {
	if t := ts.get(); t != nil {
		return t.sched
	}
	return nil
}

// forMetrics is the scheduler whose state the metrics export: the
// current term's, or an empty one.
func (ts *terms) forMetrics() scheduler.Snapshot {
	if s := ts.scheduler(); s != nil {
		return s
	}
	return ts.idle
}

// pages are the current term's status pages, or nil.
func (ts *terms) pages() *statusPages {
	if t := ts.get(); t != nil {
		return t.pages
	}
	return nil
}

// OperationInstance implements auth.Operations.
func (ts *terms) OperationInstance(name string) (string, bool) {
	s := ts.scheduler()
	if s == nil {
		return "", false
	}
	st, _, err := s.Watch(name)
	return st.Instance, err == nil
}
