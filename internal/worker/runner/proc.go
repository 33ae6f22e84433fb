package runner

import (
	"bytes"
	"os"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// procInfo is what /proc/PID/stat says about a process.
type procInfo struct {
	pid, ppid, pgid, sid int
	state                byte
	// start is the start time in clock ticks since boot: with pid it
	// names a process, since pids are reused.
	start uint64
}

func (p procInfo) zombie() bool { return p.state == 'Z' || p.state == 'X' }

// readProc reads /proc/PID/stat; ok is false once the process is gone
// (reaped).
func readProc(pid int) (procInfo, bool) {
	// One open and read into a stack buffer: tracking reads this file
	// for every process on the host several times a second.
	fd, err := syscall.Open("/proc/"+strconv.Itoa(pid)+"/stat", syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return procInfo{}, false
	}
	var buf [1024]byte
	n, err := syscall.Read(fd, buf[:])
	syscall.Close(fd)
	if err != nil || n <= 0 {
		return procInfo{}, false
	}
	return parseStat(pid, buf[:n])
}

// parseStat parses a /proc/PID/stat line. The command name is skipped by
// its last ')': it may contain spaces and parentheses.
func parseStat(pid int, b []byte) (procInfo, bool) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procInfo{}, false
	}
	f := bytes.Fields(b[i+1:])
	// f[0] is field 3 (state); starttime is field 22.
	if len(f) < 20 || len(f[0]) == 0 {
		return procInfo{}, false
	}
	p := procInfo{pid: pid, state: f[0][0]}
	var err error
	if p.ppid, err = strconv.Atoi(string(f[1])); err != nil {
		return procInfo{}, false
	}
	if p.pgid, err = strconv.Atoi(string(f[2])); err != nil {
		return procInfo{}, false
	}
	if p.sid, err = strconv.Atoi(string(f[3])); err != nil {
		return procInfo{}, false
	}
	if p.start, err = strconv.ParseUint(string(f[19]), 10, 64); err != nil {
		return procInfo{}, false
	}
	return p, true
}

// scanProcs returns every process on the host (of this pid namespace).
// Processes that end during the scan may be missing.
func scanProcs() []procInfo {
	d, err := os.Open("/proc")
	if err != nil {
		return nil
	}
	defer d.Close()
	names, _ := d.Readdirnames(-1)
	out := make([]procInfo, 0, len(names))
	for _, n := range names {
		pid, err := strconv.Atoi(n)
		if err != nil || pid <= 0 {
			continue
		}
		if p, ok := readProc(pid); ok {
			out = append(out, p)
		}
	}
	return out
}

// descendants returns the processes of table whose parent chain reaches a
// process in roots (roots included when present in table).
func descendants(table []procInfo, roots map[int]bool) []procInfo {
	children := map[int][]procInfo{}
	byPid := map[int]procInfo{}
	for _, p := range table {
		children[p.ppid] = append(children[p.ppid], p)
		byPid[p.pid] = p
	}
	var out []procInfo
	seen := map[int]bool{}
	var queue []int
	for r := range roots {
		queue = append(queue, r)
	}
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		if seen[pid] {
			continue
		}
		seen[pid] = true
		if p, ok := byPid[pid]; ok {
			out = append(out, p)
		}
		for _, c := range children[pid] {
			queue = append(queue, c.pid)
		}
	}
	return out
}

// readAt reads the whole of the file at path, relative to the directory
// open as dirfd (unix.AT_FDCWD: the working directory), with plain system
// calls. It is for the small /proc and cgroup files the runner reads for
// every action: an os.File costs four fcntl calls and a refused epoll
// registration on top of the open, read and close.
func readAt(dirfd int, path string) ([]byte, error) {
	fd, err := unix.Openat(dirfd, path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	buf := make([]byte, 0, 512)
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := unix.Read(fd, buf[len(buf):cap(buf)])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, err
		}
		if n == 0 {
			return buf, nil
		}
		buf = buf[:len(buf)+n]
	}
}
