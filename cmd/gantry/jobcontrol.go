package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gantry-build/gantry/internal/batch"
)

// jobControl turns the terminal's signals into control of a batch run:
// Ctrl-C (SIGINT, or SIGTERM) stops dispatch and cancels what runs, a
// second one exits at once; Ctrl-Z (SIGTSTP) suspends dispatch and the
// local processes and then stops the process as a shell expects, and
// SIGCONT (fg) resumes both.
type jobControl struct {
	cancel context.CancelFunc
	stderr io.Writer
	procs  *localProcs
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
		procs:  newLocalProcs(),
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
				j.procs.signal(syscall.SIGSTOP)
				// Stop for real, so that the shell gets its prompt back;
				// SIGCONT (fg, bg) continues here.
				_ = syscall.Kill(os.Getpid(), syscall.SIGSTOP)
			case syscall.SIGCONT:
				j.procs.signal(syscall.SIGCONT)
				if s := j.scheduler(); s != nil {
					s.Resume()
				}
			}
		}
	}
}

// localProcs runs the local processes of a batch (local compiles) and
// signals them all for job control. Each runs in its own process group,
// so a signal reaches what it spawns too (cc1, as).
type localProcs struct {
	mu      sync.Mutex
	running map[int]bool // process group ids
}

func newLocalProcs() *localProcs { return &localProcs{running: map[int]bool{}} }

// Run runs args in dir with the process's environment plus env and returns
// what it printed (stdout, then stderr) and its exit code. ctx ends it.
func (p *localProcs) Run(ctx context.Context, args []string, dir string, env []string) ([]byte, int, error) {
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	if err := cmd.Start(); err != nil {
		return nil, 0, fmt.Errorf("running %s locally: %w", args[0], err)
	}
	pid := cmd.Process.Pid
	p.mu.Lock()
	p.running[pid] = true
	p.mu.Unlock()
	err := cmd.Wait()
	p.mu.Lock()
	delete(p.running, pid)
	p.mu.Unlock()
	out := append(stdout.Bytes(), stderr.Bytes()...)
	var ee *exec.ExitError
	switch {
	case err == nil:
		return out, 0, nil
	case ctx.Err() != nil:
		return out, 0, ctx.Err()
	case errors.As(err, &ee):
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return out, 128 + int(ws.Signal()), nil
		}
		return out, ee.ExitCode(), nil
	default:
		return out, 0, fmt.Errorf("running %s locally: %w", args[0], err)
	}
}

// signal sends sig to every running local process group.
func (p *localProcs) signal(sig syscall.Signal) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for pgid := range p.running {
		_ = syscall.Kill(-pgid, sig)
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
