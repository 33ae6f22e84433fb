package runner

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// ownCgroup2 returns where this process's cgroup v2 directory is mounted
// and its path as /proc/self/cgroup names it ("0::PATH"). On a hybrid
// host (cgroup v1 controllers plus /sys/fs/cgroup/unified) that is the
// v2 hierarchy without controllers, which is all the runner needs: it
// uses cgroups only to know and kill an action's processes.
func ownCgroup2() (dir, path string, err error) {
	path = cgroupOf(os.Getpid())
	if path == "" {
		return "", "", errors.New("no cgroup v2 membership in /proc/self/cgroup")
	}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [TAGS] - FSTYPE SOURCE SUPER
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok || !strings.HasPrefix(post, "cgroup2 ") {
			continue
		}
		fields := strings.Fields(pre)
		if len(fields) < 5 {
			continue
		}
		root, mnt := unescapeMount(fields[3]), unescapeMount(fields[4])
		rel := path
		if root != "/" {
			var found bool
			if rel, found = strings.CutPrefix(path, root); !found {
				continue
			}
		}
		return filepath.Join(mnt, rel), path, nil
	}
	return "", "", errors.New("no cgroup2 file system is mounted")
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// cgroup is an open cgroup v2 directory holding one action's processes.
type cgroup struct {
	fd int
	// events is its cgroup.events file kept open (-1: not opened), which
	// populated reads twice an action: a pread instead of an open, two
	// reads and a close each time.
	events int
}

// close closes what openCgroup opened.
func (c cgroup) close() {
	if c.events >= 0 {
		syscall.Close(c.events)
	}
	syscall.Close(c.fd)
}

func (c cgroup) readFile(name string) ([]byte, error) { return readAt(c.fd, name) }

func (c cgroup) writeFile(name, val string) error {
	fd, err := unix.Openat(c.fd, name, unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	_, err = unix.Write(fd, []byte(val))
	return err
}

// procs returns the live processes in the cgroup (zombies are not listed).
func (c cgroup) procs() []int {
	b, err := c.readFile("cgroup.procs")
	if err != nil {
		return nil
	}
	var out []int
	for _, f := range bytes.Fields(b) {
		if pid, err := strconv.Atoi(string(f)); err == nil && pid > 0 {
			out = append(out, pid)
		}
	}
	return out
}

// populated reports whether a live process is left in the cgroup (or an
// error reading it: then it is assumed populated).
func (c cgroup) populated() bool {
	var b []byte
	var err error
	if c.events >= 0 {
		// The file is generated afresh by a read from offset 0.
		var buf [256]byte
		var n int
		n, err = unix.Pread(c.events, buf[:], 0)
		b = buf[:max(n, 0)]
	} else {
		b, err = c.readFile("cgroup.events")
	}
	if err != nil {
		return len(c.procs()) > 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "populated "); ok {
			return strings.TrimSpace(v) != "0"
		}
	}
	return true
}

// signal sends sig to every process in the cgroup.
func (c cgroup) signal(sig syscall.Signal) {
	for _, pid := range c.procs() {
		if pid != host.self {
			_ = syscall.Kill(pid, sig)
		}
	}
}

// killAll kills every process in the cgroup, including those it forks
// meanwhile (cgroup.kill, or SIGKILL to cgroup.procs until it is empty on
// kernels before 5.14), and waits (bounded) until none is left alive.
// Killed children of the worker are handed to the reaper. killed reports
// whether it had anything to kill (then the cgroup is not reused: see
// Process.cgKilled).
func (c cgroup) killAll() (killed bool, err error) {
	deadline := time.Now().Add(killWait)
	for c.populated() {
		killed = true
		pids := c.procs()
		noteKilled(pids)
		if c.writeFile("cgroup.kill", "1") != nil {
			c.signal(syscall.SIGKILL)
		}
		if time.Now().After(deadline) {
			return killed, fmt.Errorf("processes %v of the action's cgroup survive SIGKILL after %v (uninterruptible sleep?)", pids, killWait)
		}
		time.Sleep(2 * time.Millisecond)
	}
	return killed, nil
}

// killWait bounds how long the runner waits for killed processes to die.
const killWait = 10 * time.Second

// noteKilled records the worker's children among pids as reapable once
// they die.
func noteKilled(pids []int) {
	host.mu.Lock()
	defer host.mu.Unlock()
	for _, pid := range pids {
		if p, ok := readProc(pid); ok && p.ppid == host.self {
			host.killed[pid] = p.start
		}
	}
}

// removeCgroupDir removes an emptied cgroup directory, retrying briefly:
// rmdir fails while the last killed processes are still exiting.
func removeCgroupDir(dir string) error {
	var err error
	for i := 0; i < 200; i++ {
		if err = os.Remove(dir); err == nil || errors.Is(err, os.ErrNotExist) {
			return nil
		}
		time.Sleep(5 * time.Millisecond)
	}
	return err
}

// openCgroup opens a cgroup directory for CLONE_INTO_CGROUP and its files.
func openCgroup(dir string) (cgroup, error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return cgroup{fd: -1, events: -1}, err
	}
	events, err := unix.Openat(fd, "cgroup.events", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		events = -1 // read by name then
	}
	return cgroup{fd: fd, events: events}, nil
}
