package runner

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestCgroupsReused: an action starts in the emptied cgroup of the one
// before it instead of a new directory; concurrent actions get cgroups of
// their own; the pool is removed once idle, and the worker's cgroup with it.
func TestCgroupsReused(t *testing.T) {
	s := newSup(t, mode{"cgroup", true}, t.TempDir(), quietLog())
	dir := t.TempDir()
	cgroupOfRun := func(script string) (string, *Process) {
		t.Helper()
		out := filepath.Join(t.TempDir(), "out")
		p, err := s.Start(Spec{Args: []string{"sh", "-c", script}, Env: []string{testPath}, Dir: dir, Stdout: out})
		if err != nil {
			t.Fatal(err)
		}
		return out, p
	}
	read := func(out string) string {
		t.Helper()
		b, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}
	out1, p1 := cgroupOfRun("cat /proc/self/cgroup")
	wait(t, p1)
	first := read(out1)
	out2, p2 := cgroupOfRun("cat /proc/self/cgroup")
	wait(t, p2)
	if second := read(out2); second != first || !strings.Contains(first, "/action-") {
		t.Errorf("second action in cgroup %q, the first in %q: want the same, reused", second, first)
	}

	// Two at once: the second cannot share the first's cgroup.
	outA, pA := cgroupOfRun("cat /proc/self/cgroup; read x < /dev/null; sleep 0.3")
	outB, pB := cgroupOfRun("cat /proc/self/cgroup")
	wait(t, pB)
	wait(t, pA)
	if a, b := read(outA), read(outB); a == b {
		t.Errorf("two actions at once shared cgroup %q", a)
	}

	s.mu.Lock()
	pooled := len(s.pool)
	s.mu.Unlock()
	if pooled != 2 {
		t.Fatalf("%d cgroups pooled after two concurrent actions ended; want 2", pooled)
	}
	s.trimIdle()
	if ents, err := os.ReadDir(s.cgDir); err == nil {
		t.Errorf("the worker's cgroup is still there once idle, holding %d entries", len(ents))
	}

	// A cgroup killed whole (cgroup.kill) is not reused: the kernel kills
	// at birth what is later cloned into it.
	_, pk := cgroupOfRun("sleep 100")
	pk.Cancel()
	if r := wait(t, pk); !r.Cancelled {
		t.Fatalf("cancelled action: %+v", r)
	}
	out3, p3 := cgroupOfRun("cat /proc/self/cgroup")
	if r := wait(t, p3); r.ExitCode != 0 || r.Signal != 0 {
		t.Fatalf("the action after a cancelled one ended with %+v; want exit 0", r)
	}
	if read(out3) == "" {
		t.Error("the action after a cancelled one wrote nothing")
	}
}

// TestCgroupPopulatedFollowsItsProcesses: populated reads the kept-open
// cgroup.events of one cgroup again and again (a pooled cgroup serves
// many actions), and each read says whether a process is in it now.
func TestCgroupPopulatedFollowsItsProcesses(t *testing.T) {
	s := newSup(t, mode{"cgroup", true}, t.TempDir(), quietLog())
	dir := filepath.Join(s.cgDir, "populated-test")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	c, err := openCgroup(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { c.close(); removeCgroupDir(dir) }()
	if c.events < 0 {
		t.Fatal("cgroup.events was not kept open")
	}
	for round := range 3 {
		if c.populated() {
			t.Fatalf("round %d: an empty cgroup reads as populated", round)
		}
		cmd := exec.Command("sleep", "30")
		cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: c.fd}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		if !c.populated() {
			t.Errorf("round %d: a cgroup with a running process reads as empty", round)
		}
		cmd.Process.Kill()
		cmd.Wait()
		eventually(t, "the cgroup to empty", func() bool { return !c.populated() })
	}
}
