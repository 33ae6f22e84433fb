package server

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/gantry-build/gantry/internal/client"
	"github.com/gantry-build/gantry/internal/config"
	"github.com/gantry-build/gantry/internal/digest"
)

// Sandboxed actions run as these uids (when the tests run as root), so
// that leftover processes can be counted without confusing them with
// anything else on the machine.
const sandboxTestUID = 61700

// requireSandbox skips without bubblewrap on a dev machine, but fails
// under CI=true: CI must run the sandbox tests.
func requireSandbox(t *testing.T) {
	t.Helper()
	for _, tool := range []string{"bwrap", "prlimit", "setpriv"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("%s is required under CI=true (install bubblewrap and util-linux): %v", tool, err)
			}
			t.Skipf("%s not installed: %v", tool, err)
		}
	}
}

func startSandboxFarm(t *testing.T, mod func(*config.SandboxConfig)) *farm {
	requireSandbox(t)
	return startFarm(t, func(c *config.Config) {
		c.Worker.Sandbox.Mode = "all"
		c.Worker.Sandbox.UID = sandboxTestUID
		c.Worker.Sandbox.UIDCount = 2
		c.Worker.Sandbox.TmpSize = 64 << 20
		if mod != nil {
			mod(&c.Worker.Sandbox)
		}
	})
}

func withPlatform(props ...string) func(*repb.Action) {
	return func(a *repb.Action) {
		a.Platform = &repb.Platform{}
		for i := 0; i+1 < len(props); i += 2 {
			a.Platform.Properties = append(a.Platform.Properties, &repb.Platform_Property{Name: props[i], Value: props[i+1]})
		}
	}
}

func withTimeout(d time.Duration) func(*repb.Action) {
	return func(a *repb.Action) { a.Timeout = durationpb.New(d) }
}

// sandboxProcs counts processes running as the sandbox test uids. A
// zombie runs nothing and is not counted: in chroot mode bwrap itself
// runs as the action's uid, and its exited PID namespace init waits as a
// zombie of the worker until the worker's reaper takes it.
func sandboxProcs(t *testing.T) int {
	t.Helper()
	if os.Geteuid() != 0 {
		return 0
	}
	ents, _ := os.ReadDir("/proc")
	n := 0
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		f, err := os.Open(filepath.Join("/proc", e.Name(), "status"))
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if fs := strings.Fields(sc.Text()); len(fs) > 1 && fs[0] == "State:" && fs[1] == "Z" {
				break
			}
			if fs := strings.Fields(sc.Text()); len(fs) > 1 && fs[0] == "Uid:" {
				if u, _ := strconv.Atoi(fs[1]); u == sandboxTestUID || u == sandboxTestUID+1 {
					n++
				}
			}
		}
		f.Close()
	}
	return n
}

// noLeftovers waits (bounded) for the sandbox uids to have no processes.
func noLeftovers(t *testing.T) {
	t.Helper()
	for i := 0; i < 100; i++ {
		if sandboxProcs(t) == 0 {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Errorf("%d processes of the sandbox uids are still running after the action ended", sandboxProcs(t))
}

func (f *farm) stdio(r *repb.ActionResult) (string, string) {
	return f.read(r.GetStdoutDigest()), f.read(r.GetStderrDigest())
}

// mustRun runs cmd and fails unless the execution itself succeeded.
func (f *farm) mustRun(ctx context.Context, root digest.Digest, cmd *repb.Command, mod ...func(*repb.Action)) *repb.ActionResult {
	f.t.Helper()
	resp := f.run(ctx, root, cmd, mod...)
	if resp.Status.GetCode() != 0 || resp.Result == nil {
		f.t.Fatalf("execution failed: %v", resp.Status)
	}
	return resp.Result
}

func TestSandboxRunsNormalActionAsUnprivilegedUser(t *testing.T) {
	f := startSandboxFarm(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	in := f.putBytes([]byte("input\n"))
	root := f.put(&repb.Directory{Directories: []*repb.DirectoryNode{{Name: "in", Digest: f.put(&repb.Directory{Files: []*repb.FileNode{{Name: "a.txt", Digest: in.Proto()}}}).Proto()}}})
	cmd := shCmd("cat in/a.txt > out/copy.txt && id -u > out/uid.txt && echo scratch > /tmp/x && cat /tmp/x >> out/copy.txt && mkdir -p tree && echo leaf > tree/leaf", "out/copy.txt", "out/uid.txt")
	cmd.OutputDirectories = []string{"tree"}
	r := f.mustRun(ctx, root, cmd)
	if r.ExitCode != 0 {
		_, stderr := f.stdio(r)
		t.Fatalf("exit %d, stderr %q", r.ExitCode, stderr)
	}
	files := map[string]*repb.OutputFile{}
	for _, of := range r.OutputFiles {
		files[of.Path] = of
	}
	if got := f.read(files["out/copy.txt"].GetDigest()); got != "input\nscratch\n" {
		t.Errorf("out/copy.txt = %q", got)
	}
	if os.Geteuid() == 0 {
		if got := strings.TrimSpace(f.read(files["out/uid.txt"].GetDigest())); got != strconv.Itoa(sandboxTestUID) && got != strconv.Itoa(sandboxTestUID+1) {
			t.Errorf("action ran as uid %s, want the sandbox uid %d", got, sandboxTestUID)
		}
	}
	if len(r.OutputDirectories) != 1 {
		t.Errorf("output directories %v", r.OutputDirectories)
	}
	// Input files are hardlinks into the worker's cache: the action user
	// must not be able to change them (a non-root worker's actions keep
	// its uid, which owns them).
	if os.Geteuid() == 0 {
		r = f.mustRun(ctx, root, shCmd("echo tampered > in/a.txt || chmod 666 in/a.txt || exit 3; exit 0"))
		if r.ExitCode != 3 {
			t.Errorf("the action could change an input file (exit %d)", r.ExitCode)
		}
	}
	// The working directory is kept, also with Bazel's PWD=/proc/self/cwd
	// in the environment (bwrap would otherwise start in "/").
	wd := shCmd("cat a.txt > out.txt", "out.txt")
	wd.WorkingDirectory = "in"
	wd.EnvironmentVariables = append(wd.EnvironmentVariables, &repb.Command_EnvironmentVariable{Name: "PWD", Value: "/proc/self/cwd"})
	r = f.mustRun(ctx, root, wd)
	if r.ExitCode != 0 || len(r.OutputFiles) != 1 || f.read(r.OutputFiles[0].Digest) != "input\n" {
		_, stderr := f.stdio(r)
		t.Errorf("working directory in: exit %d, outputs %v, stderr %q", r.ExitCode, r.OutputFiles, stderr)
	}
}

func TestSandboxEscapesFail(t *testing.T) {
	f := startSandboxFarm(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	empty := digest.Empty(digest.SHA256)

	t.Run("WriteToEtc", func(t *testing.T) {
		target := fmt.Sprintf("/etc/gantry-escape-%d", os.Getpid())
		defer os.Remove(target)
		r := f.mustRun(ctx, empty, shCmd("echo pwned > "+target+" && exit 0; exit 9"))
		if r.ExitCode != 9 {
			t.Errorf("writing to /etc did not fail inside the sandbox (exit %d)", r.ExitCode)
		}
		if _, err := os.Stat(target); err == nil {
			t.Errorf("%s was created on the host", target)
		}
	})

	t.Run("ReadOtherExecRootAndCache", func(t *testing.T) {
		// Action A writes a secret into its exec root and waits for the
		// test to let it go; meanwhile action B tries to read it.
		a := shCmd("echo s3cret > secret.txt; i=0; while [ ! -e release ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done")
		doneA := make(chan *repb.ExecuteResponse, 1)
		go func() {
			resp, _, _ := client.Execute(ctx, f.conn, &repb.ExecuteRequest{ActionDigest: f.put(&repb.Action{CommandDigest: f.put(a).Proto(), InputRootDigest: empty.Proto()}).Proto()})
			doneA <- resp
		}()
		var secret string
		for i := 0; i < 600 && secret == ""; i++ {
			m, _ := filepath.Glob(filepath.Join(f.dir, "worker", "roots", "*", "secret.txt"))
			if len(m) == 1 {
				secret = m[0]
			} else {
				time.Sleep(50 * time.Millisecond)
			}
		}
		if secret == "" {
			t.Fatal("action A never wrote its secret")
		}
		// Let A go if the test stops early; once A has been let go, its
		// exec root may already serve another action: write nothing there.
		released := false
		release := func() {
			if !released {
				released = true
				os.WriteFile(filepath.Join(filepath.Dir(secret), "release"), nil, 0o644)
			}
		}
		defer release()
		// Nothing of the data dir (CAS, state, file cache, other exec
		// roots) is visible but this action's own exec root.
		b := shCmd(fmt.Sprintf("cat %s ../*/secret.txt 2>/dev/null && exit 0; find %s ! -type d ! -path \"$PWD/*\" | grep . && exit 0; exit 9", secret, f.dir))
		r := f.mustRun(ctx, empty, b)
		stdout, _ := f.stdio(r)
		if r.ExitCode != 9 || strings.Contains(stdout, "s3cret") {
			t.Errorf("action B saw another exec root, the file cache or the data dir: exit %d, stdout %q", r.ExitCode, stdout)
		}
		release()
		if resp := <-doneA; resp.GetResult().GetExitCode() != 0 {
			t.Errorf("action A: %v", resp)
		}
	})

	t.Run("Network", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		accepted := make(chan struct{}, 10)
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				accepted <- struct{}{}
				c.Close()
			}
		}()
		port := ln.Addr().(*net.TCPAddr).Port
		connect := shCmd(fmt.Sprintf("/bin/bash -c 'echo hi > /dev/tcp/127.0.0.1/%d' && exit 0; exit 9", port))
		r := f.mustRun(ctx, empty, connect)
		if r.ExitCode != 9 {
			t.Errorf("the action reached a loopback listener of the host (exit %d)", r.ExitCode)
		}
		select {
		case <-accepted:
			t.Error("the host listener accepted a connection from a sandboxed action")
		default:
		}
		// Control: the same command with network=on does connect, so the
		// check above can fail.
		r = f.mustRun(ctx, empty, connect, withPlatform("network", "on"))
		if r.ExitCode != 0 {
			_, stderr := f.stdio(r)
			t.Errorf("with network=on the action could not connect: exit %d, %s", r.ExitCode, stderr)
		}
	})

	t.Run("KillWorker", func(t *testing.T) {
		pid := os.Getpid() // the embedded worker runs in this process
		r := f.mustRun(ctx, empty, shCmd(fmt.Sprintf("kill -9 %d && exit 0; kill -9 -1; exit 9", pid)))
		if r.ExitCode != 9 {
			t.Errorf("kill -9 of the worker's pid succeeded from inside the sandbox (exit %d)", r.ExitCode)
		}
		// Still here, and the worker still runs actions.
		if r := f.mustRun(ctx, empty, shCmd("echo alive")); r.ExitCode != 0 {
			t.Errorf("the worker is unhealthy after the attempt: exit %d", r.ExitCode)
		}
	})

	t.Run("ForkBomb", func(t *testing.T) {
		spawn := shCmd("i=0; while [ $i -lt 300 ]; do sleep 30 & i=$((i+1)); done; echo all-forked")
		r := f.mustRun(ctx, empty, spawn, withPlatform("pids-limit", "40"), withTimeout(30*time.Second))
		stdout, stderr := f.stdio(r)
		if r.ExitCode == 0 || strings.Contains(stdout, "all-forked") {
			t.Errorf("300 processes started under pids-limit=40: exit %d, stdout %q, stderr %q", r.ExitCode, stdout, stderr)
		}
		noLeftovers(t)
		// A real fork bomb until the timeout: the action is killed with
		// everything it forked, and the worker keeps working. The action's
		// own shell execs its sleep rather than forking it: a fork there
		// races the bomb for the last pid, and losing it ends the action
		// early with a shell error instead of running into the timeout.
		bomb := shCmd("b() { b | b & }; b; exec sleep 60")
		resp := f.run(ctx, empty, bomb, withPlatform("pids-limit", "64"), withTimeout(2*time.Second))
		if codes.Code(resp.Status.GetCode()) != codes.DeadlineExceeded {
			t.Errorf("fork bomb: status %v, want DEADLINE_EXCEEDED", resp.Status)
		}
		noLeftovers(t)
		// Control: with a high enough limit all processes start.
		r = f.mustRun(ctx, empty, spawn, withPlatform("pids-limit", "1000"), withTimeout(30*time.Second))
		if stdout, stderr := f.stdio(r); !strings.Contains(stdout, "all-forked") {
			t.Errorf("control: 300 processes did not start under pids-limit=1000: exit %d, %q", r.ExitCode, stderr)
		}
		noLeftovers(t)
	})

	t.Run("NeverExits", func(t *testing.T) {
		resp := f.run(ctx, empty, shCmd("setsid sleep 60 & sleep 60 & exec sleep 60"), withTimeout(time.Second))
		if codes.Code(resp.Status.GetCode()) != codes.DeadlineExceeded {
			t.Errorf("status %v, want DEADLINE_EXCEEDED", resp.Status)
		}
		noLeftovers(t)
	})

	t.Run("MemoryLimit", func(t *testing.T) {
		hog := shCmd(`x=$(head -c 12000000 /dev/zero | tr '\0' a); echo ${#x}`)
		r := f.mustRun(ctx, empty, hog, withPlatform("memory-limit", "16MiB"))
		if stdout, _ := f.stdio(r); r.ExitCode == 0 || strings.Contains(stdout, "12000000") {
			t.Errorf("12MB string held under memory-limit=16MiB: exit %d", r.ExitCode)
		}
		r = f.mustRun(ctx, empty, hog, withPlatform("memory-limit", "512MiB"))
		if stdout, _ := f.stdio(r); r.ExitCode != 0 || !strings.Contains(stdout, "12000000") {
			t.Errorf("control: memory-limit=512MiB: exit %d, stdout %q", r.ExitCode, stdout)
		}
	})

	t.Run("FillsTmp", func(t *testing.T) {
		// The private /tmp is a tmpfs of tmp_size (64MiB here): filling it
		// fails the write, not the worker.
		r := f.mustRun(ctx, empty, shCmd("head -c 100000000 /dev/zero > /tmp/fill && exit 0; exit 9"))
		if _, stderr := f.stdio(r); r.ExitCode != 9 || !strings.Contains(stderr, "No space left") {
			t.Errorf("writing 100MB to a 64MiB /tmp: exit %d, stderr %q", r.ExitCode, stderr)
		}
		// Each action has its own /tmp: the next one starts empty.
		if r := f.mustRun(ctx, empty, shCmd("test -e /tmp/fill && exit 9; exit 0")); r.ExitCode != 0 {
			t.Error("an action saw the previous action's /tmp")
		}
	})

	t.Run("OutputSymlinksOutside", func(t *testing.T) {
		// Declared outputs that are symlinks out of the root must not make
		// the worker upload host files.
		hostFile, err := os.ReadFile("/etc/passwd")
		if err != nil {
			t.Skip(err)
		}
		for _, target := range []string{"/etc/passwd", "../../../../../../../../../../etc/passwd"} {
			resp := f.run(ctx, empty, shCmd("mkdir -p out && ln -s "+target+" out/leak", "out/leak"))
			t.Logf("symlink to %s: status %v", target, resp.Status)
			for _, of := range resp.GetResult().GetOutputFiles() {
				if f.read(of.Digest) == string(hostFile) {
					t.Errorf("symlink to %s: the worker uploaded the host's /etc/passwd", target)
				}
			}
			if resp.Status.GetCode() == 0 && len(resp.GetResult().GetOutputFileSymlinks())+len(resp.GetResult().GetOutputSymlinks()) == 0 {
				t.Errorf("symlink to %s: accepted without being reported as a symlink: %v", target, resp)
			}
		}
	})

	t.Run("BadProperties", func(t *testing.T) {
		for _, p := range [][]string{{"memory-limit", "lots"}, {"pids-limit", "-1"}, {"network", "maybe"}} {
			resp := f.run(ctx, empty, shCmd("true"), withPlatform(p...))
			if codes.Code(resp.Status.GetCode()) != codes.InvalidArgument || !strings.Contains(resp.Status.GetMessage(), p[0]) {
				t.Errorf("%s=%s: status %v, want INVALID_ARGUMENT naming the property", p[0], p[1], resp.Status)
			}
		}
	})

	// After all of that the worker is healthy.
	if r := f.mustRun(ctx, empty, shCmd("echo ok")); r.ExitCode != 0 {
		t.Errorf("worker unhealthy at the end: exit %d", r.ExitCode)
	}
}

func TestSandboxPerActionMode(t *testing.T) {
	f := startSandboxFarm(t, func(s *config.SandboxConfig) { s.Mode = "per_action" })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	empty := digest.Empty(digest.SHA256)
	probe := shCmd("test -w /etc && exit 0; exit 9") // writable /etc: root, no sandbox
	if os.Geteuid() != 0 {
		probe = shCmd("[ \"$(cat /proc/1/comm)\" = bwrap ] && exit 9; exit 0")
	}
	if r := f.mustRun(ctx, empty, probe); r.ExitCode != 0 {
		t.Errorf("per_action: an action that did not ask for the sandbox ran in it (exit %d)", r.ExitCode)
	}
	if r := f.mustRun(ctx, empty, probe, withPlatform("process-wrapper", "bubblewrap")); r.ExitCode != 9 {
		t.Errorf("process-wrapper=bubblewrap did not sandbox the action (exit %d)", r.ExitCode)
	}
}
