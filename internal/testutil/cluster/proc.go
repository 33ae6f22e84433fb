package cluster

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

const (
	// StartTimeout bounds the wait for a started process's /healthz.
	StartTimeout = 60 * time.Second
	// stopTimeout is how long a SIGTERM'd process gets before SIGKILL.
	stopTimeout = 10 * time.Second
	// killWait bounds the wait for a SIGKILL'd process to be gone.
	killWait = 10 * time.Second
	// startAttempts is how often a start on ports still held by the previous
	// run is tried.
	startAttempts = 10
)

// Proc is one Gantry process (`gantry serve ...` or `gantry worker ...`)
// that a test starts, kills, pauses and starts again with the same
// arguments, so on the same ports and directories. Each run logs to its own
// file, NAME-N.log in the process's directory. Its methods are safe for
// concurrent use.
type Proc struct {
	// Name names the process in logs and failures (fe1, sched-a, w3, ...).
	Name string
	// HTTPAddr is the process's --http-listen address (/healthz, /metrics).
	HTTPAddr string
	// Dir is the process's working directory, holding its logs.
	Dir string

	bin  string
	args []string

	mu      sync.Mutex
	cmd     *exec.Cmd
	exited  chan struct{} // closed when the current run has ended
	err     error         // Wait's result, valid once exited is closed
	ended   bool          // the test ended the current run (kill, stop)
	starts  int
	logPath string
}

// NewProc returns a process, not started, that runs bin with args in dir.
// httpAddr must be the address args give --http-listen.
func NewProc(name, dir, httpAddr, bin string, args ...string) *Proc {
	return &Proc{Name: name, HTTPAddr: httpAddr, Dir: dir, bin: bin, args: args}
}

// Start starts a new run and waits until its /healthz answers 200. When the
// previous run's ports are still taken it tries again.
func (p *Proc) Start() error {
	var err error
	for attempt := 1; attempt <= startAttempts; attempt++ {
		if err = p.startOnce(); err == nil {
			return nil
		}
		if !strings.Contains(ReadTail(p.LogPath(), 4096), "address already in use") {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	return fmt.Errorf("%s did not become healthy: %w\n%s", p.Name, err, ReadTail(p.LogPath(), 4096))
}

func (p *Proc) startOnce() error {
	p.mu.Lock()
	if p.exited != nil {
		select {
		case <-p.exited:
		default:
			p.mu.Unlock()
			return fmt.Errorf("%s: Start while running", p.Name)
		}
	}
	p.starts++
	p.logPath = filepath.Join(p.Dir, fmt.Sprintf("%s-%d.log", p.Name, p.starts))
	logFile, err := os.Create(p.logPath)
	if err != nil {
		p.mu.Unlock()
		return err
	}
	cmd := exec.Command(p.bin, p.args...)
	cmd.Dir = p.Dir
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// Own process group, so that stopping it stops whatever it spawned;
	// Pdeathsig, so that a test killed by its timeout leaves nothing behind.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		p.mu.Unlock()
		return fmt.Errorf("starting %s: %w", p.Name, err)
	}
	exited := make(chan struct{})
	p.cmd, p.exited, p.ended, p.err = cmd, exited, false, nil
	p.mu.Unlock()
	go func() {
		err := cmd.Wait()
		logFile.Close()
		p.mu.Lock()
		if p.cmd == cmd {
			p.err = err
		}
		p.mu.Unlock()
		close(exited)
	}()
	return p.waitHealthy(exited)
}

func (p *Proc) waitHealthy(exited chan struct{}) error {
	ctx, cancel := context.WithTimeout(context.Background(), StartTimeout)
	defer cancel()
	url := "http://" + p.HTTPAddr + "/healthz"
	last := "no answer yet"
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := httpClient.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = "status " + resp.Status
		} else {
			last = err.Error()
		}
		select {
		case <-exited:
			return fmt.Errorf("%s exited before becoming healthy: %v", p.Name, p.Err())
		case <-ctx.Done():
			return fmt.Errorf("no 200 from %s within %v (last: %s)", url, StartTimeout, last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// LogPath is the log file of the current (or last) run.
func (p *Proc) LogPath() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.logPath
}

// PID is the current run's process id (0 before the first start).
func (p *Proc) PID() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// Err is the current run's exit error (nil while it runs).
func (p *Proc) Err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// Running tells whether the current run has not exited.
func (p *Proc) Running() bool {
	p.mu.Lock()
	exited := p.exited
	p.mu.Unlock()
	if exited == nil {
		return false
	}
	select {
	case <-exited:
		return false
	default:
		return true
	}
}

// Crashed returns an error when the current run exited without the test
// ending it (kill, stop).
func (p *Proc) Crashed() error {
	p.mu.Lock()
	ended, exited := p.ended, p.exited
	p.mu.Unlock()
	if exited == nil || ended {
		return nil
	}
	select {
	case <-exited:
		return fmt.Errorf("%s exited by itself (%v); its log %s:\n%s", p.Name, p.Err(), p.LogPath(), ReadTail(p.LogPath(), 8192))
	default:
		return nil
	}
}

// Kill9 sends SIGKILL, to the whole process group when group is set (a
// node and everything it spawned), else to the process alone (as `kill -9
// PID` would: a worker's actions, in process groups of their own, run on),
// and waits until it is gone.
func (p *Proc) Kill9(group bool) error {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	p.ended = true
	p.mu.Unlock()
	if cmd == nil {
		return fmt.Errorf("%s: Kill9 before Start", p.Name)
	}
	pid := cmd.Process.Pid
	if group {
		pid = -pid
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("killing %s: %w", p.Name, err)
	}
	select {
	case <-exited:
		return nil
	case <-time.After(killWait):
		return fmt.Errorf("%s still running %v after SIGKILL", p.Name, killWait)
	}
}

// Signal sends sig (SIGSTOP, SIGCONT) to the process alone.
func (p *Proc) Signal(sig syscall.Signal) error {
	p.mu.Lock()
	cmd := p.cmd
	p.mu.Unlock()
	if cmd == nil {
		return fmt.Errorf("%s: signal before Start", p.Name)
	}
	return syscall.Kill(cmd.Process.Pid, sig)
}

// Stop ends the current run: SIGCONT (it may be paused) and SIGTERM to its
// process group, SIGKILL after a while. It returns an error when the run had
// exited by itself.
func (p *Proc) Stop() error {
	crashed := p.Crashed()
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	p.ended = true
	p.mu.Unlock()
	if cmd == nil {
		return nil
	}
	pgid := cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGCONT)
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(stopTimeout):
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-exited
	}
	return crashed
}

// RaceReports returns the names of this process's logs holding a data race
// report (a binary built with -race).
func (p *Proc) RaceReports() []string {
	p.mu.Lock()
	n := p.starts
	p.mu.Unlock()
	var out []string
	for i := 1; i <= n; i++ {
		path := filepath.Join(p.Dir, fmt.Sprintf("%s-%d.log", p.Name, i))
		if b, err := os.ReadFile(path); err == nil && strings.Contains(string(b), "WARNING: DATA RACE") {
			out = append(out, path)
		}
	}
	return out
}

// Args returns the process's arguments (after the binary).
func (p *Proc) Args() []string { return append([]string(nil), p.args...) }
