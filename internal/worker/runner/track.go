package runner

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Tracking is the fallback where no cgroup can be made: an action's
// processes are found in /proc. A process belongs to the action started
// as main process M when
//
//   - it is in M's process group (M is not reaped until the end, so the
//     group id cannot be reused), or
//   - it was seen as a member before (pid and start time recorded by the
//     tracker every trackEvery and in the action's pid file), or
//   - it left the worker's session (setsid) and was then orphaned, so it
//     is a child of the worker (the subreaper) that the worker did not
//     start, it started after M, and no other action running now started
//     before it: it can only be M's (otherwise it is left for the last of
//     the actions it may belong to), or
//   - its parent chain reaches one of those.
//
// What escapes: a process that moves to a new process group without a
// new session and is orphaned before the tracker first sees it.
const trackEvery = 250 * time.Millisecond

// membersLocked returns the processes of p found in table, zombies only
// if withZombies (never the worker itself nor another action's main
// process).
func (p *Process) membersLocked(table []procInfo, withZombies bool) []procInfo {
	host.mu.Lock()
	var others []*Process
	for q := range host.running {
		if q != p {
			others = append(others, q)
		}
	}
	host.mu.Unlock()
	roots := map[int]bool{p.pid: true}
	for _, q := range table {
		switch {
		case q.pgid == p.pid:
			roots[q.pid] = true
		case p.known[q.pid] == q.start && q.start != 0:
			roots[q.pid] = true
		case q.ppid == host.self && q.sid != host.sid && q.start >= p.startTicks && !startedBefore(others, q.start):
			roots[q.pid] = true
		}
	}
	var out []procInfo
	for _, q := range descendants(table, roots) {
		if q.pid == host.self || (q.zombie() && !withZombies) || isMain(others, q.pid) {
			continue
		}
		out = append(out, q)
	}
	return out
}

// startedBefore reports whether a tracked process of ps started at or
// before start. Processes in a cgroup are left out: their orphans stay in
// their cgroup, and they carry no start time (Start reads it only where
// actions are tracked).
func startedBefore(ps []*Process, start uint64) bool {
	for _, q := range ps {
		if !q.hasCg && q.startTicks <= start {
			return true
		}
	}
	return false
}

func isMain(ps []*Process, pid int) bool {
	for _, q := range ps {
		if q.pid == pid {
			return true
		}
	}
	return false
}

// trackSignalLocked sends sig to every member of p.
func (p *Process) trackSignalLocked(sig syscall.Signal) {
	for _, q := range p.membersLocked(scanProcs(), false) {
		if q.pid != p.pid {
			_ = syscall.Kill(q.pid, sig)
		}
	}
}

// trackKillAllLocked kills every member of p, scanning again until none
// is left alive (a member may fork while being killed), bounded. Members
// that are the worker's children, zombies included, are noted for the
// reaper before anything is killed: once the action has ended nothing
// else tells them apart.
func (p *Process) trackKillAllLocked() error {
	deadline := time.Now().Add(killWait)
	for {
		all := p.membersLocked(scanProcs(), true)
		pids := make([]int, 0, len(all))
		var live []int
		for _, q := range all {
			pids = append(pids, q.pid)
			p.known[q.pid] = q.start
			if !q.zombie() {
				live = append(live, q.pid)
			}
		}
		noteKilled(pids)
		_ = syscall.Kill(-p.pid, syscall.SIGKILL)
		if len(live) == 0 {
			return nil
		}
		for _, pid := range live {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("processes %v of the action survive SIGKILL after %v (uninterruptible sleep?)", live, killWait)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// trackLoop records the members of every running action in tracking mode,
// so that those which later leave the group and lose their parent are
// still known, also to the next worker (pid files) if this one dies.
func trackLoop() {
	t := time.NewTicker(trackEvery)
	for range t.C {
		host.mu.Lock()
		var ps []*Process
		for q := range host.running {
			if q.pidFile != "" {
				ps = append(ps, q)
			}
		}
		host.mu.Unlock()
		if len(ps) == 0 {
			continue
		}
		table := scanProcs()
		for _, q := range ps {
			q.mu.Lock()
			if !q.exited {
				grew := false
				for _, m := range q.membersLocked(table, false) {
					if q.known[m.pid] != m.start {
						q.known[m.pid] = m.start
						grew = true
					}
				}
				if grew {
					q.writePidFileLocked()
				}
			}
			q.mu.Unlock()
		}
	}
}

// writePidFileLocked records the action's group and known members for the
// next worker on this work directory, in case this one dies first. The
// file is replaced atomically.
func (p *Process) writePidFileLocked() {
	var b strings.Builder
	fmt.Fprintf(&b, "group %d %d %d\n", p.pid, host.sid, p.startTicks)
	for pid, start := range p.known {
		fmt.Fprintf(&b, "pid %d %d\n", pid, start)
	}
	tmp := p.pidFile + ".tmp"
	if err := os.WriteFile(tmp, []byte(b.String()), 0o644); err == nil {
		_ = os.Rename(tmp, p.pidFile)
	}
}

// pidFileRecord is a parsed pid file.
type pidFileRecord struct {
	group, sid int
	pids       map[int]uint64
}

func parsePidFile(b []byte) pidFileRecord {
	r := pidFileRecord{pids: map[int]uint64{}}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) == 4 && f[0] == "group":
			r.group, _ = strconv.Atoi(f[1])
			r.sid, _ = strconv.Atoi(f[2])
			start, _ := strconv.ParseUint(f[3], 10, 64)
			r.pids[r.group] = start
		case len(f) == 3 && f[0] == "pid":
			pid, _ := strconv.Atoi(f[1])
			start, _ := strconv.ParseUint(f[2], 10, 64)
			if pid > 0 && start > 0 {
				r.pids[pid] = start
			}
		}
	}
	return r
}

// leftovers returns the live processes of table that r describes: those
// recorded (same pid and start time), members of the recorded process
// group still in the recorded session, and their descendants.
func (r pidFileRecord) leftovers(table []procInfo) []procInfo {
	roots := map[int]bool{}
	for _, q := range table {
		if (r.pids[q.pid] == q.start && q.start != 0) || (r.group > 1 && q.pgid == r.group && q.sid == r.sid) {
			roots[q.pid] = true
		}
	}
	var out []procInfo
	for _, q := range descendants(table, roots) {
		if q.pid != host.self && !q.zombie() {
			out = append(out, q)
		}
	}
	return out
}
