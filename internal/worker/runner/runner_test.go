package runner

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// testPath is the PATH given to test commands.
const testPath = "PATH=/usr/bin:/bin"

// guard bounds waits in tests: it catches hangs, it is not a timing
// assertion.
const guard = 60 * time.Second

// sup is the supervisor of the tests that do not choose one (TestMain).
var sup *Supervisor

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		os.Exit(workerHelper())
	}
	dir, err := os.MkdirTemp("", "runner-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if sup, err = NewSupervisor(dir, quietLog()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	sup.Close()
	os.RemoveAll(dir)
	os.Exit(code)
}

func start(t *testing.T, spec Spec) *Process {
	t.Helper()
	return startWith(t, sup, spec)
}

func startWith(t *testing.T, s *Supervisor, spec Spec) *Process {
	t.Helper()
	if spec.Dir == "" {
		spec.Dir = t.TempDir()
	}
	p, err := s.Start(spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Cancel(); p.Wait() })
	return p
}

func wait(t *testing.T, p *Process) Result {
	t.Helper()
	select {
	case <-p.Done():
	case <-time.After(guard):
		t.Fatalf("process %d did not end", p.Pid())
	}
	r := p.Wait()
	if r.Err != nil {
		t.Errorf("Result.Err = %v", r.Err)
	}
	return r
}

// eventually polls cond until it holds or the guard expires.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(guard)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// procState returns the state letter and process group of pid from
// /proc/PID/stat.
func procState(pid int) (state byte, pgrp int, ok bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, false
	}
	i := bytes.LastIndexByte(b, ')')
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 3 {
		return 0, 0, false
	}
	pgrp, _ = strconv.Atoi(f[2])
	return f[0][0], pgrp, true
}

// groupMembers returns the states of the live (non-zombie) processes in
// process group pgid.
func groupMembers(pgid int) map[int]byte {
	out := map[int]byte{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, pg, ok := procState(pid); ok && pg == pgid && st != 'Z' && st != 'X' {
			out[pid] = st
		}
	}
	return out
}

func TestExitCodes(t *testing.T) {
	tests := []struct {
		name   string
		script string
		code   int
		signal syscall.Signal
	}{
		{"success", "exit 0", 0, 0},
		{"failure", "exit 3", 3, 0},
		{"max", "exit 255", 255, 0},
		{"killed by signal", "kill -KILL $$", 128 + 9, syscall.SIGKILL},
		{"terminated", "kill -TERM $$", 128 + 15, syscall.SIGTERM},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := wait(t, start(t, Spec{Args: []string{"sh", "-c", tt.script}, Env: []string{testPath}}))
			if r.ExitCode != tt.code || r.Signal != tt.signal || r.TimedOut || r.Cancelled {
				t.Errorf("result = %+v, want exit %d signal %v", r, tt.code, tt.signal)
			}
			if r.WallTime <= 0 || r.EndTime.Before(r.StartTime) {
				t.Errorf("times: %+v", r)
			}
		})
	}
}

func TestExactEnvironment(t *testing.T) {
	t.Setenv("GANTRY_WORKER_SECRET", "leak")
	tests := []struct {
		name string
		env  []string
		want string
	}{
		{"given variables only", []string{"A=1", "B=two words"}, "A=1\nB=two words\n"},
		{"nil environment is empty", nil, ""},
		{"empty environment is empty", []string{}, ""},
		{"last duplicate wins", []string{"A=1", "A=2"}, "A=2\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			out := filepath.Join(dir, "out")
			r := wait(t, start(t, Spec{Args: []string{"/usr/bin/env"}, Env: tt.env, Dir: dir, Stdout: out}))
			if r.ExitCode != 0 {
				t.Fatalf("env exited %d", r.ExitCode)
			}
			got, _ := os.ReadFile(out)
			if string(got) != tt.want {
				t.Errorf("environment = %q, want %q", got, tt.want)
			}
			if strings.Contains(string(got), "GANTRY_WORKER_SECRET") {
				t.Error("the worker's environment leaked into the action")
			}
		})
	}
}

func writeScript(t *testing.T, p, body string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), mode); err != nil {
		t.Fatal(err)
	}
}

func TestProgramResolution(t *testing.T) {
	dir := t.TempDir()
	tools := t.TempDir()
	writeScript(t, filepath.Join(tools, "mytool"), "echo tools", 0o755)
	writeScript(t, filepath.Join(dir, "local"), "echo local", 0o755)
	writeScript(t, filepath.Join(dir, "sub", "tool"), "echo sub", 0o755)
	writeScript(t, filepath.Join(dir, "bin", "reltool"), "echo relpath", 0o755)
	writeScript(t, filepath.Join(dir, "noexec"), "echo no", 0o644)
	os.Mkdir(filepath.Join(dir, "adir"), 0o755)
	// The worker's PATH has tools; the action's must be used instead.
	t.Setenv("PATH", tools+":"+os.Getenv("PATH"))

	tests := []struct {
		name    string
		args    []string
		env     []string
		want    string
		wantErr string
	}{
		{"bare name in the action's PATH", []string{"mytool"}, []string{"PATH=/nonexistent:" + tools}, "tools\n", ""},
		{"bare name only in the worker's PATH", []string{"mytool"}, []string{"PATH=/usr/bin:/bin"}, "", "not found in the action's PATH"},
		{"no PATH uses the default", []string{"sh", "-c", "echo default"}, nil, "default\n", ""},
		{"relative PATH entry is relative to the working directory", []string{"reltool"}, []string{"PATH=bin"}, "relpath\n", ""},
		{"empty PATH entry is the working directory", []string{"local"}, []string{"PATH=/nonexistent:"}, "local\n", ""},
		{"dot slash is relative to the working directory", []string{"./local"}, nil, "local\n", ""},
		{"path with a slash is relative to the working directory", []string{"sub/tool"}, nil, "sub\n", ""},
		{"absolute path", []string{filepath.Join(tools, "mytool")}, nil, "tools\n", ""},
		{"missing relative path", []string{"./nope"}, nil, "", "no such file"},
		{"not executable", []string{"./noexec"}, nil, "", "not executable"},
		{"directory", []string{"./adir"}, nil, "", "not a regular file"},
		{"empty PATH value searches the working directory", []string{"local"}, []string{"PATH="}, "local\n", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "out")
			p, err := sup.Start(Spec{Args: tt.args, Env: tt.env, Dir: dir, Stdout: out})
			if tt.wantErr != "" {
				if err == nil {
					p.Wait()
					t.Fatalf("Start succeeded, want an error containing %q", tt.wantErr)
				}
				if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("err = %v, want ErrNotFound containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if r := wait(t, p); r.ExitCode != 0 {
				t.Fatalf("exit %d", r.ExitCode)
			}
			if got, _ := os.ReadFile(out); string(got) != tt.want {
				t.Errorf("output = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestStartErrors(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name string
		spec Spec
		want string
	}{
		{"no arguments", Spec{Dir: dir}, "no arguments"},
		{"empty program", Spec{Args: []string{""}, Dir: dir}, "no arguments"},
		{"missing working directory", Spec{Args: []string{"/bin/true"}, Dir: filepath.Join(dir, "nope")}, "not a directory"},
		{"stdout in a missing directory", Spec{Args: []string{"/bin/true"}, Dir: dir, Stdout: filepath.Join(dir, "no", "out")}, "creating output file"},
		{"stderr in a missing directory", Spec{Args: []string{"/bin/true"}, Dir: dir, Stderr: filepath.Join(dir, "no", "err")}, "creating output file"},
		{"negative timeout", Spec{Args: []string{"/bin/true"}, Dir: dir, Timeout: -1}, "negative timeout"},
		{"missing wrapper", Spec{Args: []string{"/bin/true"}, Dir: dir, Wrapper: []string{"no-such-wrapper-xyz"}}, "wrapper"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := sup.Start(tt.spec)
			if err == nil {
				p.Wait()
				t.Fatal("Start succeeded")
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want it to contain %q", err, tt.want)
			}
		})
	}
}

func TestOutputFiles(t *testing.T) {
	dir := t.TempDir()
	out, errf := filepath.Join(dir, "out"), filepath.Join(dir, "err")
	os.WriteFile(out, []byte("stale content that must be truncated"), 0o644)
	r := wait(t, start(t, Spec{Args: []string{"sh", "-c", "echo to-out; echo to-err >&2"}, Env: []string{testPath}, Dir: dir, Stdout: out, Stderr: errf}))
	if r.ExitCode != 0 {
		t.Fatal(r)
	}
	if got, _ := os.ReadFile(out); string(got) != "to-out\n" {
		t.Errorf("stdout = %q", got)
	}
	if got, _ := os.ReadFile(errf); string(got) != "to-err\n" {
		t.Errorf("stderr = %q", got)
	}

	both := filepath.Join(dir, "both")
	wait(t, start(t, Spec{Args: []string{"sh", "-c", "echo one; echo two >&2; echo three"}, Env: []string{testPath}, Dir: dir, Stdout: both, Stderr: both}))
	if got, _ := os.ReadFile(both); string(got) != "one\ntwo\nthree\n" {
		t.Errorf("shared output = %q", got)
	}
}

func TestTimeoutKillsGroupAndKeepsPartialOutput(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	p := start(t, Spec{
		Args:    []string{"sh", "-c", "echo partial; sleep 100 & sleep 100; echo never"},
		Env:     []string{testPath},
		Dir:     dir,
		Stdout:  out,
		Timeout: time.Second,
	})
	pgid := p.Pid()
	r := wait(t, p)
	if !r.TimedOut || r.Cancelled || r.Signal != syscall.SIGKILL {
		t.Errorf("result = %+v, want TimedOut by SIGKILL", r)
	}
	eventually(t, "the process group to die", func() bool { return len(groupMembers(pgid)) == 0 })
	if got, _ := os.ReadFile(out); string(got) != "partial\n" {
		t.Errorf("stdout = %q, want the output written before the timeout", got)
	}
}

func TestStragglersAreKilledAfterNormalExit(t *testing.T) {
	p := start(t, Spec{Args: []string{"sh", "-c", "sleep 100 & sleep 100 & echo done"}, Env: []string{testPath}})
	pgid := p.Pid()
	r := wait(t, p)
	if r.ExitCode != 0 || r.TimedOut || r.Cancelled {
		t.Errorf("result = %+v", r)
	}
	eventually(t, "background processes to be killed", func() bool { return len(groupMembers(pgid)) == 0 })
}

func TestCancel(t *testing.T) {
	dir := t.TempDir()
	p := start(t, Spec{Args: []string{"sh", "-c", "sleep 100 & sleep 100"}, Env: []string{testPath}, Dir: dir, Timeout: time.Hour})
	pgid := p.Pid()
	eventually(t, "the background sleep", func() bool { return len(groupMembers(pgid)) >= 2 })
	p.Cancel()
	p.Cancel() // idempotent
	r := wait(t, p)
	if !r.Cancelled || r.TimedOut || r.Signal != syscall.SIGKILL || r.ExitCode != 137 {
		t.Errorf("result = %+v, want Cancelled by SIGKILL", r)
	}
	eventually(t, "the process group to die", func() bool { return len(groupMembers(pgid)) == 0 })
	// Signals after the end are harmless no-ops.
	p.Cancel()
	if err := p.Suspend(); err != nil {
		t.Error(err)
	}
	if err := p.Resume(); err != nil {
		t.Error(err)
	}
	if again := p.Wait(); again != r {
		t.Errorf("second Wait = %+v, want %+v", again, r)
	}
}

func allStopped(pgid int, want bool) func() bool {
	return func() bool {
		m := groupMembers(pgid)
		if len(m) == 0 {
			return false
		}
		for _, st := range m {
			if (st == 'T') != want {
				return false
			}
		}
		return true
	}
}

func TestSuspendResume(t *testing.T) {
	dir := t.TempDir()
	counter := filepath.Join(dir, "counter")
	p := start(t, Spec{
		// A child process does the counting, so stopping only the
		// leader would not be enough. The loop uses builtins only: a
		// process stopped between vfork and exec would leave its
		// parent in state D rather than T.
		Args: []string{"sh", "-c", `sh -c 'i=0; while :; do i=$((i+1)); echo $i > counter; done' & wait`},
		Env:  []string{testPath},
		Dir:  dir,
	})
	pgid := p.Pid()
	read := func() string { b, _ := os.ReadFile(counter); return string(b) }
	eventually(t, "the counter to start", func() bool { return read() != "" })

	if err := p.Suspend(); err != nil {
		t.Fatal(err)
	}
	if err := p.Suspend(); err != nil { // idempotent
		t.Fatal(err)
	}
	eventually(t, "every process to be stopped", allStopped(pgid, true))
	v1 := read()
	if !allStopped(pgid, true)() {
		t.Fatal("a process resumed on its own")
	}
	if v2 := read(); v1 != v2 {
		t.Errorf("counter advanced from %q to %q while every process was stopped", v1, v2)
	}
	select {
	case <-p.Done():
		t.Fatal("suspended process ended")
	default:
	}

	if err := p.Resume(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "processes to run again", allStopped(pgid, false))
	eventually(t, "the counter to advance", func() bool { return read() != v1 })
	p.Cancel()
	r := wait(t, p)
	if !r.Cancelled || r.SuspendedTime <= 0 {
		t.Errorf("result = %+v, want Cancelled with some suspended time", r)
	}
}

func TestSuspendedTimeDoesNotCountTowardTimeout(t *testing.T) {
	const timeout = time.Second
	p := start(t, Spec{Args: []string{"sleep", "100"}, Env: []string{testPath}, Timeout: timeout})
	if err := p.Suspend(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the process to stop", allStopped(p.Pid(), true))
	// Stay suspended for longer than the whole timeout.
	time.Sleep(timeout + timeout/2)
	select {
	case <-p.Done():
		t.Fatalf("the process was killed while suspended: %+v", p.Wait())
	default:
	}
	if err := p.Resume(); err != nil {
		t.Fatal(err)
	}
	// The rest of the timeout still applies once resumed.
	r := wait(t, p)
	if !r.TimedOut {
		t.Errorf("result = %+v, want TimedOut after resuming", r)
	}
	if r.SuspendedTime < timeout+timeout/2 {
		t.Errorf("SuspendedTime = %v, want at least %v", r.SuspendedTime, timeout+timeout/2)
	}
}

func TestCancelWhileSuspended(t *testing.T) {
	p := start(t, Spec{Args: []string{"sleep", "100"}, Env: []string{testPath}})
	if err := p.Suspend(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the process to stop", allStopped(p.Pid(), true))
	p.Cancel()
	if r := wait(t, p); !r.Cancelled || r.Signal != syscall.SIGKILL {
		t.Errorf("result = %+v, want Cancelled", r)
	}
}

func TestWrapper(t *testing.T) {
	dir, tools := t.TempDir(), t.TempDir()
	writeScript(t, filepath.Join(tools, "tool"), `echo "$WRAPPED $0 $1"`, 0o755)
	out := filepath.Join(dir, "out")
	r := wait(t, start(t, Spec{
		Wrapper: []string{"env", "WRAPPED=yes"},
		Args:    []string{"tool", "arg1"},
		Env:     []string{"PATH=" + tools},
		Dir:     dir,
		Stdout:  out,
	}))
	if r.ExitCode != 0 {
		t.Fatal(r)
	}
	got, _ := os.ReadFile(out)
	f := strings.Fields(string(got))
	if len(f) != 3 || f[0] != "yes" || f[1] != filepath.Join(tools, "tool") || f[2] != "arg1" {
		t.Errorf("output %q, want the wrapper's variable, the resolved program and its argument", got)
	}
}

func TestResourceUsage(t *testing.T) {
	r := wait(t, start(t, Spec{Args: []string{"sh", "-c", "i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done"}, Env: []string{testPath}}))
	if r.ExitCode != 0 {
		t.Fatal(r)
	}
	if r.UserTime+r.SystemTime <= 0 || r.MaxRSS <= 0 {
		t.Errorf("usage user=%v sys=%v maxrss=%d, want positive values", r.UserTime, r.SystemTime, r.MaxRSS)
	}
}
