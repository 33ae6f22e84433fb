package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gantry-build/gantry/internal/batch"
	"github.com/gantry-build/gantry/internal/job"
)

// jobControl turns the terminal's signals into control of a batch run:
// Ctrl-C (SIGINT, or SIGTERM) stops dispatch and cancels what runs, a
// second one exits at once; Ctrl-Z (SIGTSTP) suspends dispatch and the
// local processes and then stops the process as a shell expects, and
// SIGCONT (fg) resumes both.
type jobControl struct {
	cancel context.CancelFunc
	stderr io.Writer
	procs  *job.LocalProcs
	sigs   chan os.Signal
	done   chan struct{}
	intr   atomic.Bool

	mu    sync.Mutex
	sched *batch.Scheduler // nil until attach
}

// newJobControl starts watching the signals; cancel is called on the
// first Ctrl-C. close stops watching.
func newJobControl(cancel context.CancelFunc, stderr io.Writer) *jobControl {
	j := &jobControl{
		cancel: cancel,
		stderr: stderr,
		procs:  job.NewLocalProcs(),
		sigs:   make(chan os.Signal, 4),
		done:   make(chan struct{}),
	}
	signal.Notify(j.sigs, os.Interrupt, syscall.SIGTERM, syscall.SIGTSTP, syscall.SIGCONT)
	go j.loop()
	return j
}

// attach gives the scheduler to control.
func (j *jobControl) attach(s *batch.Scheduler) {
	j.mu.Lock()
	j.sched = s
	j.mu.Unlock()
}

func (j *jobControl) scheduler() *batch.Scheduler {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.sched
}

// interrupted reports whether Ctrl-C was pressed.
func (j *jobControl) interrupted() bool { return j.intr.Load() }

func (j *jobControl) close() {
	signal.Stop(j.sigs)
	close(j.done)
}

func (j *jobControl) loop() {
	for {
		select {
		case <-j.done:
			return
		case sig := <-j.sigs:
			switch sig {
			case os.Interrupt, syscall.SIGTERM:
				if j.intr.Swap(true) {
					fmt.Fprintln(j.stderr, "gantry batch: interrupted again; exiting without waiting")
					os.Exit(exitInterrupted)
				}
				fmt.Fprintln(j.stderr, "gantry batch: interrupted; cancelling the remote operations in flight (Ctrl-C again to exit at once)")
				j.cancel()
			case syscall.SIGTSTP:
				if s := j.scheduler(); s != nil {
					s.Suspend()
				}
				j.procs.Signal(syscall.SIGSTOP)
				// Stop for real, so that the shell gets its prompt back;
				// SIGCONT (fg, bg) continues here.
				_ = syscall.Kill(os.Getpid(), syscall.SIGSTOP)
			case syscall.SIGCONT:
				j.procs.Signal(syscall.SIGCONT)
				if s := j.scheduler(); s != nil {
					s.Resume()
				}
			}
		}
	}
}

// cpuTime is the CPU time, user and system, of this process (who =
// RUSAGE_SELF) or of its children that ended (RUSAGE_CHILDREN).
func cpuTime(who int) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(who, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
