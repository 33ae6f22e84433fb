package batch

import (
	"context"
	"fmt"
	"time"
)

// Queue names one stage of the chain a job flows through.
type Queue int

// The queues, in chain order. A job normally goes Scan → Cache → Upload →
// Execute → Download; a job that must run on this machine leaves the remote
// chain for Local, and a job whose result is already known skips to
// Download.
const (
	Scan Queue = iota
	Cache
	Upload
	Execute
	Download
	Local
	numQueues
)

// Queues lists every queue in chain order.
var Queues = []Queue{Scan, Cache, Upload, Execute, Download, Local}

// serviceOrder is the order the dispatcher offers tokens in: the last queue
// first, so that work already far along drains before new work enters the
// chain and takes the tokens it would need (BuildStream's rule against
// starvation).
var serviceOrder = []Queue{Local, Download, Execute, Upload, Cache, Scan}

var queueNames = [numQueues]string{"scan", "cache", "upload", "execute", "download", "local"}

// String returns the queue's lower-case name, as shown to users.
func (q Queue) String() string {
	if q < 0 || q >= numQueues {
		return fmt.Sprintf("queue(%d)", int(q))
	}
	return queueNames[q]
}

// Resource returns the resource whose tokens a step of queue q takes: the
// local work (scan hashes files and may run a dependency listing; local runs
// the command) is bounded by Process, and the cache lookup is a small
// download.
func (q Queue) Resource() Resource {
	switch q {
	case Upload:
		return Uploads
	case Execute:
		return Executes
	case Cache, Download:
		return Downloads
	default:
		return Process
	}
}

// Next says where a job goes after a step that succeeded.
type Next int

const (
	// Continue moves the job to the next queue of the chain (after
	// Download or Local the job is done).
	Continue Next = iota
	// SkipToDownload moves the job straight to Download: its result is
	// already known, typically a cache hit found by the Cache step.
	SkipToDownload
	// RunLocally moves the job to the Local queue: it cannot (or can no
	// longer) run remotely, for example a command the compiler launcher
	// does not send, or a fallback after an infrastructure failure.
	RunLocally
)

// Result is what a step reports for one job.
type Result struct {
	// Err, when not nil, fails the job; Next is then ignored. It should
	// say what went wrong in words a user can act on (a compile error is
	// a failure too: say so and put the compiler's message in Output).
	Err error
	// Next is where the job goes when Err is nil.
	Next Next
	// Output is text to show the user for this job (a compiler's warnings
	// or errors), shown as soon as the step ends.
	Output []byte
	// Stats are added to the job's and the run's totals.
	Stats Stats
}

// Stats are the counters a step reports, summed over the run.
type Stats struct {
	BytesUp, BytesDown int64
	BlobsUp, BlobsDown int
	// CacheHit marks a result served from the ActionCache (a Cache step
	// returning SkipToDownload counts as a hit without setting it).
	CacheHit bool
	// Ran is how long the job's command ran (as the remote worker
	// reported it, or the local run), 0 when not known: it estimates the
	// duration of the jobs still to run (criticalpath.go).
	Ran time.Duration
}

func (s *Stats) add(o Stats) {
	s.BytesUp += o.BytesUp
	s.BytesDown += o.BytesDown
	s.BlobsUp += o.BlobsUp
	s.BlobsDown += o.BlobsDown
	s.CacheHit = s.CacheHit || o.CacheHit
	s.Ran += o.Ran
}

// Step does one queue's work for one job. Do is called with the job's Task;
// the scheduler never runs two steps of the same task at once, and every
// step of a task happens after the previous one returned, so a step may
// read and write Task.Data without locking. Do must return when ctx is
// cancelled (the user pressed Ctrl-C), with an error.
type Step interface {
	Do(ctx context.Context, t *Task) Result
}

// StepFunc makes a function a Step.
type StepFunc func(ctx context.Context, t *Task) Result

// Do calls f.
func (f StepFunc) Do(ctx context.Context, t *Task) Result { return f(ctx, t) }

// Steps holds the step of each queue. A nil step passes every job on with
// Continue without taking a token (for example Cache when the user asked
// for no caching).
type Steps struct {
	Scan, Cache, Upload, Execute, Download, Local Step
}

func (s Steps) of(q Queue) Step {
	switch q {
	case Scan:
		return s.Scan
	case Cache:
		return s.Cache
	case Upload:
		return s.Upload
	case Execute:
		return s.Execute
	case Download:
		return s.Download
	case Local:
		return s.Local
	}
	return nil
}

// Task is one job's passage through the queues.
type Task struct {
	// Job is the job, read-only.
	Job *Job
	// Data belongs to the steps: for example Scan stores the prepared
	// remote action here and later steps use it. The scheduler never
	// reads it.
	Data any
	// CriticalPath is the scheduler's estimate of the work waiting for
	// this job, the longest chain of its dependents (criticalpath.go),
	// set before its Execute step: that step tells the server.
	CriticalPath time.Duration
}
