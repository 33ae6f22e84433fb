package batch

import "time"

// EventKind says what happened.
type EventKind int

const (
	// StepStarted: a step of Job started in Queue.
	StepStarted EventKind = iota
	// StepOutput: a step of Job that succeeded had Output to show.
	StepOutput
	// JobDone: Job went through the chain (CacheHit, Local say how).
	JobDone
	// JobFailed: a step of Job failed in Queue with Err (and Output).
	JobFailed
	// JobCancelled: the step of Job in Queue gave up because the run was
	// stopped (it returned an error wrapping context.Canceled).
	JobCancelled
	// JobSkipped: Job will not run because Cause failed.
	JobSkipped
	// Stopping: no new job enters the chain; Err says why.
	Stopping
	// Suspended and Resumed: dispatch was paused or resumed.
	Suspended
	Resumed
	// Tick: time passed (for the elapsed time and rate).
	Tick
	// End: the run is over; the snapshot is final.
	End
)

// Event is one thing that happened during a run.
type Event struct {
	Kind     EventKind
	Job      string
	Queue    Queue
	Err      error
	Output   []byte
	CacheHit bool
	Local    bool
	Cause    string
}

// QueueCount is one queue's load.
type QueueCount struct {
	Waiting, Running int
}

// Snapshot is the run's state after an event, for a progress display.
type Snapshot struct {
	Elapsed time.Duration
	Total   int
	// Done counts the jobs that succeeded, CacheHits and Local those of
	// them served from the cache or run locally.
	Done, CacheHits, Local     int
	Failed, Skipped, Cancelled int
	// Blocked counts the jobs waiting for their deps.
	Blocked   int
	Queues    [numQueues]QueueCount
	Suspended bool
	Stopping  bool
}

// Finished counts the jobs that will not change any more.
func (s Snapshot) Finished() int { return s.Done + s.Failed + s.Skipped + s.Cancelled }

// Rate is the number of jobs done per second so far.
func (s Snapshot) Rate() float64 {
	if s.Elapsed <= 0 {
		return 0
	}
	return float64(s.Done) / s.Elapsed.Seconds()
}

// Progress is told about a run as it goes. Run calls it from one goroutine
// only, never concurrently, and waits for it, so it must be quick (a
// display throttles its redraws itself).
type Progress interface {
	Update(e Event, s Snapshot)
}

type stoppedError struct{}

func (stoppedError) Error() string { return "stopped: waiting for the running steps to end" }

var errStopped error = stoppedError{}
