package batch

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// taskState is where a task stands.
type taskState int

const (
	blocked   taskState = iota // waiting for its deps
	queued                     // ready in a queue, waiting for a token
	running                    // a step is running
	succeeded                  // went through the chain
	failed                     // a step failed
	skipped                    // a dep failed, so it never started
	cancelled                  // its step was cut short by the stop
)

// task is the scheduler's record of one job.
type task struct {
	Task
	state      taskState
	exclusive  bool // holds or wants its token exclusively
	registered bool // counted in tokens.waiting
	pending    int  // deps not yet succeeded
	dependants []*task
	started    time.Time // when the running step started
	stats      Stats
	cacheHit   bool
	local      bool
}

// start is one step the dispatcher decided to run.
type start struct {
	t *task
	q Queue
}

// core is the scheduler's state machine, with no goroutines and no clock of
// its own: dispatch says which steps to start, finish takes a step's
// result. The Scheduler drives it with real steps; the tests drive it in
// virtual time.
type core struct {
	tasks     []*task
	ready     [numQueues][]*task
	running   [numQueues]int
	tok       *tokens
	steps     Steps
	keepGoing bool
	notify    func(Event, Snapshot) // told of each event, with the counts after it

	blocked   int  // tasks in state blocked
	admitting bool // false once a job failed without keep-going
	stopped   bool // Stop: dispatch nothing more

	queueTime  [numQueues]time.Duration
	queueSteps [numQueues]int
	queueFails [numQueues]int
	failures   []Failure
	totals     Stats
	counts     struct{ done, failed, skipped, cancelled, hits, local int }
	// paths estimate the work waiting for each task (criticalpath.go).
	paths *criticalPaths
}

func newCore(jobs []*Job, steps Steps, limits Limits, keepGoing bool, notify func(Event, Snapshot)) (*core, error) {
	if err := limits.validate(); err != nil {
		return nil, err
	}
	if err := checkJobs(jobs); err != nil {
		return nil, err
	}
	c := &core{tok: newTokens(limits), steps: steps, keepGoing: keepGoing, notify: notify,
		admitting: true, blocked: len(jobs)}
	byName := make(map[string]*task, len(jobs))
	for _, j := range jobs {
		t := &task{Task: Task{Job: j}, pending: len(j.Deps)}
		c.tasks = append(c.tasks, t)
		byName[j.Name] = t
	}
	for _, t := range c.tasks {
		for _, d := range t.Job.Deps {
			byName[d].dependants = append(byName[d].dependants, t)
		}
	}
	c.paths = newCriticalPaths(c.tasks)
	// Jobs enter in file order, which keeps the order the user wrote (or
	// the build system generated) among the jobs ready at once.
	for _, t := range c.tasks {
		if t.pending == 0 {
			c.enqueue(t, Scan)
		}
	}
	return c, nil
}

// enqueue puts t in q, passing it on at once through queues without a step.
func (c *core) enqueue(t *task, q Queue) {
	if t.state == blocked {
		c.blocked--
	}
	if q != Local {
		for q <= Download && c.steps.of(q) == nil {
			q++
		}
		if q > Download {
			c.succeed(t)
			return
		}
	}
	if q == Local && c.steps.Local == nil {
		c.fail(t, Local, errors.New("this job must run locally, and local runs are not available"), nil)
		return
	}
	t.state = queued
	t.exclusive = t.Job.Exclusive && (q == Execute || q == Local)
	c.ready[q] = append(c.ready[q], t)
}

// dispatch takes tokens for every step that can start now and returns
// them; the caller must run each and report it to finish. Queues are
// offered tokens last first (serviceOrder), each in arrival order.
func (c *core) dispatch() []start {
	if c.stopped {
		return nil
	}
	var starts []start
	for _, q := range serviceOrder {
		if q == Scan && !c.admitting {
			continue
		}
		r := q.Resource()
		n := 0
		for _, t := range c.ready[q] {
			if !c.tok.take(r, t.exclusive) {
				if t.exclusive && !t.registered {
					// From now on no shared token of r is handed out, so
					// the holders drain and t gets its turn.
					t.registered = true
					c.tok.waiting[r]++
				}
				break
			}
			if t.registered {
				t.registered = false
				c.tok.waiting[r]--
			}
			t.state = running
			if q == Execute {
				t.CriticalPath = c.paths.of(t)
			}
			c.running[q]++
			starts = append(starts, start{t, q})
			n++
		}
		c.ready[q] = c.ready[q][n:]
	}
	return starts
}

// began records when a dispatched step started.
func (c *core) began(s start, now time.Time) {
	s.t.started = now
	c.emit(Event{Kind: StepStarted, Job: s.t.Job.Name, Queue: s.q})
}

// finish takes the result of a step dispatched earlier, releases its token
// and moves the job on.
func (c *core) finish(s start, res Result, now time.Time) {
	t, q := s.t, s.q
	c.tok.release(q.Resource(), t.exclusive)
	c.running[q]--
	c.queueTime[q] += now.Sub(t.started)
	c.queueSteps[q]++
	t.stats.add(res.Stats)
	c.totals.add(Stats{BytesUp: res.Stats.BytesUp, BytesDown: res.Stats.BytesDown,
		BlobsUp: res.Stats.BlobsUp, BlobsDown: res.Stats.BlobsDown})
	if res.Err != nil && c.stopped && errors.Is(res.Err, context.Canceled) {
		// The user stopped the run and the step gave up because of it:
		// not a failure of the job.
		t.state = cancelled
		c.counts.cancelled++
		c.emit(Event{Kind: JobCancelled, Job: t.Job.Name, Queue: q})
		return
	}
	if res.Err != nil {
		c.fail(t, q, res.Err, res.Output)
		return
	}
	if len(res.Output) > 0 {
		c.emit(Event{Kind: StepOutput, Job: t.Job.Name, Queue: q, Output: res.Output})
	}
	switch {
	case q == Local:
		if res.Next == RunLocally {
			c.fail(t, q, errors.New("the local step asked to run locally again (a bug in the step)"), nil)
			return
		}
		c.succeed(t)
	case res.Next == RunLocally:
		t.local = true
		c.enqueue(t, Local)
	case q == Download:
		c.succeed(t)
	case res.Next == SkipToDownload:
		if q == Cache {
			t.cacheHit = true
		}
		c.enqueue(t, Download)
	case res.Next == Continue:
		c.enqueue(t, q+1)
	default:
		c.fail(t, q, fmt.Errorf("the %s step returned an unknown Next value %d (a bug in the step)", q, res.Next), nil)
	}
}

func (c *core) succeed(t *task) {
	t.state = succeeded
	c.paths.observe(t, t.stats.Ran)
	t.cacheHit = t.cacheHit || t.stats.CacheHit
	c.counts.done++
	if t.cacheHit {
		c.counts.hits++
	}
	if t.local {
		c.counts.local++
	}
	c.emit(Event{Kind: JobDone, Job: t.Job.Name, CacheHit: t.cacheHit, Local: t.local})
	for _, d := range t.dependants {
		d.pending--
		if d.pending == 0 && d.state == blocked {
			c.enqueue(d, Scan)
		}
	}
}

func (c *core) fail(t *task, q Queue, err error, output []byte) {
	t.state = failed
	c.counts.failed++
	c.queueFails[q]++
	c.failures = append(c.failures, Failure{Job: t.Job.Name, Queue: q.String(), Error: err.Error()})
	c.emit(Event{Kind: JobFailed, Job: t.Job.Name, Queue: q, Err: err, Output: output})
	if !c.keepGoing && c.admitting {
		c.admitting = false
		c.emit(Event{Kind: Stopping, Err: fmt.Errorf("job %q failed; finishing the jobs already started (--keep-going runs the others too)", t.Job.Name)})
	}
	c.skipDependants(t, t.Job.Name)
}

// skipDependants marks everything that depends on t, directly or not, as
// skipped because cause failed.
func (c *core) skipDependants(t *task, cause string) {
	for _, d := range t.dependants {
		if d.state != blocked {
			continue
		}
		d.state = skipped
		c.blocked--
		c.counts.skipped++
		c.emit(Event{Kind: JobSkipped, Job: d.Job.Name, Cause: cause})
		c.skipDependants(d, cause)
	}
}

// emit tells notify about e with the counts as they are now.
func (c *core) emit(e Event) { c.notify(e, c.snapshot()) }

// busy reports whether any step is running.
func (c *core) busy() bool {
	for _, n := range c.running {
		if n > 0 {
			return true
		}
	}
	return false
}

// snapshot returns the counts shown by the progress display.
func (c *core) snapshot() Snapshot {
	s := Snapshot{Total: len(c.tasks), Done: c.counts.done, Failed: c.counts.failed,
		Skipped: c.counts.skipped, Cancelled: c.counts.cancelled, CacheHits: c.counts.hits, Local: c.counts.local}
	for _, q := range Queues {
		s.Queues[q] = QueueCount{Waiting: len(c.ready[q]), Running: c.running[q]}
	}
	s.Blocked = c.blocked
	return s
}

// summary returns the totals once no step runs any more; what never started
// is counted as not run.
func (c *core) summary() Summary {
	s := Summary{Total: len(c.tasks), Succeeded: c.counts.done, Failed: c.counts.failed,
		Skipped: c.counts.skipped, Cancelled: c.counts.cancelled, CacheHits: c.counts.hits, Local: c.counts.local,
		BytesUp: c.totals.BytesUp, BytesDown: c.totals.BytesDown,
		BlobsUp: c.totals.BlobsUp, BlobsDown: c.totals.BlobsDown,
		Failures: append([]Failure(nil), c.failures...)}
	for _, t := range c.tasks {
		if t.state == blocked || t.state == queued {
			s.NotRun++
		}
	}
	for _, q := range Queues {
		s.Queues = append(s.Queues, QueueSummary{Queue: q.String(), Steps: c.queueSteps[q],
			Time: c.queueTime[q], Failed: c.queueFails[q]})
	}
	return s
}
