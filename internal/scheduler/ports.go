package scheduler

import (
	"context"
	"time"

	"github.com/gantry-build/gantry/internal/platform"
)

// The ports are what the scheduler's callers may ask of it, one small
// interface per kind of caller, so that a service reaches only the part
// of the scheduler it serves: the Execution service submits and follows
// operations, the worker service speaks the lease protocol, the admin
// service changes controls, and the status pages and metrics read a
// snapshot. Only the assembly (internal/server) holds a *Scheduler: it
// builds it, runs it (Attach, Run, Tick), applies a reloaded config, and
// hands each service the ports it needs.

// Operations is the port of the Execution service: submitting actions,
// following and cancelling their operations.
type Operations interface {
	// Submit queues an action and names its operation.
	Submit(req SubmitRequest) (string, error)
	// Watch is an operation's state now and a channel closed at its next
	// change.
	Watch(name string) (OperationState, <-chan struct{}, error)
	// List is every operation known.
	List() []OperationState
	// AddWatcher and RemoveWatcher count the callers following an
	// operation (one with none is cancelled after a grace period).
	AddWatcher(name string) error
	RemoveWatcher(name string)
	// Cancel cancels an operation.
	Cancel(name string) error
	// OnFinished calls f for every operation that finishes.
	OnFinished(f func(FinishedOperation))
	// Answered keeps an operation the caller ended itself (a cache hit)
	// with the finished ones.
	Answered(a AnsweredOperation)
	// RunsInChroot reports whether instance's actions run in a chroot
	// (their inputs must then hold what the chroot needs).
	RunsInChroot(instance string) bool
}

// Leases is the port of the worker service: the lease protocol
// (register, poll, heartbeat, complete) that workers speak.
type Leases interface {
	// RegisterWorker registers (or registers again) a worker.
	RegisterWorker(info WorkerInfo)
	// RegisterWorkerHolding registers a worker that reports the leases
	// it holds: the scheduler keeps those and requeues the rest.
	RegisterWorkerHolding(info WorkerInfo, held []string) int
	// OpenSession ties a worker's presence to a stream.
	OpenSession(workerID string) (*Session, error)
	// PollMany leases up to req.Limit tasks that fit req.Free, waiting
	// until ctx ends for one.
	PollMany(ctx context.Context, req PollRequest) ([]*Assignment, error)
	// Heartbeat renews a worker's leases and returns its commands.
	Heartbeat(workerID string, reports []LeaseReport) ([]LeaseCommand, error)
	// Complete ends leases with their results, writing those that ask
	// for it to the ActionCache first; stored waits for them to be
	// stored. It is the one way a lease ends with a result.
	Complete(ctx context.Context, workerID string, cs []Completion) (accepted []bool, stored func())
	// CompleteLater is Complete for a worker told later that its results
	// are stored (completelater.go): Stored says when the ticket is, and
	// StartStoring starts the commit.
	CompleteLater(ctx context.Context, workerID string, cs []Completion) (accepted []bool, ticket uint64)
	StartStoring()
	Stored(ticket uint64) bool
	// WaitStored waits until Stored(ticket) is settled (or ctx ends).
	WaitStored(ctx context.Context, ticket uint64)
	// WorkerControlOf is what operators asked of a worker (drain, pause,
	// terminate), which the heartbeat passes on.
	WorkerControlOf(id string) WorkerControl
	// TraceParent is the trace context of a task's operation.
	TraceParent(t *Task) string
	// Config is the scheduler's configuration (heartbeat timing).
	Config() Config
}

// Controls is the port of the admin service's changes: worker controls
// (drain, pause), kills, and quotas.
type Controls interface {
	ControlWorker(id string, f func(*WorkerControl)) (WorkerControl, error)
	WorkerControlOf(id string) WorkerControl
	WorkerControls() map[string]WorkerControl
	Kill(name, reason string, refuse time.Duration) (alreadyDone bool, err error)
	ValidateQuota(q Quota) error
	SetQuota(q Quota) (warning string, err error)
	DeleteQuota(instance, cohort string) bool
	QuotaList() []QuotaStatus
	QuotaOf(instance, cohort string) (QuotaStatus, error)
	Cohorts() map[string]int
	QuotaWarnings() []string
}

// Snapshot is the read-only port of the status pages, the metrics and
// the admin service's questions: what is queued, running and known now.
// Each call copies under the scheduler's lock; nothing it returns
// changes the scheduler.
type Snapshot interface {
	Stats() Stats
	MetricsSnapshot() MetricsSnapshot
	Autoscaling() Autoscaling
	Workers() []WorkerStatus
	Running() []WorkerLeases
	QueueCounts() []QueuedCount
	Invocations() []InvocationStats
	Operation(name string) (OperationInfo, error)
	Operations(offset, limit int) (ops []OperationInfo, total int)
	Failures(offset, limit int) (fs []FailedOperation, total int)
	WhyQueued(name string) (QueuedAnalysis, error)
	MatchedProperties(props platform.Properties) platform.Properties
	ExplainQueues(props platform.Properties) platform.Analysis
	ExplainWorkers(queue string, r platform.Request) []WorkerVerdict
}

// Admin is the port of the admin service: it changes controls and
// answers questions from a snapshot.
type Admin interface {
	Controls
	Snapshot
}

var (
	_ Operations = (*Scheduler)(nil)
	_ Leases     = (*Scheduler)(nil)
	_ Controls   = (*Scheduler)(nil)
	_ Snapshot   = (*Scheduler)(nil)
	_ Admin      = (*Scheduler)(nil)
)
