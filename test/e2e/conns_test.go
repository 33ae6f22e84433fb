package e2e

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// bazelServerPID returns the PID of the workspace's Bazel server, from the
// server.pid.txt Bazel keeps in its output base.
func bazelServerPID(w *bazelWorkspace) (int, error) {
	matches, _ := filepath.Glob(filepath.Join(w.OutputUserRoot, "*", "server", "server.pid.txt"))
	if len(matches) != 1 {
		return 0, fmt.Errorf("want one server.pid.txt under %s, found %v", w.OutputUserRoot, matches)
	}
	b, err := os.ReadFile(matches[0])
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

// localPortsTo returns the local ports of pid's TCP connections to remotePort
// (on any address), from /proc: the socket inodes among its open files, looked
// up in /proc/net/tcp and tcp6.
func localPortsTo(pid, remotePort int) ([]int, error) {
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return nil, err
	}
	inodes := map[string]bool{}
	for _, fd := range fds {
		link, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
		if err == nil && strings.HasPrefix(link, "socket:[") {
			inodes[strings.TrimSuffix(strings.TrimPrefix(link, "socket:["), "]")] = true
		}
	}
	var ports []int
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		f, err := os.Open(table)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		sc.Scan() // the header
		for sc.Scan() {
			// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
			fields := strings.Fields(sc.Text())
			if len(fields) < 10 || !inodes[fields[9]] {
				continue
			}
			local, lok := hexPort(fields[1])
			remote, rok := hexPort(fields[2])
			if lok && rok && remote == remotePort {
				ports = append(ports, local)
			}
		}
		f.Close()
	}
	return ports, nil
}

// hexPort returns the port of a /proc/net/tcp address, ADDRESS:PORT in hex.
func hexPort(addr string) (int, bool) {
	i := strings.LastIndexByte(addr, ':')
	if i < 0 {
		return 0, false
	}
	p, err := strconv.ParseUint(addr[i+1:], 16, 16)
	return int(p), err == nil
}
