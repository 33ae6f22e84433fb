package job

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
)

// LocalProcs runs the local processes of a batch (local compiles) and
// signals them all for job control. Each runs in its own process group,
// so a signal reaches what it spawns too (cc1, as).
type LocalProcs struct {
	mu      sync.Mutex
	running map[int]bool // process group ids
}

// NewLocalProcs returns a LocalProcs with no process running.
func NewLocalProcs() *LocalProcs { return &LocalProcs{running: map[int]bool{}} }

// Run runs args in dir with the process's environment plus env and returns
// what it printed (stdout, then stderr) and its exit code. ctx ends it.
func (p *LocalProcs) Run(ctx context.Context, args []string, dir string, env []string) ([]byte, int, error) {
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

// Signal sends sig to every running local process group (SIGSTOP and
// SIGCONT for Ctrl-Z and fg).
func (p *LocalProcs) Signal(sig syscall.Signal) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for pgid := range p.running {
		_ = syscall.Kill(-pgid, sig)
	}
}

var _ Local = (*LocalProcs)(nil)
