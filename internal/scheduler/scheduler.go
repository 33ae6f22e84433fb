// Package scheduler is Gantry's queue core: operations and the tasks
// (executions) behind them, in-flight deduplication, priorities, leases to
// workers, and the timers that requeue work from lost workers and cancel
// work nobody waits for. It has no gRPC in it; the services are adapters.
package scheduler

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"sort"
	"strconv"
	"sync"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"github.com/google/uuid"
	"google.golang.org/grpc/codes"

	"github.com/gantry-build/gantry/internal/digest"
	"github.com/gantry-build/gantry/internal/platform"
)

// Clock tells the time. Tests inject a fake one to run in virtual time.
type Clock interface{ Now() time.Time }

// RealClock is the system clock.
type RealClock struct{}

// Now implements Clock.
func (RealClock) Now() time.Time { return time.Now() }

// Config tunes the scheduler.
type Config struct {
	// HeartbeatInterval is how often workers must heartbeat.
	HeartbeatInterval time.Duration
	// HeartbeatTimeout is how long a lease survives without its worker
	// reporting it; then the action goes back to the front of the queue.
	HeartbeatTimeout time.Duration
	// MaxAttempts bounds how often an action is handed out after workers
	// are lost; then it fails with UNAVAILABLE.
	MaxAttempts int
	// CallerGrace is how long a task runs on after every caller waiting
	// for it went away; then it is cancelled.
	CallerGrace time.Duration
	// Retention is how long a finished operation stays queryable.
	Retention time.Duration
	// Queues are the provision queues in order; none means one default
	// queue that takes everything.
	Queues []platform.Queue
	// IgnoredProperties are platform property names dropped from every
	// action before matching (environment.go).
	IgnoredProperties []string
	// UnsatisfiableWait is how long an action that no known worker could
	// ever run stays queued before it fails with an explanation.
	UnsatisfiableWait time.Duration
	// StartupGrace delays that verdict after the scheduler starts, so
	// workers have time to register again after a restart.
	StartupGrace time.Duration
	// PriorityHalving is how many priority points (lower is more urgent)
	// double an invocation's fair share; 0 means DefaultPriorityHalving.
	PriorityHalving float64
	// Stickiness is, per invocation level, what switching a worker to
	// another invocation at that level costs; empty means pure fairness.
	Stickiness []time.Duration
	// PersistentWorkerStickiness is how long the fair choice may wait
	// while a worker stays on actions of a persistentWorkerKey it holds
	// warm (warm.go); 0 turns that preference off.
	PersistentWorkerStickiness time.Duration
	// Labels and Cohorts group workers for quotas (quota.go).
	Labels  []Label
	Cohorts []Cohort
	// PreemptionDelay is how long an instance below its min quota waits
	// for a slot to come free before running work is pre-empted for it.
	PreemptionDelay time.Duration
	// Preemption is how victims are stopped (suspend.go); "" means
	// PreemptCancel. MaxSuspend bounds a suspension; 0 means
	// DefaultMaxSuspend.
	Preemption PreemptionMode
	MaxSuspend time.Duration
	// SessionGrace is how long a worker whose session stream ended has to
	// open a new one before its leases are requeued (recovery.go).
	SessionGrace time.Duration
	// ReconcileWindow is how long, after a restore, the restored queued
	// actions wait for the workers to report the leases they were handed
	// before those were stored (reconcile.go); 0 means
	// DefaultReconcileWindow.
	ReconcileWindow time.Duration
	// ChrootInstances are the instances whose actions run with their
	// input root as "/" (chroot.go).
	ChrootInstances []string
	// Shapes is the duration history the scheduler learns from and
	// consults (shapehistory.go); nil learns nothing.
	Shapes *ShapeHistory
	// LongestFirst says whose invocations run their longest expected
	// actions first (longest.go); "" means LongestFirstGantry.
	LongestFirst LongestFirstMode
	// LearnedTimeouts shorten the timeouts of actions with history
	// (learnedtimeout.go); the zero value is off.
	LearnedTimeouts LearnedTimeouts
	// SizeClasses place actions on the smallest class of workers that
	// runs them about as fast as the largest (sizeclass.go); nil is off.
	// They need Shapes.
	SizeClasses *SizeClasses
	// TargetDrain is the time the autoscaling signal sizes the workers
	// for (autoscale.go); 0 means DefaultTargetDrain.
	TargetDrain time.Duration
	// Logger hears of leases lost with their workers; nil discards.
	Logger *slog.Logger
}

// DefaultPreemptionDelay is the default Config.PreemptionDelay.
const DefaultPreemptionDelay = 10 * time.Second

// DefaultSessionGrace is the default Config.SessionGrace: long enough for
// a worker whose connection broke to connect again, short enough that the
// actions of a dead worker start again elsewhere within about a second.
const DefaultSessionGrace = time.Second

// DefaultConfig returns the defaults documented in docs/CONFIGURATION.md:
// New fills in every zero field from here. config.Default sets the same
// values in its scheduler section (config is a leaf and does not import
// the scheduler); a test in internal/server keeps them equal.
func DefaultConfig() Config {
	return Config{
		HeartbeatInterval: 2 * time.Second,
		HeartbeatTimeout:  20 * time.Second,
		MaxAttempts:       3,
		CallerGrace:       time.Minute,
		Retention:         10 * time.Minute,
		UnsatisfiableWait: 10 * time.Minute,
		StartupGrace:      time.Minute,
		PriorityHalving:   DefaultPriorityHalving,
		PreemptionDelay:   DefaultPreemptionDelay,
		Preemption:        PreemptCancel,
		MaxSuspend:        DefaultMaxSuspend,
		SessionGrace:      DefaultSessionGrace,
		ReconcileWindow:   DefaultReconcileWindow,
		LongestFirst:      LongestFirstGantry,
		LearnedTimeouts:   LearnedTimeouts{Multiple: 5, Floor: 5 * time.Minute, MinSamples: 3},
		TargetDrain:       DefaultTargetDrain,

		PersistentWorkerStickiness: DefaultPersistentWorkerStickiness,
	}
}

// ErrNotFound is returned for an unknown operation name.
var ErrNotFound = errors.New("operation not found")

type taskState uint8

const (
	stateQueued taskState = iota
	stateLeased
	stateDone
)

// Task is one execution of an action. Several operations may share it.
type Task struct {
	ID           string
	Instance     string
	ActionDigest digest.Digest
	Platform     platform.Properties
	ActionBytes  []byte
	CommandBytes []byte
	// Queue is the provision queue the task waits in; Req what it asks of
	// a worker.
	Queue string
	Req   platform.Request

	bucketKey  string
	priority   int32
	stage      repb.ExecutionStage_Value
	seq        int64
	heapIndex  int
	attempts   int
	lease      *lease
	ops        []*Operation
	response   *repb.ExecuteResponse
	queuedAt   time.Time
	dedupNext  *Task
	lastWorker string
	// retries are the times it was taken from a worker, oldest first
	// (noteRetryLocked).
	retries []Retry
	// inv is the task's invocation: the lowest common ancestor of the
	// invocations of every operation that joined it.
	inv *inode
	// invPath is inv's path, kept for the status pages when the task
	// finishes and lets inv go. It shares the submitter's slice (a
	// prefix of it after joins), so keeping it costs nothing.
	invPath []string
	// stored: the task's unchanging record is in the store. The small
	// fields sit together at the end: a Task fits the 448-byte size
	// class, and a million finished ones are restored after a restart.
	stored bool
	// actionInStore: the task let go of its ActionBytes and CommandBytes,
	// committed in its record; a lease reads them back (actionstore.go).
	actionInStore bool
	// Cacheable is the submission's !DoNotCache: the task is shared by
	// equal submissions and its result may go to the ActionCache.
	Cacheable bool
	state     taskState
	// rank orders the tasks of an invocation that runs longest first
	// (longest.go): higher first; 0 for every task of one that does not.
	// It fills the padding after the flags. Once the task is done it
	// holds its expected time in milliseconds instead (expectedkept.go).
	rank uint32
}

type dedupKey struct {
	instance string
	action   digest.Digest
}

// dedupKey is the key t is deduplicated by: derived, not kept, as a
// million tasks each carry their instance and digest already.
func (t *Task) dedupKey() dedupKey { return dedupKey{t.Instance, t.ActionDigest} }

// dedupSeed seeds the fingerprints of in-flight keys.
var dedupSeed = maphash.MakeSeed()

// fingerprint condenses a dedup key to a map key: a uint64 hashes in one
// step and sits inline in the map, which matters with a million tasks.
// Tasks with equal fingerprints are chained (Task.dedupNext).
func (k dedupKey) fingerprint() uint64 {
	return maphash.String(dedupSeed, k.instance)*31 ^ maphash.String(dedupSeed, k.action.Hash) ^ uint64(k.action.Size)*0x9e3779b97f4a7c15 ^ uint64(k.action.Function)
}

type lease struct {
	id       string
	worker   *worker
	task     *Task
	lastSeen time.Time
	stage    repb.ExecutionStage_Value
	// cohort is the worker's cohort when the lease began (quota usage).
	cohort    string
	started   time.Time
	preempted bool
}

// executing reports whether the worker said it started the action: the
// worker reports EXECUTING once the action holds its cores (internal/worker
// toExecute), and the lease stays QUEUED while the worker fetches inputs
// or waits for a free core. Counts of "executing" use this, never the
// number of leases.
func (l *lease) executing() bool { return l.stage >= repb.ExecutionStage_EXECUTING }

// Operation is what a client sees: a name bound to a task.
type Operation struct {
	Name string
	task *Task
	// accepted is when the server took the request; invocation the
	// submitter's invocation path (the task's may be a prefix of it after
	// joins). Both are stored, for the completion log line after a
	// restart.
	accepted   time.Time
	invocation []string
	// meta is the submitter's RequestMetadata (tool, invocation ids,
	// mnemonic, target), encoded, nil without one; stored with the
	// operation (the same bytes: kept once, not decoded, while queued).
	meta []byte
	// stored: the operation's metadata record is in the store (when
	// hasMeta); meta itself is let go once the operation is reported.
	stored, hasMeta bool
	done            bool
	// watchers counts the calls following the operation (next to the
	// flags: an Operation stays in the 208-byte size class,
	// TestOperationFitsItsSizeClass).
	watchers int32
	// note is the submitter's SubmitRequest.Note, until the operation is
	// reported (finished.go).
	note any

	goneSince time.Time
	response  *repb.ExecuteResponse
	doneAt    time.Time
	// doneSeq is the journal's change count when the operation finished:
	// until that is stored, callers do not see it done (visible.go).
	doneSeq uint64
	// changed is closed at the next change; made when someone watches.
	changed chan struct{}
	// uwPrev and uwNext link the operation into the unwatched list.
	uwPrev, uwNext *Operation
}

// OperationState is a snapshot of an operation.
type OperationState struct {
	Name         string
	Instance     string
	ActionDigest digest.Digest
	Stage        repb.ExecutionStage_Value
	Done         bool
	// Response is set when Done.
	Response *repb.ExecuteResponse
	// Queue is the provision queue of the operation's task.
	Queue string
	// Accepted is when the server took the request (zero when not known:
	// restored from a record of an older Gantry whose task finished).
	Accepted time.Time
	// Invocation is the submitter's invocation path.
	Invocation []string
	// Metadata is the submitter's RequestMetadata, encoded (nil without
	// one; see DecodeMetadata); shared, not to be changed.
	Metadata []byte
	// DoneAt is when the scheduler took the result (server clock); set
	// when Done.
	DoneAt time.Time
	// Retries are the times its action was taken from a worker (lost,
	// pre-empted, suspended), oldest first; shared, not to be changed.
	Retries []Retry
	// TaskID is the task (execution) the operation follows; operations
	// of identical actions share one.
	TaskID string
	// Expected is the action's expected wall time from its shape's
	// duration history, as it was while it ran (expectedkept.go); 0 when
	// none was known.
	Expected time.Duration
}

// Scheduler is safe for concurrent use. One mutex guards the state; every
// operation under it is O(log n) or O(buckets), and nothing blocks under it.
type Scheduler struct {
	cfg   Config
	clock Clock
	// cache takes the results of completed leases that ask to be cached
	// (nil: none is); see ActionCacheWriter.
	cache ActionCacheWriter

	mu       sync.Mutex
	ops      map[string]*Operation
	inflight map[uint64]*Task
	queue    *queue
	jr       *journal
	fair     *fairness
	ten      *tenancy
	// preemptions counts actions pre-empted for min quotas.
	preemptions int64
	workers     map[string]*worker
	leases      map[string]*lease
	waiters     []*waiter
	nextSeq     int64
	frontSeq    int64
	listeners   []func(Event)
	queues      []platform.Queue
	// ignored are the property names dropped before matching
	// (environment.go).
	ignored []string
	// unwatched are the unfinished operations no caller is streaming;
	// finished are finished operations in the order they finished.
	unwatched opList
	finished  []*Operation
	// restoring is closed once the finished operations Attach left to
	// the background have joined; nil when none are left (restorelater.go).
	restoring chan struct{}
	// later are the records it joins, in name order, for lockFor to
	// tell a name still to come from one never stored.
	later *laterOps
	// restorePending counts the operations still to join then, so that
	// Stats counts them already.
	restorePending int
	// open are the unfinished operations in status-page order.
	open openOps
	// seen remembers every worker registered recently, for deciding that
	// no worker could ever run an action.
	seen    map[string]seenWorker
	started time.Time
	// idPrefix and idSerial make task and lease ids (newID).
	idPrefix string
	idSerial uint64
	// controls are operators' worker controls, by worker id; failures a
	// ring of recently failed operations (control.go).
	controls map[string]WorkerControl
	failures []FailedOperation
	failNext int
	// refused are the sticky kills in force (refuse.go).
	refused refusals

	// counters feed the metrics (metrics.go).
	counters schedCounters
	// handoffs measure the scheduler's share of each dispatch (handoff.go).
	handoffs handoffs
	// traceParents are the trace contexts of unfinished tasks submitted
	// with tracing on (metrics.go): kept aside so Task stays small.
	traceParents map[*Task]string
	// halted is closed when Run returns: open sessions end then, and no
	// new ones open (recovery.go).
	halted chan struct{}
	// recon holds restored queued tasks back after a restore until the
	// workers reported their leases (reconcile.go); nil when none are.
	recon *reconciliation
	// rep tells the OnFinished listeners of finished operations
	// (finished.go).
	rep reporter
	// shapeOf are the shapes of unfinished tasks (longest.go), when
	// Config.Shapes keeps a history.
	shapeOf map[*Task]*taskShape
	// classWorkers counts the registered workers per size class
	// (sizeclassplace.go).
	classWorkers []int
	// shapeKeys are the shape keys derived lately (shapecache.go).
	shapeKeys shapeKeyCache
}

type seenWorker struct {
	platform platform.Worker
	at       time.Time
}

// setDefault sets *v to def when it is zero or negative.
func setDefault[T time.Duration | int | float64](v *T, def T) {
	if *v <= 0 {
		*v = def
	}
}

// New returns a scheduler that writes the results of completed leases
// that ask for it to cache (nil: no ActionCache, nothing is cached).
func New(cfg Config, clock Clock, cache ActionCacheWriter) *Scheduler {
	def := DefaultConfig()
	setDefault(&cfg.HeartbeatInterval, def.HeartbeatInterval)
	setDefault(&cfg.HeartbeatTimeout, def.HeartbeatTimeout)
	setDefault(&cfg.MaxAttempts, def.MaxAttempts)
	setDefault(&cfg.CallerGrace, def.CallerGrace)
	setDefault(&cfg.Retention, def.Retention)
	setDefault(&cfg.UnsatisfiableWait, def.UnsatisfiableWait)
	setDefault(&cfg.PriorityHalving, def.PriorityHalving)
	setDefault(&cfg.PreemptionDelay, def.PreemptionDelay)
	setDefault(&cfg.MaxSuspend, def.MaxSuspend)
	setDefault(&cfg.SessionGrace, def.SessionGrace)
	setDefault(&cfg.ReconcileWindow, def.ReconcileWindow)
	setDefault(&cfg.TargetDrain, def.TargetDrain)
	if cfg.Preemption == "" {
		cfg.Preemption = def.Preemption
	}
	if cfg.LongestFirst == "" {
		cfg.LongestFirst = def.LongestFirst
	}
	// 0 is a valid StartupGrace (no delay); only a negative one is not.
	if cfg.StartupGrace < 0 {
		cfg.StartupGrace = 0
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if clock == nil {
		clock = RealClock{}
	}
	f := newFairness(cfg.PriorityHalving, cfg.Stickiness)
	return &Scheduler{
		cfg: cfg, clock: clock, cache: cache, fair: f, ten: newTenancy(cfg),
		ops: map[string]*Operation{}, inflight: map[uint64]*Task{},
		queue: newQueue(f, cfg.PersistentWorkerStickiness), workers: map[string]*worker{}, leases: map[string]*lease{},
		queues: cfg.Queues, ignored: cfg.IgnoredProperties, seen: map[string]seenWorker{}, started: clock.Now(),
		idPrefix: uuid.NewString()[:13] + "-", refused: refusals{}, halted: make(chan struct{}),
	}
}

// NoQueueError is returned by Submit when no provision queue is eligible
// for the action's platform. Its Analysis says why, queue by queue.
type NoQueueError struct {
	Platform platform.Properties
	Analysis platform.Analysis
}

func (e *NoQueueError) Error() string {
	return fmt.Sprintf("no provision queue accepts an action with platform {%s}: %s", e.Platform, e.Analysis.Summary())
}

// SetQueues replaces the provision queues. Queued work stays where it is;
// new actions are placed by the new queues.
func (s *Scheduler) SetQueues(qs []platform.Queue) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.queues = qs
}

// ExplainQueues analyses which queue an action with props would go to.
func (s *Scheduler) ExplainQueues(props platform.Properties) platform.Analysis {
	s.mu.Lock()
	defer s.mu.Unlock()
	return platform.SelectQueue(s.queues, props.Without(s.ignored))
}

// WorkerVerdict says whether one worker could ever run an action.
type WorkerVerdict struct {
	Worker  string
	Reasons []platform.Reason
}

// ExplainWorkers lists, for every registered or recently seen worker,
// why it could not run an action in queue with request r (no reasons: it
// could). The closest worker comes first. The reasons are the platform
// step's (feasibility.go); an action not yet queued has no instance,
// quota or invocation for the other steps to judge (WhyQueued asks them).
func (s *Scheduler) ExplainWorkers(queue string, r platform.Request) []WorkerVerdict {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.explainWorkersLocked(queue, r)
}

func (s *Scheduler) explainWorkersLocked(queue string, r platform.Request) []WorkerVerdict {
	out := make([]WorkerVerdict, 0, len(s.seen))
	for id, sw := range s.seen {
		out = append(out, WorkerVerdict{Worker: id, Reasons: platformReasons(sw.platform, queue, r)})
	}
	sortVerdicts(out)
	return out
}

// sortVerdicts puts the closest worker (fewest reasons) first, then by
// id.
func sortVerdicts(vs []WorkerVerdict) {
	sort.Slice(vs, func(i, j int) bool {
		if len(vs[i].Reasons) != len(vs[j].Reasons) {
			return len(vs[i].Reasons) < len(vs[j].Reasons)
		}
		return vs[i].Worker < vs[j].Worker
	})
}

// Config returns the effective configuration.
func (s *Scheduler) Config() Config { return s.cfg }

// SubmitRequest describes an action to execute.
type SubmitRequest struct {
	// Name is the operation name to use; empty picks a new one.
	Name         string
	Instance     string
	ActionDigest digest.Digest
	Action       *repb.Action
	ActionBytes  []byte
	CommandBytes []byte
	Platform     platform.Properties
	Priority     int32
	// DoNotCache: never merged with other executions, never cached.
	DoNotCache bool
	// Invocation is the operation's invocation path (see fair.go); empty
	// queues it at the root.
	Invocation []string
	// TraceParent links the task to the submitter's trace (see
	// Scheduler.TraceParent); "" when tracing is off.
	TraceParent string
	// Accepted is when the server took the request (the start of the
	// operation's duration accounting); zero means now. It is stored with
	// the operation, so it survives a restart.
	Accepted time.Time
	// Metadata is the caller's RequestMetadata, encoded (nil without one;
	// EncodeMetadata): kept and stored with the operation as it is, for
	// its log line, history entry and status page, also after a restart.
	// Not changed after Submit.
	Metadata []byte
	// Note is handed back, untouched, to the OnFinished listeners when
	// the operation finishes (what the submitter knew that the scheduler
	// does not keep). It is not stored.
	Note any
	// CriticalPath is the submitter's estimate of the work that waits for
	// this action: the expected duration of its longest chain of
	// dependents (protocol.CriticalPathHeader; 0: none told). It only
	// orders the invocation's tasks when they run longest first
	// (criticalpath.go).
	CriticalPath time.Duration

	// shape and longest are set by Submit (longest.go).
	shape   *taskShape
	longest bool
}

// Submit creates an operation for the action. An identical cacheable
// action already in flight in the same instance is joined rather than run
// again.
func (s *Scheduler) Submit(req SubmitRequest) (string, error) {
	req.shape, req.longest = s.shapeForSubmit(&req)
	name, ticket, handed, err := s.submit(req)
	if err != nil {
		return "", err
	}
	if handed {
		// The action went straight to a waiting worker: its result, soon
		// for a short action, starts the commit that stores the
		// submission too (one commit for the action, not two in a row).
		// A longer action's submission is stored after submitStoreDelay.
		kick := time.AfterFunc(submitStoreDelay, s.jr.kickFlush)
		defer kick.Stop()
	}
	if err := s.durable(context.Background(), ticket); err != nil {
		return "", err
	}
	return name, nil
}

// submitStoreDelay is how long a submission handed straight to a
// waiting worker waits for its result's commit before it starts one of
// its own: a trivial action's result comes within a millisecond or two;
// the caller of a longer one hears of its operation's name this much
// later (the result is never delayed).
const submitStoreDelay = 5 * time.Millisecond

// submit queues the action of req; handed reports that a waiting worker
// took it at once, and that the change was marked but no commit started.
func (s *Scheduler) submit(req SubmitRequest) (string, uint64, bool, error) {
	s.lockFor(req.Name)
	defer s.mu.Unlock()
	req.Platform = s.chrootPlatform(req.Instance, req.Platform.Without(s.ignored))
	preq, err := platform.ParseRequest(req.Platform)
	if err != nil {
		return "", 0, false, &Error{Kind: ErrInvalid, Msg: err.Error()}
	}
	name := req.Name
	if name == "" {
		name = "op-" + s.newID()
	}
	if _, taken := s.ops[name]; taken {
		return "", 0, false, errorf(ErrExists, "operation name %s is taken", name)
	}
	analysis := platform.SelectQueue(s.queues, req.Platform)
	if analysis.Chosen < 0 {
		return "", 0, false, &NoQueueError{Analysis: analysis, Platform: req.Platform}
	}
	queueName := analysis.Verdicts[analysis.Chosen].Queue
	now := s.clock.Now()
	if err := s.environmentRefusalLocked(queueName, preq, now); err != nil {
		return "", 0, false, err
	}
	key := dedupKey{req.Instance, req.ActionDigest}
	if err := s.refused.check(key, now); err != nil {
		return "", 0, false, err
	}
	var t *Task
	if !req.DoNotCache {
		t = s.inflightLocked(key)
	}
	handed := false
	if t != nil {
		if req.Priority < t.priority && t.state == stateQueued {
			t.priority = req.Priority
			s.queue.fix(t)
		}
		s.joinTailLocked(t, req.shape)
		s.joinInvocationLocked(t, req.Invocation, now)
	} else {
		if preq, err = s.placeLocked(req.shape, preq, now); err != nil {
			return "", 0, false, err
		}
		s.nextSeq++
		t = &Task{
			ID: s.newID(), Instance: req.Instance, ActionDigest: req.ActionDigest,
			Platform: req.Platform, ActionBytes: req.ActionBytes, CommandBytes: req.CommandBytes,
			Cacheable: !req.DoNotCache, Queue: queueName, Req: preq,
			bucketKey: bucketKeyOf(queueName, req.Instance, preq.Properties), priority: req.Priority, seq: s.nextSeq,
			heapIndex: -1, stage: repb.ExecutionStage_QUEUED, queuedAt: now,
		}
		t.inv = s.fair.node(req.Invocation)
		t.invPath = t.inv.keys
		s.setTraceParentLocked(t, req.TraceParent)
		s.noteShapeLocked(t, req.shape, req.longest)
		if t.Cacheable {
			fp := key.fingerprint()
			t.dedupNext = s.inflight[fp]
			s.inflight[fp] = t
		}
		s.enqueueLocked(t)
		handed = t.state == stateLeased && s.jr != nil
	}
	accepted := req.Accepted
	if accepted.IsZero() {
		accepted = now
	}
	op := &Operation{Name: name, task: t, goneSince: now, accepted: accepted, invocation: s.fair.canonical(req.Invocation), meta: req.Metadata, hasMeta: req.Metadata != nil, note: req.Note}
	s.unwatched.add(op)
	t.ops = append(t.ops, op)
	s.ops[op.Name] = op
	s.open.add(op)
	s.touchTask(t)
	s.touchOp(op)
	s.emit(Event{Kind: EventSubmitted, Task: t.ID, Operation: op.Name})
	if handed {
		return op.Name, s.jr.seqLocked(), true, nil
	}
	return op.Name, s.ticketLocked(), false, nil
}

// enqueueLocked puts a task on the queue, or straight to a waiting worker.
func (s *Scheduler) enqueueLocked(t *Task) {
	t.state = stateQueued
	t.stage = repb.ExecutionStage_QUEUED
	s.touchTask(t)
	if len(s.waiters) > 0 {
		// Locality: of the idle workers that can take it, one warm for
		// its persistentWorkerKey (warm.go), then the one whose last
		// invocation is closest to the task's (deepest common ancestor),
		// the longest waiting among equals.
		b := &bucket{key: t.bucketKey, queue: t.Queue, instance: t.Instance, req: t.Req}
		chosen, depth, warm := -1, -1, false
		key, now := persistentKey(t.Req), s.clock.Now()
		for i, w := range s.waiters {
			if !w.accepts(b, t) {
				continue
			}
			d := 0
			if w.worker.inv != nil {
				anc, _, _ := lca(w.worker.inv, t.inv)
				d = anc.depth
			}
			hot := w.worker.warm.has(key, now)
			if hot != warm && !hot {
				continue
			}
			if hot != warm || d > depth {
				chosen, depth, warm = i, d, hot
				if d == t.inv.depth && (hot || key == "") {
					break
				}
			}
		}
		if chosen >= 0 {
			w := s.waiters[chosen]
			s.waiters = append(s.waiters[:chosen], s.waiters[chosen+1:]...)
			s.leaseLocked(t, w.worker, w)
			return
		}
	}
	s.queue.push(t, s.clock.Now())
}

// joinInvocationLocked moves t to the lowest common ancestor of its
// invocation and path, when a caller from another invocation joins it.
func (s *Scheduler) joinInvocationLocked(t *Task, path []string, now time.Time) {
	n := s.fair.node(path)
	anc, _, _ := lca(t.inv, n)
	if anc == t.inv {
		s.fair.unref(n)
		return
	}
	s.fair.ref(anc)
	s.fair.unref(n)
	old := t.inv
	// The common ancestor's path is a prefix of the task's.
	t.invPath = t.invPath[:anc.depth:anc.depth]
	switch t.state {
	case stateQueued:
		if s.heldLocked(t) {
			t.inv = anc // it joins the queue later, under anc
			break
		}
		s.queue.remove(t)
		t.inv = anc
		s.queue.push(t, now)
	case stateLeased:
		s.fair.started(old, -1, now)
		t.inv = anc
		s.fair.adjust(anc, +1)
	default:
		t.inv = anc
	}
	s.fair.unref(old)
}

// releaseInvocationLocked drops a finished task's hold on its invocation.
func (s *Scheduler) releaseInvocationLocked(t *Task) {
	if t.inv != nil {
		s.fair.unref(t.inv)
		t.inv = nil
	}
}

// Watch returns the operation's state and a channel closed at its next change.
func (s *Scheduler) Watch(name string) (OperationState, <-chan struct{}, error) {
	s.lockFor(name)
	defer s.mu.Unlock()
	op, ok := s.ops[name]
	if !ok {
		return OperationState{}, nil, ErrNotFound
	}
	if op.changed == nil {
		op.changed = make(chan struct{})
	}
	return s.stateLocked(op), op.changed, nil
}

func (s *Scheduler) stateLocked(op *Operation) OperationState {
	t := op.task
	st := OperationState{Name: op.Name, TaskID: t.ID, Instance: t.Instance, ActionDigest: t.ActionDigest, Stage: t.stage, Queue: t.Queue,
		Accepted: op.accepted, Invocation: op.invocation, Metadata: op.meta, Retries: t.retries, Expected: s.expectedOfLocked(t)}
	if op.done && !s.storedLocked(op) {
		if st.Stage == repb.ExecutionStage_COMPLETED {
			st.Stage = repb.ExecutionStage_EXECUTING
		}
		return st
	}
	if op.done {
		st.Done, st.Stage, st.Response, st.DoneAt = true, repb.ExecutionStage_COMPLETED, op.response, op.doneAt
	}
	return st
}

// List returns the states of all known operations.
func (s *Scheduler) List() []OperationState {
	s.lockAll()
	defer s.mu.Unlock()
	out := make([]OperationState, 0, len(s.ops))
	for _, op := range s.ops {
		out = append(out, s.stateLocked(op))
	}
	return out
}

// AddWatcher records that a caller is streaming the operation. Pair it
// with RemoveWatcher; when no caller is left for CallerGrace, the work is
// cancelled.
func (s *Scheduler) AddWatcher(name string) error {
	s.lockFor(name)
	defer s.mu.Unlock()
	op, ok := s.ops[name]
	if !ok {
		return ErrNotFound
	}
	op.watchers++
	s.unwatched.remove(op)
	return nil
}

// RemoveWatcher undoes AddWatcher.
func (s *Scheduler) RemoveWatcher(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if op, ok := s.ops[name]; ok && op.watchers > 0 {
		op.watchers--
		if op.watchers == 0 && !op.done {
			op.goneSince = s.clock.Now()
			s.unwatched.add(op)
			// Let the change channel go with the last stream: a queued
			// operation whose client left keeps none. Anyone else waiting
			// on it (WaitOperation) wakes, finds no change and watches
			// again.
			s.notifyOpLocked(op)
		}
	}
}

// Cancel cancels one operation. The task behind it stops only when no
// other operation shares it.
func (s *Scheduler) Cancel(name string) error {
	s.lockFor(name)
	err := s.cancelLocked(name)
	ticket := s.ticketLocked()
	s.mu.Unlock()
	if err != nil {
		return err
	}
	return s.durable(context.Background(), ticket)
}

func (s *Scheduler) cancelLocked(name string) error {
	return s.cancelWithLocked(name, "operation cancelled by request")
}

func (s *Scheduler) cancelWithLocked(name, msg string) error {
	op, ok := s.ops[name]
	if !ok {
		return ErrNotFound
	}
	if op.done {
		return nil
	}
	s.finishOpLocked(op, &repb.ExecuteResponse{Status: resultStatus(codes.Canceled, msg)})
	t := op.task
	for _, other := range t.ops {
		if !other.done {
			return nil
		}
	}
	s.abandonTaskLocked(t, "all operations waiting for it were cancelled")
	return nil
}

// abandonTaskLocked stops a task nobody needs any more.
func (s *Scheduler) abandonTaskLocked(t *Task, reason string) {
	switch t.state {
	case stateQueued:
		s.queue.remove(t)
	case stateLeased:
		l := t.lease
		l.worker.commands = append(l.worker.commands, LeaseCommand{LeaseID: l.id, Kind: CommandCancel, Reason: reason})
		s.dropLeaseLocked(l)
		s.holdCancelledLocked(l)
	}
	t.state = stateDone
	s.touchTask(t)
	s.forgetInflightLocked(t)
	s.releaseInvocationLocked(t)
	s.setTraceParentLocked(t, "")
	s.keepExpectedLocked(t)
	s.forgetShapeLocked(t)
	s.emit(Event{Kind: EventCancelled, Task: t.ID, Reason: reason})
}

func (s *Scheduler) forgetInflightLocked(t *Task) {
	if !t.Cacheable {
		return
	}
	fp := t.dedupKey().fingerprint()
	var prev *Task
	for x := s.inflight[fp]; x != nil; prev, x = x, x.dedupNext {
		if x != t {
			continue
		}
		switch {
		case prev != nil:
			prev.dedupNext = t.dedupNext
		case t.dedupNext != nil:
			s.inflight[fp] = t.dedupNext
		default:
			delete(s.inflight, fp)
		}
		t.dedupNext = nil
		return
	}
}

// inflightLocked returns the unfinished cacheable task for key, or nil.
func (s *Scheduler) inflightLocked(key dedupKey) *Task {
	for t := s.inflight[key.fingerprint()]; t != nil; t = t.dedupNext {
		if t.dedupKey() == key {
			return t
		}
	}
	return nil
}

func (s *Scheduler) finishOpLocked(op *Operation, resp *repb.ExecuteResponse) {
	s.unwatched.remove(op)
	s.open.remove(op)
	s.finished = append(s.finished, op)
	op.done = true
	op.response = resp
	op.doneAt = s.clock.Now()
	s.noteFinishedLocked(op, resp)
	s.touchOp(op)
	s.notifyDoneLocked(op)
}

func (s *Scheduler) notifyOpLocked(op *Operation) {
	if op.changed != nil {
		close(op.changed)
		op.changed = nil
	}
}

func (s *Scheduler) notifyTaskLocked(t *Task) {
	for _, op := range t.ops {
		if !op.done {
			s.notifyOpLocked(op)
		}
	}
}

// completeTaskLocked finishes a task and every operation on it.
func (s *Scheduler) completeTaskLocked(t *Task, resp *repb.ExecuteResponse) {
	t.state = stateDone
	t.stage = repb.ExecutionStage_COMPLETED
	s.touchTask(t)
	t.response = resp
	// It is never handed out again: keep only what the retained
	// operations need.
	t.ActionBytes, t.CommandBytes = nil, nil
	s.setTraceParentLocked(t, "")
	s.keepExpectedLocked(t)
	s.forgetShapeLocked(t)
	s.forgetInflightLocked(t)
	s.releaseInvocationLocked(t)
	for _, op := range t.ops {
		if !op.done {
			s.finishOpLocked(op, resp)
		}
	}
}

// Stats is a summary for metrics and status pages.
type Stats struct {
	Queued, Leased, Operations, Workers int
	// Leased splits into Held and Executing (Leased = Held + Executing):
	// Executing counts leases whose worker reported the action started
	// (it holds its cores, or uploads its outputs after running); Held
	// counts leases a worker has but has not started (fetching inputs or
	// waiting for a free core), and restored leases until their worker
	// reports them again.
	Held, Executing int
	Preemptions     int64
	// Suspended counts leases stopped for pre-emption now (suspend mode);
	// SuspendExpired those cancelled after scheduler.max_suspend.
	Suspended      int
	SuspendExpired int64
}

// Stats returns counts of the scheduler's state.
func (s *Scheduler) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := Stats{Queued: s.queue.n + s.recon.heldCount(), Leased: len(s.leases), Operations: len(s.ops) + s.restorePending, Workers: len(s.workers), Preemptions: s.preemptions,
		Suspended: len(s.ten.suspended), SuspendExpired: s.ten.expired}
	for _, l := range s.leases {
		if l.executing() {
			st.Executing++
		}
	}
	st.Held = st.Leased - st.Executing
	return st
}

func (s *Scheduler) String() string {
	st := s.Stats()
	return fmt.Sprintf("scheduler: %d queued, %d leased, %d operations, %d workers", st.Queued, st.Leased, st.Operations, st.Workers)
}

// newID returns an id unique to this scheduler: a random prefix chosen at
// start and a counter. Cheaper than a UUID per task and lease.
func (s *Scheduler) newID() string {
	s.idSerial++
	return s.idPrefix + strconv.FormatUint(s.idSerial, 36)
}

// opList is an intrusive doubly linked list of operations.
type opList struct {
	head *Operation
	n    int
}

func (l *opList) add(op *Operation) {
	if op.uwPrev != nil || l.head == op {
		return
	}
	op.uwNext = l.head
	if l.head != nil {
		l.head.uwPrev = op
	}
	l.head = op
	l.n++
}

func (l *opList) remove(op *Operation) {
	if op.uwPrev == nil && l.head != op {
		return
	}
	if op.uwPrev != nil {
		op.uwPrev.uwNext = op.uwNext
	} else {
		l.head = op.uwNext
	}
	if op.uwNext != nil {
		op.uwNext.uwPrev = op.uwPrev
	}
	op.uwPrev, op.uwNext = nil, nil
	l.n--
}
