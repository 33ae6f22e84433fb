package batch

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Options tune a Scheduler. The zero value is usable.
type Options struct {
	// KeepGoing runs every job that does not depend on a failed one;
	// without it the first failure stops new jobs from entering the chain
	// (the ones already in it finish), as make does without -k.
	KeepGoing bool
	// Progress, if not nil, is told about every event.
	Progress Progress
	// Clock returns the current time; nil is time.Now. Durations in the
	// summary are measured with it.
	Clock func() time.Time
	// Tick is how often Progress gets a Tick event while nothing else
	// happens; 0 is 100ms, negative never.
	Tick time.Duration
}

// Scheduler runs jobs through the queues. Make one with New, call Run once;
// Suspend, Resume and Stop may be called from any goroutine (a signal
// handler), before or during Run.
type Scheduler struct {
	core   *core
	opts   Options
	events []update // not yet given to Progress

	mu        sync.Mutex
	suspended bool // wanted by the caller
	stopped   bool // wanted by the caller
	poke      chan struct{}
	ran       atomic.Bool
}

// New checks the jobs (unique names, known deps, no cycle) and the limits
// (each at least 1) and returns a Scheduler for them.
func New(jobs []*Job, steps Steps, limits Limits, opts Options) (*Scheduler, error) {
	s := &Scheduler{opts: opts, poke: make(chan struct{}, 1)}
	if s.opts.Clock == nil {
		s.opts.Clock = time.Now
	}
	if s.opts.Tick == 0 {
		s.opts.Tick = 100 * time.Millisecond
	}
	c, err := newCore(jobs, steps, limits, opts.KeepGoing, func(e Event, snap Snapshot) {
		s.events = append(s.events, update{e, snap})
	})
	if err != nil {
		return nil, err
	}
	s.core = c
	return s, nil
}

// Suspend stops dispatch: no new step starts until Resume. Steps already
// running go on (the caller stops local processes itself, for example
// with SIGTSTP to their process group).
func (s *Scheduler) Suspend() { s.set(func() { s.suspended = true }) }

// Resume restarts dispatch after Suspend.
func (s *Scheduler) Resume() { s.set(func() { s.suspended = false }) }

// Stop ends dispatch for good: no new step starts, and Run returns once the
// running steps have returned. To cut those short too, cancel the context
// given to Run instead (or as well): the steps see it cancelled.
func (s *Scheduler) Stop() { s.set(func() { s.stopped = true }) }

func (s *Scheduler) set(f func()) {
	s.mu.Lock()
	f()
	s.mu.Unlock()
	select {
	case s.poke <- struct{}{}:
	default:
	}
}

type finished struct {
	st  start
	res Result
}

// Run runs the jobs and returns the summary when every job has finished,
// failed or been skipped, or after Stop (or ctx's cancellation) once the
// running steps have returned. Cancelling ctx stops dispatch and cancels
// the context the running steps were given. Run may be called once.
func (s *Scheduler) Run(ctx context.Context) Summary {
	if s.ran.Swap(true) {
		panic("batch: Scheduler.Run called twice")
	}
	begin := s.opts.Clock()
	stepCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	results := make(chan finished)
	var tick <-chan time.Time
	if s.opts.Tick > 0 && s.opts.Progress != nil {
		t := time.NewTicker(s.opts.Tick)
		defer t.Stop()
		tick = t.C
	}
	ctxDone := ctx.Done()
	pool := newRunners()
	defer pool.close() // the loop below ends only when no step runs
	var suspended, stopped bool
	for {
		if !stopped && ctx.Err() != nil {
			// Checked here too, not only in the select below, which may
			// pick a result first: nothing may start after a cancel.
			s.Stop()
		}
		s.mu.Lock()
		wantSuspend, wantStop := s.suspended, s.stopped
		s.mu.Unlock()
		if wantStop && !stopped {
			stopped = true
			s.core.stopped = true
			s.core.emit(Event{Kind: Stopping, Err: errStopped})
		}
		if wantSuspend != suspended && !stopped {
			suspended = wantSuspend
			if suspended {
				s.core.emit(Event{Kind: Suspended})
			} else {
				s.core.emit(Event{Kind: Resumed})
			}
		}
		if !suspended {
			for _, st := range s.core.dispatch() {
				s.core.began(st, s.opts.Clock())
				step := s.core.steps.of(st.q)
				pool.run(func() {
					results <- finished{st, step.Do(stepCtx, &st.t.Task)}
				})
			}
		}
		s.flush(begin, suspended, stopped)
		if !s.core.busy() && (!suspended || stopped) {
			// Nothing runs and dispatch started nothing: nothing can
			// change any more.
			break
		}
		select {
		case f := <-results:
			s.core.finish(f.st, f.res, s.opts.Clock())
		case <-s.poke:
		case <-ctxDone:
			ctxDone = nil
			s.Stop()
		case <-tick:
			s.core.emit(Event{Kind: Tick})
		}
	}
	s.core.emit(Event{Kind: End})
	s.flush(begin, suspended, stopped)
	sum := s.core.summary()
	sum.Elapsed = s.opts.Clock().Sub(begin)
	sum.Stopped = stopped
	return sum
}

// update is an event and the counts after it.
type update struct {
	e Event
	s Snapshot
}

// flush hands the pending events to Progress, adding what only the loop
// knows to their snapshots.
func (s *Scheduler) flush(begin time.Time, suspended, stopped bool) {
	events := s.events
	s.events = s.events[:0]
	if s.opts.Progress == nil || len(events) == 0 {
		return
	}
	elapsed := s.opts.Clock().Sub(begin)
	for _, u := range events {
		u.s.Elapsed = elapsed
		u.s.Suspended = suspended
		u.s.Stopping = stopped || !s.core.admitting
		s.opts.Progress.Update(u.e, u.s)
	}
}
