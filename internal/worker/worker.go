// Package worker runs actions for the scheduler. A worker is a pipeline of
// stages with bounded slots: Match (polls for work once it holds an input
// fetch slot), InputFetch (materializes the input root from the file
// cache), Execute (holds as many cores as the action asks for) and Report
// (uploads outputs, writes the ActionCache, completes the lease). Each
// stage claims its successor before it lets go of its own slot, so work
// never piles up between stages. lease.go drives a lease through the
// stages (fetch.go, execute.go, report.go) to the one completion path
// (complete.go).
package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/semaphore"
	bspb "google.golang.org/genproto/googleapis/bytestream"
	"google.golang.org/grpc"

	workerpb "github.com/gantry-build/gantry/api/worker/v1"
	"github.com/gantry-build/gantry/internal/client"
	"github.com/gantry-build/gantry/internal/dirlock"
	"github.com/gantry-build/gantry/internal/worker/dircache"
	"github.com/gantry-build/gantry/internal/worker/execroot"
	"github.com/gantry-build/gantry/internal/worker/filecache"
	"github.com/gantry-build/gantry/internal/worker/outputs"
	"github.com/gantry-build/gantry/internal/worker/persistent"
	"github.com/gantry-build/gantry/internal/worker/runner"
	"github.com/gantry-build/gantry/internal/worker/sandbox"
)

// Config describes a worker.
type Config struct {
	ID                      string
	Cores                   int
	MemoryBytes             int64
	InputFetchSlots         int
	ReportSlots             int
	Properties              []*workerpb.Property
	AcceptUnknownProperties bool
	WorkDir                 string
	CacheMaxBytes           int64
	// StoreResultsLater: an action's slots go free once the scheduler has
	// accepted its result, before its commit; the result is kept until
	// the scheduler says it is stored (complete.go, unstored.go).
	StoreResultsLater bool
	// ChunkThreshold: input and output files of at least this many bytes
	// move as content-defined chunks when the server supports it, with
	// the input chunks kept in WorkDir/chunks (a quarter of
	// CacheMaxBytes); 0 turns chunking off.
	ChunkThreshold int64
	// Wrapper is a command prefix for every action.
	Wrapper []string
	// ProcessWrappers are named prefixes actions select with the
	// process-wrapper property, applied after Wrapper in the order given.
	ProcessWrappers map[string][]string
	// Queues are the provision queues served; empty serves all.
	Queues []string
	// Instances are the instance names served; empty or "*" serves all.
	Instances []string
	// Resources are named capacities for resource:NAME properties.
	Resources map[string]int64
	// PollWait is how long one Poll may be held by the scheduler.
	PollWait time.Duration
	Logger   *slog.Logger
	// Sandbox, when set, offers the bubblewrap sandbox (process-wrapper
	// "bubblewrap"); SandboxAll runs every action in it.
	Sandbox    *sandbox.Config
	SandboxAll bool
	// MinFreeDisk is the free space (bytes) the file system of WorkDir
	// keeps while actions run; below it the disk guard kills the action
	// writing most (diskguard.go). 0 turns the guard off.
	MinFreeDisk int64
	// MaxFileSize is RLIMIT_FSIZE for every action (bytes); 0 = no limit.
	MaxFileSize int64
	// LinkInputDirectories lets sandboxed actions take big input
	// directories whole, bound read-only from a cache of trees
	// (worker.link_input_directories: auto); ignored without a sandbox.
	LinkInputDirectories bool
	// PersistentWorkers, when set, runs actions carrying
	// persistentWorkerKey on warm tool processes (Dir is set by the
	// worker); nil runs them as plain commands.
	PersistentWorkers *persistent.Config
}

// maxKeptPerCore bounds the results a worker keeps accepted and not yet
// stored (unstored.go), per core: enough for many commits' worth of short
// actions; past it a finishing action keeps its slots until one is stored.
const maxKeptPerCore = 64

// settleWait bounds how long a worker that stops waits for the scheduler
// to store the results it keeps.
const settleWait = 30 * time.Second

// Worker is a running worker.
type Worker struct {
	cfg   Config
	conn  *grpc.ClientConn
	sched workerpb.WorkersClient
	cache *filecache.Cache
	// trees is the tree cache of directory linking; nil when off.
	trees *dircache.Cache
	cas   casSource
	// chunks moves large inputs and outputs as chunks (nil when
	// Config.ChunkThreshold is 0); chunkCache holds the input chunks and
	// chunkTally counts the transfers for the metrics.
	chunks     *chunkedCAS
	chunkCache *client.ChunkCache
	chunkTally chunkTally
	log        *slog.Logger
	roots      *rootPool
	logs       string
	fetch      *semaphore.Weighted
	exec       *semaphore.Weighted
	report     *semaphore.Weighted
	sb         *sandbox.Sandbox
	// sup starts actions and ends every process they start.
	sup *runner.Supervisor
	// pool keeps the persistent worker processes; nil when off.
	pool *persistent.Pool
	// workDir keeps other worker processes out of cfg.WorkDir: a second
	// one would kill this one's actions as leftovers and clear its roots.
	workDir *dirlock.Lock

	// heartbeatEvery is the interval the scheduler asked for at the last
	// registration (a time.Duration). Both the Match stage and the
	// heartbeat loop may re-register, so it is atomic.
	heartbeatEvery atomic.Int64
	// regMu serialises registrations; regGen counts them, so that when
	// both loops learn of a scheduler restart only one registers again.
	regMu  sync.Mutex
	regGen atomic.Uint64
	kick   chan struct{} // asks the heartbeat loop to report now
	// The stages a lease goes through (lease.go).
	inputs    *inputFetcher
	executor  *executor
	reporter  *reporter
	completer *completer
	// diskLow holds the Match stage while the disk is below the reserve.
	diskLow *diskGate
	// stages are the stage histograms, when the worker keeps its own
	// (RegisterMetrics); nil otherwise.
	stages [4]prometheus.Observer

	mu      sync.Mutex
	leases  map[string]*activeLease
	running map[string]chan struct{} // task id -> closed when it leaves
	freeCPU int
	// paused: the scheduler asked to suspend every running action
	// (control.go); stopPolling ends the Match stage once it asked to
	// terminate.
	paused      bool
	terminating bool
	stopPolling context.CancelFunc
	// polling: a Poll is in flight, which a drain lets end (drain.go);
	// stopRegistering ends the first registration's retries.
	polling         bool
	stopRegistering context.CancelFunc
	// prlimit is the prlimit binary that sets MaxFileSize ("" when off).
	prlimit string
}

type activeLease struct {
	id     string
	taskID string
	stage  workerpb.Stage
	cancel context.CancelFunc
	proc   processControl
	// completing is set once the result is on its way to the scheduler;
	// a CANCEL then only means the scheduler has already processed it.
	completing bool
	// disk is the disk guard's view of the running action (diskguard.go).
	disk diskState
	// susp is its part in pre-emption by suspension (suspend.go).
	susp suspendState
}

// processControl is what the heartbeat loop may do to a running action.
type processControl interface {
	Suspend() error
	Resume() error
}

// New prepares a worker that speaks the worker protocol to sched and
// reaches the CAS and ActionCache over conn. A worker in its own process
// passes workerpb.NewWorkersClient(conn); one embedded in the scheduler's
// process may pass a client that calls the scheduler directly.
func New(conn *grpc.ClientConn, sched workerpb.WorkersClient, cfg Config) (*Worker, error) {
	if cfg.Cores <= 0 {
		return nil, errors.New("worker cores must be positive")
	}
	if cfg.InputFetchSlots <= 0 {
		cfg.InputFetchSlots = cfg.Cores
	}
	if cfg.ReportSlots <= 0 {
		cfg.ReportSlots = cfg.Cores
	}
	if cfg.PollWait <= 0 {
		cfg.PollWait = 20 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	w := &Worker{
		cfg: cfg, conn: conn, log: cfg.Logger.With("worker", cfg.ID),
		sched: sched,
		logs:  filepath.Join(cfg.WorkDir, "logs"),
		fetch: semaphore.NewWeighted(int64(cfg.InputFetchSlots)), exec: semaphore.NewWeighted(int64(cfg.Cores)),
		report: semaphore.NewWeighted(int64(cfg.ReportSlots)),
		kick:   make(chan struct{}, 1), leases: map[string]*activeLease{}, running: map[string]chan struct{}{},
		freeCPU: cfg.Cores,
	}
	var err error
	// First of all: the work dir must be this process's alone.
	if w.workDir, err = dirlock.Acquire(cfg.WorkDir, "gantry worker "+cfg.ID); err != nil {
		return nil, fmt.Errorf("worker work dir: %w", err)
	}
	started := false
	defer func() {
		if !started {
			w.close()
		}
	}()
	// Kill what a previous worker process on this work dir left running
	// (it may have been killed with SIGKILL) before anything else.
	if w.sup, err = runner.NewSupervisor(cfg.WorkDir, w.log); err != nil {
		return nil, err
	}
	w.log.Info("actions' processes end with them", "by", w.sup.Describe())
	// Exec roots and logs of a previous run are garbage.
	w.roots = newRootPool(filepath.Join(cfg.WorkDir, "roots"), w.log)
	for _, d := range []string{w.roots.dir, w.logs} {
		if err := os.RemoveAll(d); err != nil {
			return nil, fmt.Errorf("clearing %s: %w", d, err)
		}
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("creating %s: %w", d, err)
		}
	}
	if err := w.setupSandbox(); err != nil {
		return nil, err
	}
	if err := w.setupDiskLimits(); err != nil {
		return nil, err
	}
	largeOut, err := w.setupCaches()
	if err != nil {
		return nil, err
	}
	wrap := newWrapping(cfg, w.sb != nil, w.prlimit)
	w.inputs = newInputFetcher(w.cache, w.trees, wrap, w.roots)
	if cfg.PersistentWorkers != nil {
		pc := *cfg.PersistentWorkers
		pc.Dir, pc.Logger = filepath.Join(cfg.WorkDir, "persistent"), w.log
		if w.pool, err = persistent.NewPool(pc, w.sup); err != nil {
			return nil, err
		}
	}
	w.executor = newExecutor(w.sup, w.sb, wrap, w.logs, w, w.pool, newLiveOutput(bspb.NewByteStreamClient(conn), w.log))
	w.reporter = newReporter(cfg.MinFreeDisk, wrap.chroot, largeOut, cfg.ChunkThreshold, w.log)
	w.diskLow = newDiskGate(cfg.WorkDir, cfg.MinFreeDisk, diskCheckEvery, w.log)
	w.completer = newCompleter(w.sched, cfg.ID, w, cfg.StoreResultsLater, maxKeptPerCore*cfg.Cores, w.log)
	started = true
	return w, nil
}

// setupCaches makes the worker's CAS client, its chunked transfers and
// their chunk cache (with worker.chunk_threshold: a quarter of
// cache_max_size, the file cache the rest), the input file cache and the
// tree cache. It returns what uploads large outputs as chunks (nil:
// whole).
func (w *Worker) setupCaches() (outputs.LargeUploader, error) {
	cas := newInstanceCAS(w.conn)
	w.cas = cas
	fileBytes := w.cfg.CacheMaxBytes
	if w.cfg.ChunkThreshold > 0 {
		chunkBytes := int64(1) << 62
		if w.cfg.CacheMaxBytes > 0 {
			chunkBytes = max(1, w.cfg.CacheMaxBytes/chunkCacheShare)
			fileBytes = max(1, w.cfg.CacheMaxBytes-chunkBytes)
		}
		chunkCache, err := client.OpenChunkCache(filepath.Join(w.cfg.WorkDir, "chunks"), chunkBytes)
		if err != nil {
			return nil, fmt.Errorf("worker chunk cache: %w", err)
		}
		w.chunks = newChunkedCAS(w.conn, cas, chunkCache, &w.chunkTally)
		w.chunkCache = chunkCache
	}
	var (
		largeIn  filecache.LargeReader
		largeOut outputs.LargeUploader
	)
	if w.chunks != nil {
		largeIn, largeOut = w.chunks, w.chunks
	}
	var err error
	if w.cache, err = filecache.NewWithLarge(filepath.Join(w.cfg.WorkDir, "cache"), fileBytes, cas, largeIn, w.cfg.ChunkThreshold); err != nil {
		return nil, err
	}
	if w.cfg.LinkInputDirectories && w.sb != nil {
		if w.trees, err = dircache.New(filepath.Join(w.cfg.WorkDir, "trees"), w.cache); err != nil {
			return nil, err
		}
		w.log.Info("sandboxed actions get big input directories bound read-only from the tree cache (worker.link_input_directories)", "min_files", execroot.DefaultLinkMinFiles, "dir", w.trees.Dir())
	}
	return largeOut, nil
}

// Run works until ctx ends. Running actions are cancelled on the way out.
func (w *Worker) Run(ctx context.Context) error {
	defer w.close()
	if err := w.registerUnlessDrained(ctx); err != nil || w.draining() {
		return err
	}
	// Heartbeats go on until the running actions are done, also after
	// the Match stage stopped for a terminate control.
	hbCtx, stopHeartbeats := context.WithCancel(ctx)
	pollCtx, stopPolling := context.WithCancel(ctx)
	defer stopPolling()
	w.mu.Lock()
	w.stopPolling = stopPolling
	if w.terminating {
		// Drained before it started polling (drain.go).
		stopPolling()
	}
	w.mu.Unlock()
	var hb, leases sync.WaitGroup
	w.completer.start(ctx)
	hb.Add(1)
	go func() { defer hb.Done(); w.completer.confirmLoop(hbCtx) }()
	hb.Add(1)
	go func() { defer hb.Done(); w.heartbeatLoop(hbCtx) }()
	hb.Add(1)
	go func() { defer hb.Done(); w.diskGuardLoop(hbCtx) }()
	hb.Add(1)
	go func() { defer hb.Done(); w.sessionLoop(hbCtx) }()
	err := w.matchLoop(ctx, pollCtx, &leases)
	leases.Wait()
	w.completer.settle(ctx, settleWait)
	stopHeartbeats()
	hb.Wait()
	if ctx.Err() == nil {
		w.log.Info("worker drained (the scheduler's terminate, or a stop signal with worker.stop_grace); exiting")
	}
	return err
}

// close ends the supervisor and gives the work dir up (at the end of
// Run, or when New fails).
func (w *Worker) close() {
	if w.pool != nil {
		w.pool.Close()
	}
	if w.sup != nil {
		if err := w.sup.Close(); err != nil {
			w.log.Warn("cleaning up", "err", err)
		}
	}
	w.workDir.Release()
}

// reregister registers again unless another loop already did so after
// the caller last observed generation seen (from w.regGen before its RPC).
func (w *Worker) reregister(ctx context.Context, seen uint64) error {
	w.regMu.Lock()
	defer w.regMu.Unlock()
	if w.regGen.Load() != seen {
		return nil
	}
	return w.registerLocked(ctx)
}

func (w *Worker) register(ctx context.Context) error {
	w.regMu.Lock()
	defer w.regMu.Unlock()
	return w.registerLocked(ctx)
}

func (w *Worker) registerLocked(ctx context.Context) error {
	for attempt := 0; ; attempt++ {
		resp, err := w.sched.Register(ctx, &workerpb.RegisterRequest{
			WorkerId: w.cfg.ID, Properties: w.cfg.Properties, AcceptUnknownProperties: w.cfg.AcceptUnknownProperties,
			Cores: int32(w.cfg.Cores), MemoryBytes: w.cfg.MemoryBytes, Slots: int32(w.cfg.InputFetchSlots + w.cfg.Cores + w.cfg.ReportSlots),
			Queues: w.cfg.Queues, ProcessWrappers: w.wrapperNames(), Resources: w.cfg.Resources, Instances: w.cfg.Instances,
			// The scheduler requeues at once the leases of this id we
			// do not list: those of an earlier process of this worker.
			LeaseIds: w.leaseIDs(), ReportsLeases: true,
		})
		if err == nil {
			every := time.Duration(resp.HeartbeatIntervalMs) * time.Millisecond
			if every <= 0 {
				every = 2 * time.Second
			}
			w.heartbeatEvery.Store(int64(every))
			w.regGen.Add(1)
			w.completer.registered()
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if attempt%10 == 0 {
			w.log.Warn("cannot register with the scheduler; retrying", "err", err)
		}
		sleep(ctx, min(time.Duration(attempt+1)*200*time.Millisecond, 5*time.Second))
	}
}

// leaseIDs are the leases the worker holds now: running, reporting, or
// with a result accepted and not yet stored (unstored.go). A lease a Poll
// in flight brings in just after is not among them: the scheduler then
// requeues it, and the next heartbeat cancels it here (only after a
// scheduler restart, and only a start is wasted).
func (w *Worker) leaseIDs() []string {
	w.mu.Lock()
	ids := make([]string, 0, len(w.leases))
	for id := range w.leases {
		ids = append(ids, id)
	}
	w.mu.Unlock()
	// Read after the leases: a result is kept before its lease ends, so
	// one that leaves the leases meanwhile is found here.
	ids = append(ids, w.completer.kept.leases()...)
	sort.Strings(ids)
	return slices.Compact(ids)
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// matchLoop is the Match stage: it claims an input fetch slot, then asks
// for one action, and hands it on holding that slot.
// Leases run under ctx; polling stops when pollCtx ends.
func (w *Worker) matchLoop(ctx, pollCtx context.Context, wg *sync.WaitGroup) error {
	backoff := time.Duration(0)
	for pollCtx.Err() == nil && !w.draining() {
		if err := w.diskLow.wait(pollCtx); err != nil {
			break
		}
		if err := w.fetch.Acquire(pollCtx, 1); err != nil {
			break
		}
		w.mu.Lock()
		if w.terminating {
			w.mu.Unlock()
			w.fetch.Release(1)
			break
		}
		free := w.freeCPU
		w.polling = true
		w.mu.Unlock()
		gen := w.regGen.Load()
		resp, err := w.sched.Poll(pollCtx, &workerpb.PollRequest{WorkerId: w.cfg.ID, FreeCores: int32(max(free, 1)), WaitMs: w.cfg.PollWait.Milliseconds()})
		w.mu.Lock()
		w.polling = false
		w.mu.Unlock()
		if err != nil || resp.Assignment == nil {
			w.fetch.Release(1)
			if err != nil && pollCtx.Err() == nil {
				backoff = min(max(backoff*2, 100*time.Millisecond), 5*time.Second)
				w.log.Warn("poll failed; retrying", "err", err, "in", backoff)
				sleep(pollCtx, backoff)
			}
			if resp != nil && resp.Reregister {
				if err := w.reregister(pollCtx, gen); err != nil {
					break
				}
			}
			continue
		}
		backoff = 0
		a := resp.Assignment
		lctx, cancel := context.WithCancel(ctx)
		l := &activeLease{id: a.LeaseId, taskID: a.TaskId, stage: workerpb.Stage_INPUT_FETCH, cancel: cancel}
		w.mu.Lock()
		w.leases[l.id] = l
		w.mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer cancel()
			w.runStages(lctx, l, a)
		}()
	}
	return nil
}

// setStage records a lease's stage. The start of execution is reported at
// once (clients see EXECUTING); other stages ride on the next heartbeat.
func (w *Worker) setStage(l *activeLease, st workerpb.Stage) {
	w.mu.Lock()
	l.stage = st
	w.mu.Unlock()
	if st != workerpb.Stage_EXECUTING {
		return
	}
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

func (w *Worker) heartbeatLoop(ctx context.Context) {
	every := time.Duration(w.heartbeatEvery.Load())
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-w.kick:
		}
		w.mu.Lock()
		req := &workerpb.HeartbeatRequest{WorkerId: w.cfg.ID}
		for _, l := range w.leases {
			req.Leases = append(req.Leases, &workerpb.LeaseState{LeaseId: l.id, Stage: l.stage})
		}
		w.mu.Unlock()
		gen := w.regGen.Load()
		resp, err := w.sched.Heartbeat(ctx, req)
		if err != nil {
			if ctx.Err() == nil {
				w.log.Warn("heartbeat failed", "err", err)
			}
			continue
		}
		if resp.Reregister {
			if err := w.reregister(ctx, gen); err != nil {
				return
			}
		}
		// A new scheduler may ask for another interval at registration,
		// whichever loop registered.
		if now := time.Duration(w.heartbeatEvery.Load()); now != every {
			every = now
			t.Reset(every)
		}
		for _, c := range resp.Commands {
			w.apply(c)
		}
		w.control(resp.Pause, resp.Terminate)
	}
}

func (w *Worker) apply(c *workerpb.LeaseCommand) {
	w.mu.Lock()
	l, ok := w.leases[c.LeaseId]
	ok = ok && !l.completing
	w.mu.Unlock()
	if !ok {
		return
	}
	switch c.Command {
	case workerpb.Command_CANCEL:
		w.log.Info("cancelling action", "lease", c.LeaseId, "reason", c.Reason)
		l.cancel()
	case workerpb.Command_SUSPEND:
		w.suspendLease(l, c.Reason)
	case workerpb.Command_RESUME:
		w.resumeLease(l)
	}
}

// exclusive waits until no other lease of the same task runs here, so the
// same operation never runs twice at once on this worker.
func (w *Worker) exclusive(ctx context.Context, taskID string) (release func(), err error) {
	for {
		w.mu.Lock()
		ch, busy := w.running[taskID]
		if !busy {
			done := make(chan struct{})
			w.running[taskID] = done
			w.mu.Unlock()
			return func() {
				w.mu.Lock()
				delete(w.running, taskID)
				w.mu.Unlock()
				close(done)
			}, nil
		}
		w.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func (w *Worker) wrapperNames() []string {
	names := make([]string, 0, len(w.cfg.ProcessWrappers))
	for n := range w.cfg.ProcessWrappers {
		names = append(names, n)
	}
	if w.sb != nil {
		names = append(names, w.sandboxWrapper())
	}
	sort.Strings(names)
	return names
}
