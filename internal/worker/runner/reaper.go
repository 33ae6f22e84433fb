package runner

import (
	"bufio"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// host is the process-wide side of supervision. PR_SET_CHILD_SUBREAPER is
// a property of the whole worker process: every process an action
// orphans (setsid, double fork, nohup ... &) is re-parented to the worker
// instead of init, so the worker can still find, kill and reap it. Those
// adopted orphans are the worker's children, so the worker must reap them
// when they die, without ever reaping a process some exec.Cmd waits for
// (that would steal its exit status): the reaper waits only for a zombie
// child it can tell belongs to an action (see reapable).
var host struct {
	once sync.Once
	err  error
	self int // this process's pid
	sid  int // this process's session

	mu sync.Mutex
	// running are the processes started and not yet reaped by their
	// exec.Cmd; Start holds mu across the fork, so the reaper never sees
	// a main process before it is registered.
	running map[*Process]bool
	// cgroups are the cgroup paths (as in /proc/PID/cgroup) of the
	// supervisors of this process.
	cgroups map[string]int
	// killed are processes the runner killed as members of an action,
	// by pid with their start time: reapable once they are zombies.
	killed map[int]uint64
	kick   chan struct{}
}

// setupHost makes the worker process a child subreaper and starts the
// reaper and the tracker (once per process).
func setupHost() error {
	host.once.Do(func() {
		host.self, host.sid = os.Getpid(), 0
		if sid, err := unix.Getsid(0); err == nil {
			host.sid = sid
		}
		host.running = map[*Process]bool{}
		host.cgroups = map[string]int{}
		host.killed = map[int]uint64{}
		host.kick = make(chan struct{}, 1)
		if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
			host.err = err
			return
		}
		sigchld := make(chan os.Signal, 1)
		signal.Notify(sigchld, syscall.SIGCHLD)
		go reapLoop(sigchld)
		go trackLoop()
	})
	return host.err
}

// kickReaper asks the reaper for a pass now.
func kickReaper() {
	select {
	case host.kick <- struct{}{}:
	default:
	}
}

// reapLoop reaps adopted zombies whenever a child dies, and every few
// seconds in case a SIGCHLD was merged with another.
//
// A SIGCHLD or a kick looks only at the main thread's children: the
// kernel gives an adopted orphan to the subreaper's thread-group leader
// (the main thread, which a Go program never ends; see
// TestOrphansGoToTheMainThread), while the other threads' children are
// the actions' main processes, which their exec.Cmd reaps. Listing every
// thread's children on each of those cost ~60 reads of /proc per action
// (14% of the server's CPU running trivial actions); the full list is
// read on the ticker, in case.
func reapLoop(sigchld <-chan os.Signal) {
	t := time.NewTicker(5 * time.Second)
	for {
		select {
		case <-sigchld:
			reapOnce(leaderChildren)
		case <-host.kick:
			reapOnce(leaderChildren)
		case <-t.C:
			reapOnce(ownChildren)
		}
	}
}

// reapOnce reaps every zombie child (of those children lists) that
// reapable accepts, by pid.
func reapOnce(children func() []int) {
	host.mu.Lock()
	defer host.mu.Unlock()
	for _, pid := range children() {
		p, ok := readProc(pid)
		if !ok || !p.zombie() || p.ppid != host.self || !reapableLocked(p) {
			continue
		}
		var ws unix.WaitStatus
		if got, err := unix.Wait4(pid, &ws, unix.WNOHANG, nil); err == nil && got == pid {
			delete(host.killed, pid)
		}
	}
	// Forget killed pids that are gone (reaped by a subreaper inside the
	// action, or by init before the worker became their parent).
	for pid, start := range host.killed {
		if p, ok := readProc(pid); !ok || p.start != start {
			delete(host.killed, pid)
		}
	}
}

// reapableLocked says whether zombie child p belongs to an action, so
// that no exec.Cmd will wait for it: it is not the main process of a
// running action, and it was killed by the runner as an action member, or
// it is in the process group of a running action or in the cgroup of one,
// or it left the worker's session after a running action started (the
// worker starts nothing that calls setsid itself: an action's setsid
// does that; an orphan that outlives its action was killed as a member).
func reapableLocked(p procInfo) bool {
	running := make([]*Process, 0, len(host.running))
	for q := range host.running {
		if q.pid == p.pid {
			return false
		}
		running = append(running, q)
	}
	if start, ok := host.killed[p.pid]; ok && start == p.start {
		return true
	}
	if p.sid != host.sid && startedBefore(running, p.start) {
		return true
	}
	for _, q := range running {
		if q.pid == p.pgid {
			return true
		}
	}
	if len(host.cgroups) > 0 {
		cg := cgroupOf(p.pid)
		for dir := range host.cgroups {
			if cg == dir || strings.HasPrefix(cg, dir+"/") {
				return true
			}
		}
	}
	return false
}

// ownChildren lists the children of every thread of this process.
func ownChildren() []int {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return nil
	}
	var out []int
	for _, t := range tasks {
		out = appendChildren(out, t.Name())
	}
	return out
}

// leaderChildren lists the children of this process's main thread, where
// orphans are re-parented.
func leaderChildren() []int { return appendChildren(nil, strconv.Itoa(host.self)) }

// appendChildren appends the children of thread tid of this process.
func appendChildren(out []int, tid string) []int {
	b, err := readAt(unix.AT_FDCWD, "/proc/self/task/"+tid+"/children")
	if err != nil {
		return out
	}
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil {
			out = append(out, pid)
		}
	}
	return out
}

// cgroupOf returns the cgroup v2 path of a process ("" if unknown). It
// stays readable while the process is a zombie.
func cgroupOf(pid int) string {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "0::"); ok {
			return rest
		}
	}
	return ""
}
