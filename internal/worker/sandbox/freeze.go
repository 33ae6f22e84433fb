package sandbox

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// Freeze stops every process of the action started as pid (the bwrap
// process): the cgroup is frozen when the action has one; otherwise
// SIGSTOP goes to pid and all its descendants (bwrap puts the action in a
// session of its own, so signalling the runner's process group does not
// reach it). Thaw undoes it.
func (a *Action) Freeze(pid int) error {
	if a.Cgroup != "" {
		if err := os.WriteFile(filepath.Join(a.Cgroup, "cgroup.freeze"), []byte("1"), 0); err == nil {
			return nil
		}
	}
	// Two passes catch processes forked while the first was stopping.
	for i := 0; i < 2; i++ {
		signalTree(pid, syscall.SIGSTOP)
	}
	return nil
}

// Thaw continues a frozen action.
func (a *Action) Thaw(pid int) error {
	if a.Cgroup != "" {
		if err := os.WriteFile(filepath.Join(a.Cgroup, "cgroup.freeze"), []byte("0"), 0); err == nil {
			return nil
		}
	}
	signalTree(pid, syscall.SIGCONT)
	return nil
}

// signalTree sends sig to pid and its descendants, found through
// /proc/PID/task/TID/children. Bounded: at most 1<<16 processes.
func signalTree(pid int, sig syscall.Signal) {
	seen := map[int]bool{}
	queue := []int{pid}
	for len(queue) > 0 && len(seen) < 1<<16 {
		p := queue[0]
		queue = queue[1:]
		if seen[p] {
			continue
		}
		seen[p] = true
		_ = syscall.Kill(p, sig)
		tasks, _ := os.ReadDir("/proc/" + strconv.Itoa(p) + "/task")
		for _, t := range tasks {
			b, err := os.ReadFile("/proc/" + strconv.Itoa(p) + "/task/" + t.Name() + "/children")
			if err != nil {
				continue
			}
			for _, f := range strings.Fields(string(b)) {
				if c, err := strconv.Atoi(f); err == nil && c > 0 {
					queue = append(queue, c)
				}
			}
		}
	}
}
