// Package runner runs an action's command as a child process in its own
// process group, with exactly the environment the action specifies, its
// output streamed to files, and a timeout.
//
// Every process the command starts ends with it: every signal the runner
// sends (cancel, timeout, suspend, resume) goes to the whole process group
// and to every other process of the action, and when the command's main
// process exits, whatever it left running is killed, also processes that
// left the group (setsid, setpgid, double fork, nohup). The Supervisor
// finds them through a cgroup per action or, where none can be made, by
// tracking them in /proc, with the worker as their subreaper
// (supervisor.go).
//
// Timeouts measure execution only: time spent suspended (between Suspend
// and Resume) does not count, so a scheduler that pauses an action to free
// resources does not make it time out. Result.WallTime still includes the
// suspended time, reported separately as Result.SuspendedTime.
package runner

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"
)

// DefaultPath is the search path used to resolve an unqualified program
// name when the Command sets no PATH variable (the REAPI leaves this to the
// implementation; the worker's own PATH is deliberately not used).
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// ErrNotFound matches (errors.Is) the error Start returns when the program
// to run does not exist or is not executable.
var ErrNotFound = errors.New("program not found")

// Spec describes a command to run.
type Spec struct {
	// Args is the command line; Args[0] is resolved as the REAPI says: an
	// absolute path is used as is, a path containing '/' is relative to
	// Dir, and a bare name is looked up in the PATH of Env (DefaultPath if
	// Env has none), whose relative entries are relative to Dir.
	Args []string
	// Env is the complete environment, as "NAME=value" strings. Nothing is
	// inherited from the worker.
	Env []string
	// Dir is the working directory.
	Dir string
	// Stdout and Stderr are files to create (truncating) for the
	// process's output; "" discards it. They may be the same path, in
	// which case both streams share one file. Output is written straight
	// to the files, so whatever the process wrote survives a kill.
	Stdout, Stderr string
	// StdoutFile and StderrFile, when set, receive the output instead of
	// Stdout and Stderr (for example the write ends of pipes). The caller
	// keeps ownership and closes them after Start.
	StdoutFile, StderrFile *os.File
	// StdinFile, when set, is the process's stdin (a persistent worker
	// reads its requests there); else it reads /dev/null. The caller
	// keeps ownership and closes it after Start.
	StdinFile *os.File
	// Timeout bounds the execution time, excluding time suspended; 0
	// means no limit. On expiry every process of the action is killed
	// (SIGKILL).
	Timeout time.Duration
	// Wrapper is prepended to the command line, e.g. a sandbox that runs
	// its arguments. Wrapper[0] is looked up in the worker's PATH (it is
	// the worker's configuration, not the action's); the action's program
	// is passed to it resolved, as an absolute path.
	Wrapper []string
	// CgroupFD, when UseCgroupFD is set, is an open cgroup v2 directory
	// the process starts in (CLONE_INTO_CGROUP), so that everything it
	// forks is limited and can be killed with the cgroup. The runner then
	// uses that cgroup to find the action's processes; it must stay open
	// until the process has ended.
	UseCgroupFD bool
	CgroupFD    int
	// Mounts are directories the Wrapper (the sandbox) binds into the
	// action's view of the file system: a path at or under a Mount's Dst
	// is found on the host at or under its Src. The runner looks there
	// for Dir and the program, and still passes the program to the
	// wrapper by its path in the action's view.
	Mounts []Mount
}

// Mount is a directory the Wrapper shows at Dst that the host holds at
// Src (see Spec.Mounts).
type Mount struct {
	Src, Dst string
}

// hostPath is where p, an absolute path in the action's view, lies on the
// host. It follows p a component at a time as the kernel would, symlinks
// included (a symlink outside a mount may lead into one), and looks at a
// mount's Src for whatever lies at or under its Dst. ".." is applied to
// the resolved path, as the kernel does (at a bind mount's root it leads
// to the mount point's parent).
func hostPath(p string, mounts []Mount) string {
	if len(mounts) == 0 {
		return p
	}
	// The deepest mount holding view wins: a chroot's Dst is "/", with
	// the input directories bound read-only below it.
	toHost := func(view string) string {
		best := -1
		for i, m := range mounts {
			if (view == m.Dst || m.Dst == "/" || strings.HasPrefix(view, m.Dst+"/")) && (best < 0 || len(m.Dst) > len(mounts[best].Dst)) {
				best = i
			}
		}
		switch {
		case best < 0:
			return view
		case mounts[best].Dst == "/":
			return mounts[best].Src + view
		}
		return mounts[best].Src + view[len(mounts[best].Dst):]
	}
	view := "" // resolved so far, without symlinks; "" is "/"
	comps := strings.Split(p, "/")
	for hops := 0; len(comps) > 0; {
		c := comps[0]
		comps = comps[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			if i := strings.LastIndexByte(view, '/'); i >= 0 {
				view = view[:i]
			}
			continue
		}
		next := view + "/" + c
		info, err := os.Lstat(toHost(next))
		if err != nil || info.Mode()&fs.ModeSymlink == 0 || hops >= 40 {
			view = next // the final check reports what is wrong
			continue
		}
		hops++
		target, err := os.Readlink(toHost(next))
		if err != nil {
			view = next
			continue
		}
		if strings.HasPrefix(target, "/") {
			view = ""
		}
		comps = append(strings.Split(target, "/"), comps...)
	}
	if view == "" {
		view = "/"
	}
	return toHost(view)
}

// Result describes how a process ended.
type Result struct {
	// ExitCode is the exit status, or 128+signal if a signal killed the
	// process (the shell convention).
	ExitCode int
	// Signal is the signal that killed the process, or 0.
	Signal syscall.Signal
	// TimedOut and Cancelled say that the runner killed the process
	// because the timeout expired or Cancel was called (whichever came
	// first; at most one is set).
	TimedOut  bool
	Cancelled bool
	// StartTime and EndTime bracket the run; WallTime is their
	// difference, including SuspendedTime.
	StartTime, EndTime time.Time
	WallTime           time.Duration
	SuspendedTime      time.Duration
	// UserTime and SystemTime are the CPU time of the process and of the
	// descendants it waited for (getrusage semantics: orphans killed with
	// the group are not included). MaxRSS is the peak resident set size
	// in bytes of the largest of those processes.
	UserTime, SystemTime time.Duration
	MaxRSS               int64
	// Err is set if waiting for the process failed (not for a non-zero
	// exit).
	Err error
}

// Process is a running command. Its methods are safe for concurrent use.
type Process struct {
	cmd  *exec.Cmd
	pid  int
	done chan struct{}

	mu            sync.Mutex
	exited        bool // the leader has exited: the group may no longer be signalled
	cancelled     bool
	timedOut      bool
	suspended     bool
	suspendedAt   time.Time
	suspendedTime time.Duration
	timeout       time.Duration
	remaining     time.Duration // timeout left, valid while suspended
	deadline      time.Time     // valid while running with a timeout
	timer         *time.Timer
	timerGen      int
	start         time.Time
	result        Result

	// Containment (supervisor.go): the action's cgroup, or the pid file
	// and known members of tracking mode.
	sup   *Supervisor
	cg    cgroup
	hasCg bool
	cgDir string // a cgroup the runner made (pooled or removed at the end)
	// cgKilled is set once SIGKILL went to the whole cgroup. Such a cgroup
	// is not reused: on Linux 6.18 (at least) a process later cloned into
	// a cgroup that was once killed through cgroup.kill is killed at birth
	// (the kill sequence it is checked against is read from the parent's
	// cgroup), which TestCgroupsReused catches.
	cgKilled   bool
	pidFile    string
	known      map[int]uint64 // tracking: members seen, pid -> start time
	startTicks uint64         // the main process's start time
}

// Start starts the command described by spec.
func (s *Supervisor) Start(spec Spec) (*Process, error) {
	if s.closed.Load() {
		return nil, errors.New("runner: the supervisor is closed")
	}
	if len(spec.Args) == 0 || spec.Args[0] == "" {
		return nil, errors.New("runner: the command has no arguments; Command.arguments must name a program")
	}
	if spec.Timeout < 0 {
		return nil, fmt.Errorf("runner: negative timeout %v", spec.Timeout)
	}
	dir, path, argv, env, err := resolveCommand(spec)
	if err != nil {
		return nil, err
	}

	stdout, stderr, closeOutputs, err := outputs(spec)
	if err != nil {
		return nil, err
	}
	defer closeOutputs()
	null, err := devNull()
	if err != nil {
		return nil, fmt.Errorf("runner: opening %s for the action's stdin: %w", os.DevNull, err)
	}

	if spec.StdinFile != nil {
		null = spec.StdinFile
	}
	attr := &syscall.SysProcAttr{Setpgid: true, UseCgroupFD: spec.UseCgroupFD, CgroupFD: spec.CgroupFD}
	cmd := &exec.Cmd{
		Path:        path,
		Args:        argv,
		Env:         env,
		Dir:         dir,
		Stdin:       null,
		Stdout:      stdout,
		Stderr:      stderr,
		SysProcAttr: attr,
	}
	p := &Process{cmd: cmd, done: make(chan struct{}), timeout: spec.Timeout, sup: s}
	if err := s.prepare(p, spec, attr); err != nil {
		return nil, err
	}
	// Hold the lock across Start so the timer cannot fire before pid is set.
	p.mu.Lock()
	defer p.mu.Unlock()
	// Register the main process before the reaper can see it exit: it
	// must be left to cmd.Wait.
	host.mu.Lock()
	if err := cmd.Start(); err != nil {
		host.mu.Unlock()
		p.release()
		return nil, fmt.Errorf("runner: starting %s: %w", path, err)
	}
	p.pid = cmd.Process.Pid
	// Other actions' tracking reads startTicks under host.mu. With
	// cgroups no action is tracked, and the read (which waits for the
	// child's exec to let go of its memory map) is skipped.
	if s.cgDir == "" {
		if info, ok := readProc(p.pid); ok {
			p.startTicks = info.start
		}
	}
	host.running[p] = true
	host.mu.Unlock()
	p.start = time.Now()
	if p.pidFile != "" {
		p.writePidFileLocked()
	}
	if spec.Timeout > 0 {
		p.armLocked(spec.Timeout)
	}
	go p.wait()
	return p, nil
}

// resolveCommand finds what Start runs for spec: it returns the working
// directory (absolute), the program (the wrapper's, when there is one),
// its argv, and the environment.
func resolveCommand(spec Spec) (string, string, []string, []string, error) {
	// An absolute Dir is used as given: cleaning it would change what a
	// ".." after a symlink means.
	dir := spec.Dir
	if !filepath.IsAbs(dir) {
		var err error
		if dir, err = filepath.Abs(dir); err != nil {
			return "", "", nil, nil, fmt.Errorf("runner: resolving working directory %q: %w", spec.Dir, err)
		}
	}
	if info, err := os.Stat(hostPath(dir, spec.Mounts)); err != nil || !info.IsDir() {
		return "", "", nil, nil, fmt.Errorf("runner: working directory %s is not a directory (%v)", dir, err)
	}
	env := append([]string{}, spec.Env...) // non-nil: exec.Cmd would inherit on nil
	prog, err := resolveProgram(spec.Args[0], dir, env, spec.Mounts)
	if err != nil {
		return "", "", nil, nil, err
	}
	path, argv := prog, append([]string{spec.Args[0]}, spec.Args[1:]...)
	if len(spec.Wrapper) > 0 {
		w, err := exec.LookPath(spec.Wrapper[0])
		if err != nil {
			return "", "", nil, nil, fmt.Errorf("runner: wrapper %q: %w; fix the worker's wrapper configuration", spec.Wrapper[0], err)
		}
		path = w
		argv = append(append(append([]string{}, spec.Wrapper...), prog), spec.Args[1:]...)
	}
	// The wrapper starts on the host (a sandbox then enters dir itself).
	return hostPath(dir, spec.Mounts), path, argv, env, nil
}

// outputs returns where the process of spec writes: StdoutFile and
// StderrFile when given, else files created at Stdout and Stderr (equal
// paths share one), else /dev/null. done closes the files it created.
func outputs(spec Spec) (stdout, stderr *os.File, done func(), err error) {
	var opened []*os.File
	done = func() {
		for _, f := range opened {
			f.Close()
		}
	}
	open := func(given *os.File, path string) (*os.File, error) {
		switch {
		case given != nil:
			return given, nil
		case path == "":
			return devNull()
		}
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
		if err != nil {
			return nil, fmt.Errorf("runner: creating output file: %w", err)
		}
		opened = append(opened, f)
		return f, nil
	}
	if stdout, err = open(spec.StdoutFile, spec.Stdout); err != nil {
		return nil, nil, nil, err
	}
	if spec.StderrFile == nil && spec.StdoutFile == nil && spec.Stderr == spec.Stdout && spec.Stdout != "" {
		return stdout, stdout, done, nil
	}
	if stderr, err = open(spec.StderrFile, spec.Stderr); err != nil {
		done()
		return nil, nil, nil, err
	}
	return stdout, stderr, done, nil
}

// devNull is /dev/null, opened once for the whole process: every action's
// stdin, and its outputs when they go nowhere. Opening it for each action
// cost six system calls a file (os/exec opens one for a nil Stdin).
var devNull = sync.OnceValues(func() (*os.File, error) {
	return os.OpenFile(os.DevNull, os.O_RDWR, 0)
})

// resolveProgram finds the program named by arg0 as the REAPI prescribes.
func resolveProgram(arg0, dir string, env []string, mounts []Mount) (string, error) {
	if strings.Contains(arg0, "/") {
		p := arg0
		if !filepath.IsAbs(p) {
			p = dir + "/" + p
		}
		if err := checkExecutable(hostPath(p, mounts)); err != nil {
			return "", fmt.Errorf("runner: program %q (%s): %w", arg0, p, err)
		}
		return p, nil
	}
	search, ok := lookupEnv(env, "PATH")
	if !ok {
		search = DefaultPath
	}
	for _, d := range strings.Split(search, ":") {
		if d == "" {
			d = "." // POSIX: an empty entry is the working directory
		}
		p := filepath.Join(d, arg0)
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		if checkExecutable(hostPath(p, mounts)) == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("runner: program %q not found in the action's PATH %q: %w; set PATH in the Command's environment or use a path", arg0, search, ErrNotFound)
}

// checkExecutable reports whether p is a regular file the worker may execute.
func checkExecutable(p string) error {
	info, err := os.Stat(p)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("no such file: %w", ErrNotFound)
		}
		return err
	}
	if !info.Mode().IsRegular() {
		return fmt.Errorf("not a regular file: %w", ErrNotFound)
	}
	// Root passes access(2) X_OK only if some execute bit is set.
	if err := syscall.Access(p, 1 /* X_OK */); err != nil {
		return fmt.Errorf("not executable (%v): %w", err, ErrNotFound)
	}
	return nil
}

func lookupEnv(env []string, name string) (string, bool) {
	val, found := "", false
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok && k == name {
			val, found = v, true // the last one wins, as in exec.Cmd
		}
	}
	return val, found
}

// Pid returns the process id of the command (also its process group id).
func (p *Process) Pid() int { return p.pid }

// Done is closed when the process has ended and Wait will not block.
func (p *Process) Done() <-chan struct{} { return p.done }

// Wait waits for the process to end and returns how it ended. It may be
// called any number of times.
func (p *Process) Wait() Result {
	<-p.done
	return p.result
}

// Cancel kills every process of the action with SIGKILL; Wait then reports
// Cancelled (unless the process had already ended or timed out). It works
// on a suspended process too.
func (p *Process) Cancel() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.exited || p.cancelled || p.timedOut {
		return
	}
	p.cancelled = true
	p.stopTimerLocked()
	p.signalLocked(syscall.SIGKILL)
}

// Suspend stops every process of the action with SIGSTOP and pauses the
// timeout. It is a no-op if the process is already suspended or has ended.
func (p *Process) Suspend() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.exited || p.suspended || p.cancelled || p.timedOut {
		return nil
	}
	if err := p.signalLocked(syscall.SIGSTOP); err != nil {
		return err
	}
	now := time.Now()
	p.suspended = true
	p.suspendedAt = now
	if p.timer != nil {
		p.remaining = p.deadline.Sub(now)
		p.stopTimerLocked()
	}
	return nil
}

// Resume continues a suspended action's processes with SIGCONT and restarts
// the timeout with the time that was left. It is a no-op if the process is
// not suspended.
func (p *Process) Resume() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.suspended {
		return nil
	}
	now := time.Now()
	p.suspended = false
	p.suspendedTime += now.Sub(p.suspendedAt)
	if p.exited {
		return nil
	}
	if p.timeout > 0 && !p.cancelled && !p.timedOut {
		p.armLocked(max(p.remaining, 0))
	}
	return p.signalLocked(syscall.SIGCONT)
}

// armLocked starts the timeout timer to fire after d.
func (p *Process) armLocked(d time.Duration) {
	p.timerGen++
	gen := p.timerGen
	p.deadline = time.Now().Add(d)
	p.timer = time.AfterFunc(d, func() { p.expire(gen) })
}

func (p *Process) stopTimerLocked() {
	if p.timer != nil {
		p.timer.Stop()
		p.timer = nil
	}
	p.timerGen++ // a callback already running must not act
}

// expire kills the action when the current timer fires.
func (p *Process) expire(gen int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if gen != p.timerGen || p.exited || p.suspended || p.cancelled || p.timedOut {
		return
	}
	p.timedOut = true
	p.timer = nil
	p.signalLocked(syscall.SIGKILL)
}

// signalLocked sends sig to the process group and to every other process
// of the action (its cgroup, or the members tracking finds). The leader is
// not reaped while exited is false, so the group id cannot have been
// reused.
func (p *Process) signalLocked(sig syscall.Signal) error {
	if p.exited {
		return nil
	}
	if err := syscall.Kill(-p.pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("runner: sending %v to process group %d: %w", sig, p.pid, err)
	}
	switch {
	case p.hasCg && sig == syscall.SIGKILL:
		p.cgKilled = true
		if p.cg.writeFile("cgroup.kill", "1") != nil {
			p.cg.signal(sig)
		}
	case p.hasCg:
		p.cg.signal(sig)
	default:
		p.trackSignalLocked(sig)
	}
	return nil
}

// killAllLocked kills every process of the action that is left once the
// main process has exited (it is a zombie: its group id stays reserved).
func (p *Process) killAllLocked() {
	var err error
	if p.hasCg {
		var killed bool
		killed, err = p.cg.killAll()
		p.cgKilled = p.cgKilled || killed
	} else {
		err = p.trackKillAllLocked()
	}
	if err != nil {
		p.sup.log.Warn("an action's processes outlive it", "pid", p.pid, "err", err)
	}
}

// wait waits for the leader to exit without reaping it, kills what is left
// of its group, then reaps it and records the result.
func (p *Process) wait() {
	waitErr := waitExitNoReap(p.pid)

	p.mu.Lock()
	// Kill stragglers while the zombie leader still pins the group id.
	p.killAllLocked()
	p.exited = true
	p.stopTimerLocked()
	if p.suspended {
		p.suspended = false
		p.suspendedTime += time.Since(p.suspendedAt)
	}
	p.mu.Unlock()

	err := p.cmd.Wait()
	end := time.Now()
	host.mu.Lock()
	delete(host.running, p)
	host.mu.Unlock()
	p.release()
	kickReaper()

	p.mu.Lock()
	defer p.mu.Unlock()
	r := Result{
		TimedOut:      p.timedOut,
		Cancelled:     p.cancelled,
		StartTime:     p.start,
		EndTime:       end,
		WallTime:      end.Sub(p.start),
		SuspendedTime: p.suspendedTime,
	}
	var exitErr *exec.ExitError
	if err != nil && !errors.As(err, &exitErr) {
		r.Err = fmt.Errorf("runner: waiting for process %d: %w", p.pid, err)
	} else if waitErr != nil {
		r.Err = fmt.Errorf("runner: waiting for process %d: %w", p.pid, waitErr)
	}
	if st := p.cmd.ProcessState; st != nil {
		if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			r.Signal = ws.Signal()
			r.ExitCode = 128 + int(r.Signal)
		} else {
			r.ExitCode = st.ExitCode()
		}
		if ru, ok := st.SysUsage().(*syscall.Rusage); ok {
			r.UserTime = time.Duration(ru.Utime.Nano())
			r.SystemTime = time.Duration(ru.Stime.Nano())
			r.MaxRSS = ru.Maxrss * 1024
		}
	}
	p.result = r
	close(p.done)
}

// waitExitNoReap blocks until process pid has exited, leaving it a zombie
// (waitid with WNOWAIT), so its pid and process group id stay reserved.
func waitExitNoReap(pid int) error {
	const pPID = 1     // idtype_t P_PID
	var info [128]byte // siginfo_t
	for {
		_, _, errno := syscall.Syscall6(syscall.SYS_WAITID, pPID, uintptr(pid),
			uintptr(unsafe.Pointer(&info[0])), syscall.WEXITED|syscall.WNOWAIT, 0, 0)
		switch errno {
		case 0:
			return nil
		case syscall.EINTR:
			continue
		default:
			return errno
		}
	}
}
