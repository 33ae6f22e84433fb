package sandbox

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// cgroup2Magic is CGROUP2_SUPER_MAGIC (statfs f_type of a cgroup v2 fs).
const cgroup2Magic = 0x63677270

var cgroupSeq atomic.Int64

// setupCgroupParent checks that dir is a cgroup v2 directory offering the
// memory and pids controllers, and enables them for its children.
func setupCgroupParent(dir string) error {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return fmt.Errorf("sandbox: cgroup_parent %s: %w; create it (e.g. systemd Delegate=yes) or leave cgroup_parent empty for the rlimit fallback", dir, err)
	}
	if st.Type != cgroup2Magic {
		return fmt.Errorf("sandbox: cgroup_parent %s is not on a cgroup v2 filesystem; use a directory under a cgroup2 mount (e.g. /sys/fs/cgroup/gantry) or leave it empty for the rlimit fallback", dir)
	}
	ctrl, err := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
	if err != nil {
		return fmt.Errorf("sandbox: cgroup_parent %s: %w", dir, err)
	}
	have := strings.Fields(string(ctrl))
	for _, c := range []string{"memory", "pids"} {
		if !contains(have, c) {
			return fmt.Errorf("sandbox: cgroup_parent %s does not offer the %s controller (it has %q); enable it in the parent's cgroup.subtree_control or leave cgroup_parent empty for the rlimit fallback", dir, c, strings.TrimSpace(string(ctrl)))
		}
	}
	sub, _ := os.ReadFile(filepath.Join(dir, "cgroup.subtree_control"))
	if !contains(strings.Fields(string(sub)), "memory") || !contains(strings.Fields(string(sub)), "pids") {
		if err := os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte("+memory +pids"), 0); err != nil {
			return fmt.Errorf("sandbox: enabling memory and pids for children of %s: %w; a cgroup with processes in it cannot delegate controllers: give the worker an empty cgroup of its own as cgroup_parent", dir, err)
		}
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// makeCgroup creates the action's cgroup with its limits and opens it for
// CLONE_INTO_CGROUP.
func (a *Action) makeCgroup() error {
	dir := filepath.Join(a.s.cgroup, fmt.Sprintf("action-%d-%d", os.Getpid(), cgroupSeq.Add(1)))
	if err := os.Mkdir(dir, 0o755); err != nil {
		return fmt.Errorf("sandbox: creating cgroup %s: %w", dir, err)
	}
	a.Cgroup = dir
	write := func(name, val string) error {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(val), 0); err != nil {
			return fmt.Errorf("sandbox: setting %s of cgroup %s: %w", name, dir, err)
		}
		return nil
	}
	if a.pol.MemoryLimit > 0 {
		if err := write("memory.max", strconv.FormatInt(a.pol.MemoryLimit, 10)); err != nil {
			return err
		}
		// Without swap the limit is the limit (absent when swap is off).
		_ = write("memory.swap.max", "0")
	}
	if a.pol.PidsLimit > 0 {
		if err := write("pids.max", strconv.FormatInt(a.pol.PidsLimit, 10)); err != nil {
			return err
		}
	}
	f, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sandbox: opening cgroup %s: %w", dir, err)
	}
	a.cgFile = f
	a.UseCgroupFD, a.CgroupFD = true, int(f.Fd())
	return nil
}

// finishCgroup kills every process left in the cgroup, reads its OOM
// count and removes it.
func (a *Action) finishCgroup() Outcome {
	dir := a.Cgroup
	var out Outcome
	out.PeakMemory = memoryPeak(filepath.Join(dir, "memory.peak"))
	if n := oomKills(filepath.Join(dir, "memory.events")); n > 0 {
		out.OOMKilled = true
		out.Message = fmt.Sprintf("OUT OF MEMORY: the kernel killed %d process(es) of this action because it reached its memory limit of %d bytes; raise it with the platform property %s (up to worker.sandbox.max_memory_limit) or use less memory", n, a.pol.MemoryLimit, PropMemoryLimit)
	}
	killCgroup(dir)
	if a.cgFile != nil {
		a.cgFile.Close()
	}
	// rmdir fails while the killed processes are still exiting: retry a
	// bounded number of times.
	for i := 0; i < 100; i++ {
		err := os.Remove(dir)
		if err == nil || errors.Is(err, os.ErrNotExist) {
			break
		}
		killCgroup(dir)
		time.Sleep(10 * time.Millisecond)
	}
	return out
}

// memoryPeak reads a memory.peak file: bytes, 0 when it cannot be read
// (a kernel before 5.19 has none).
func memoryPeak(path string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// killCgroup kills all processes in dir: cgroup.kill where the kernel
// has it (5.14+), otherwise each pid in cgroup.procs.
func killCgroup(dir string) {
	if err := os.WriteFile(filepath.Join(dir, "cgroup.kill"), []byte("1"), 0); err == nil {
		return
	}
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return
	}
	for _, f := range bytes.Fields(b) {
		if pid, err := strconv.Atoi(string(f)); err == nil && pid > 0 {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// oomKills returns the oom_kill count of a memory.events file.
func oomKills(path string) int64 {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	return parseOOMKills(f)
}

// parseOOMKills reads "key value" lines and returns oom_kill's value.
func parseOOMKills(r interface{ Read([]byte) (int, error) }) int64 {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), " ")
		if ok && k == "oom_kill" {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err == nil && n > 0 {
				return n
			}
		}
	}
	return 0
}
