package worker

import (
	"fmt"
	"os"

	"github.com/gantry-build/gantry/internal/platform"
	"github.com/gantry-build/gantry/internal/worker/runner"
	"github.com/gantry-build/gantry/internal/worker/sandbox"
)

// SandboxWrapper is the process-wrapper value that asks for the built-in
// bubblewrap sandbox on a worker that has one (worker.sandbox).
const SandboxWrapper = "bubblewrap"

// ChrootWrapper is the process-wrapper value a worker in sandbox mode
// chroot offers instead (platform.ChrootWrapper): the actions of chroot
// instances ask for it, so they reach no other worker.
const ChrootWrapper = platform.ChrootWrapper

// setupSandbox builds the worker's sandbox, if configured, and logs which
// isolation and limits are active.
func (w *Worker) setupSandbox() error {
	if _, clash := w.cfg.ProcessWrappers[ChrootWrapper]; clash {
		return fmt.Errorf("worker.process_wrappers.%s: the name is reserved for workers with worker.sandbox.mode chroot (the actions of scheduler.chroot_instances ask for it); rename the wrapper", ChrootWrapper)
	}
	if w.cfg.Sandbox == nil {
		w.log.Info("actions run without a sandbox (worker.sandbox.mode is off)")
		return nil
	}
	if _, clash := w.cfg.ProcessWrappers[SandboxWrapper]; clash {
		return fmt.Errorf("worker.process_wrappers.%s clashes with the built-in sandbox of that name; rename the wrapper", SandboxWrapper)
	}
	if err := w.checkChroot(); err != nil {
		return err
	}
	sc := *w.cfg.Sandbox
	sc.WorkDir = w.cfg.WorkDir
	sb, err := sandbox.New(sc)
	if err != nil {
		return err
	}
	w.sb = sb
	scope := "actions that ask for it (process-wrapper=" + SandboxWrapper + ")"
	switch {
	case sc.Chroot:
		scope = "every action, with its input root as / (chroot)"
	case w.cfg.SandboxAll:
		scope = "every action"
	}
	w.log.Info("sandbox active for "+scope, "sandbox", sb.Describe())
	return nil
}

// note appends a line to a finished capture (e.g. the sandbox's
// out-of-memory report), so that it shows in the action's stderr.
func (c *capture) note(msg string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	line := []byte("\n" + msg + "\n")
	if c.spill == nil {
		c.buf.Write(line)
		return
	}
	f, err := os.OpenFile(c.spillPath, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return
	}
	f.Write(line)
	f.Close()
}

// sandboxedProc suspends and resumes a sandboxed action: the runner's
// process-group signals stop the timeout clock and bwrap, the sandbox
// stops the action inside its own session (or cgroup).
type sandboxedProc struct {
	p   *runner.Process
	sbx *sandbox.Action
}

func (s sandboxedProc) Suspend() error {
	if err := s.p.Suspend(); err != nil {
		return err
	}
	if s.ended() { // its pid may belong to another process by now
		return nil
	}
	return s.sbx.Freeze(s.p.Pid())
}

func (s sandboxedProc) Resume() error {
	if !s.ended() {
		if err := s.sbx.Thaw(s.p.Pid()); err != nil {
			return err
		}
	}
	return s.p.Resume()
}

func (s sandboxedProc) ended() bool {
	select {
	case <-s.p.Done():
		return true
	default:
		return false
	}
}
