package runner

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Supervisor starts the actions of one worker and makes sure every process
// an action starts ends with it: when the action ends (exit, timeout,
// cancel) its whole process tree is killed, not only its process group,
// so setsid, double forks and nohup do not let anything outlive it.
//
// Two mechanisms, chosen at construction:
//
//   - cgroup: where this process can create cgroup v2 directories (a v2
//     or hybrid host, as root or with delegation), each action starts in a
//     cgroup of its own (CLONE_INTO_CGROUP) under a cgroup named after the
//     work directory, and its end kills the cgroup (cgroup.kill). Exact.
//   - tracking: elsewhere (cgroup v1 only, read-only /sys/fs/cgroup in a
//     container, no privileges) the action's processes are tracked in
//     /proc (see track.go), recorded in pid files under WORK_DIR/procs.
//
// Either way the worker process is a child subreaper, so what an action
// orphans is re-parented to the worker and reaped by it (reaper.go).
//
// A worker killed with SIGKILL cannot clean up: its actions' processes
// live on. NewSupervisor therefore kills the leftovers of an earlier
// worker on the same work directory (its cgroups, or the processes its
// pid files name) before any action runs.
type Supervisor struct {
	log      *slog.Logger
	stateDir string // WORK_DIR/procs: pid files (tracking)
	cgDir    string // this worker's cgroup directory, or ""
	cgPath   string // the same as /proc/PID/cgroup names it
	seq      atomic.Int64
	closed   atomic.Bool

	// mu guards active, the actions in cgroups of cgDir: cgDir exists only
	// while there are some, so a worker that is never closed leaves no
	// directory behind once idle.
	mu     sync.Mutex
	active int
	// pool holds emptied action cgroups for reuse (cgrouppool.go); trim
	// removes them once no action has run for a while.
	pool []pooledCgroup
	trim *time.Timer
}

// NewSupervisor prepares to run actions for the worker whose work
// directory is workDir: it makes this process a child subreaper, picks
// the cgroup mechanism if it can create a cgroup (else tracking), and
// kills what an earlier worker process on workDir left running.
func NewSupervisor(workDir string, log *slog.Logger) (*Supervisor, error) {
	return newSupervisor(workDir, log, true)
}

func newSupervisor(workDir string, log *slog.Logger, tryCgroup bool) (*Supervisor, error) {
	if err := setupHost(); err != nil {
		return nil, fmt.Errorf("runner: making the worker a child subreaper (prctl PR_SET_CHILD_SUBREAPER): %w; Linux 3.4 or later is needed", err)
	}
	abs, err := filepath.Abs(workDir)
	if err != nil {
		return nil, fmt.Errorf("runner: work directory %q: %w", workDir, err)
	}
	if log == nil {
		log = slog.Default()
	}
	s := &Supervisor{log: log, stateDir: filepath.Join(abs, "procs")}
	if err := os.MkdirAll(s.stateDir, 0o755); err != nil {
		return nil, fmt.Errorf("runner: creating %s: %w", s.stateDir, err)
	}
	if tryCgroup {
		if err := s.setupCgroup(abs); err != nil {
			log.Info("actions' processes are tracked in /proc: no cgroup v2 directory can be created here", "reason", err)
		}
	}
	s.killLeftovers()
	if s.cgDir != "" {
		os.Remove(s.cgDir) // made again by the first action
	}
	if s.cgPath != "" {
		host.mu.Lock()
		host.cgroups[s.cgPath]++
		host.mu.Unlock()
	}
	return s, nil
}

// setupCgroup creates the worker's cgroup: a child of this process's own
// cgroup v2, named after the work directory so that the next worker on
// the same directory finds it.
func (s *Supervisor) setupCgroup(workDir string) error {
	dir, path, err := ownCgroup2()
	if err != nil {
		return err
	}
	sum := sha256.Sum256([]byte(workDir))
	name := "gantry-worker-" + hex.EncodeToString(sum[:8])
	cgDir := filepath.Join(dir, name)
	if err := os.Mkdir(cgDir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	if err := probeCgroup(cgDir); err != nil {
		return err
	}
	s.cgDir, s.cgPath = cgDir, strings.TrimSuffix(path, "/")+"/"+name
	if path == "/" {
		s.cgPath = "/" + name
	}
	return nil
}

// probeCgroup proves that an action cgroup can be made under dir and a
// process started in it (CLONE_INTO_CGROUP needs clone3, Linux 5.7).
func probeCgroup(dir string) error {
	probe := filepath.Join(dir, fmt.Sprintf("probe-%d", os.Getpid()))
	if err := os.Mkdir(probe, 0o755); err != nil {
		return err
	}
	defer os.Remove(probe)
	c, err := openCgroup(probe)
	if err != nil {
		return err
	}
	defer c.close()
	for _, t := range []string{"/bin/true", "/usr/bin/true"} {
		if _, err := os.Stat(t); err != nil {
			continue
		}
		cmd := exec.Command(t)
		cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: c.fd}
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("starting a process in cgroup %s: %w", probe, err)
		}
		break
	}
	return nil
}

// Describe says which mechanism is in use, for the start-up log.
func (s *Supervisor) Describe() string {
	if s.cgDir != "" {
		return "a cgroup per action under " + s.cgDir
	}
	return "tracking in /proc (no cgroup v2 directory can be created), pid files in " + s.stateDir
}

// killLeftovers kills the processes of actions of an earlier worker on the
// same work directory and logs what it killed.
func (s *Supervisor) killLeftovers() {
	var killed []int
	if s.cgDir != "" {
		ents, _ := os.ReadDir(s.cgDir)
		for _, e := range ents {
			if !e.IsDir() {
				continue
			}
			dir := filepath.Join(s.cgDir, e.Name())
			c, err := openCgroup(dir)
			if err != nil {
				continue
			}
			killed = append(killed, c.procs()...)
			if _, err := c.killAll(); err != nil {
				s.log.Warn("leftover processes of an earlier worker could not be killed", "cgroup", dir, "err", err)
			}
			c.close()
			if err := removeCgroupDir(dir); err != nil {
				s.log.Warn("removing a leftover cgroup", "cgroup", dir, "err", err)
			}
		}
	}
	files, _ := filepath.Glob(filepath.Join(s.stateDir, "*.pids"))
	if len(files) > 0 {
		var recs []pidFileRecord
		for _, f := range files {
			if b, err := os.ReadFile(f); err == nil {
				recs = append(recs, parsePidFile(b))
			}
		}
		deadline := time.Now().Add(killWait)
		for {
			table := scanProcs()
			var left []int
			for _, r := range recs {
				for _, q := range r.leftovers(table) {
					left = append(left, q.pid)
					_ = syscall.Kill(q.pid, syscall.SIGKILL)
				}
			}
			if len(left) == 0 {
				break
			}
			noteKilled(left)
			killed = append(killed, left...)
			if time.Now().After(deadline) {
				s.log.Warn("leftover processes of an earlier worker survive SIGKILL", "pids", left)
				break
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
	stale, _ := filepath.Glob(filepath.Join(s.stateDir, "*"))
	for _, f := range stale {
		os.Remove(f)
	}
	slices.Sort(killed)
	killed = slices.Compact(killed)
	if len(killed) > 0 {
		s.log.Warn("killed processes left running by an earlier worker on this work directory", "count", len(killed), "pids", killed)
		kickReaper()
	}
}

// Close removes the worker's cgroup (once its actions have ended). The
// Supervisor must not start actions afterwards.
func (s *Supervisor) Close() error {
	if s.closed.Swap(true) || s.cgDir == "" {
		return nil
	}
	host.mu.Lock()
	if host.cgroups[s.cgPath]--; host.cgroups[s.cgPath] <= 0 {
		delete(host.cgroups, s.cgPath)
	}
	host.mu.Unlock()
	s.mu.Lock()
	if s.trim != nil {
		s.trim.Stop()
	}
	s.dropPoolLocked()
	s.mu.Unlock()
	if err := os.Remove(s.cgDir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("runner: removing cgroup %s: %w", s.cgDir, err)
	}
	return nil
}

// prepare gives p its containment before it starts: a new cgroup, the
// caller's cgroup (spec.UseCgroupFD, e.g. the sandbox's), or a pid file.
func (s *Supervisor) prepare(p *Process, spec Spec, attr *syscall.SysProcAttr) error {
	n := s.seq.Add(1)
	switch {
	case spec.UseCgroupFD:
		p.cg, p.hasCg = cgroup{fd: spec.CgroupFD, events: -1}, true
	case s.cgDir != "":
		s.mu.Lock()
		defer s.mu.Unlock()
		c, dir, err := s.takeCgroupLocked(n)
		if err != nil {
			s.removeIdleLocked()
			return err
		}
		s.active++
		p.cg, p.hasCg, p.cgDir = c, true, dir
		attr.UseCgroupFD, attr.CgroupFD = true, c.fd
	default:
		p.pidFile = filepath.Join(s.stateDir, fmt.Sprintf("%d-%d.pids", os.Getpid(), n))
		p.known = map[int]uint64{}
	}
	return nil
}

// removeIdleLocked removes the worker's cgroup when no action uses it.
func (s *Supervisor) removeIdleLocked() {
	if s.active == 0 {
		os.Remove(s.cgDir) // fails, harmlessly, while a leftover remains
	}
}

// release removes what prepare made, once the action has ended.
func (p *Process) release() {
	if p.cgDir != "" {
		p.sup.giveCgroup(p.cg, p.cgDir, !p.cgKilled)
	}
	if p.pidFile != "" {
		os.Remove(p.pidFile)
	}
}
