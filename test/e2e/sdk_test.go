package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// The remote-apis-sdks clients (remotetool and rexec), built at the version
// scripts/install-test-deps.sh pins into <repo>/.tools/bin, driven against
// `gantry serve` as subprocesses with their own flags.

const (
	// sdkToolTimeout bounds one run of remotetool or rexec.
	sdkToolTimeout = time.Minute
	// sdkInstance is the instance every call names: one with a slash, so the
	// ByteStream resource names carry a multi-segment instance.
	sdkInstance = "e2e/sdk"
)

// sdkTools runs remotetool and rexec against one server.
type sdkTools struct {
	remotetool, rexec string
	// flags connect a tool to the server: the SDK's connection flags.
	flags []string
	// env gives the tools a TMPDIR of the test's own: remotetool's
	// execute_action and check_determinism fetch the input tree of an action
	// given by digest into $TMPDIR and never remove it.
	env []string
}

// sdkTool returns the path of an SDK tool: <repo>/.tools/bin first (the
// pinned build), then PATH. It skips the test when the tool is missing, and
// fails it under CI=true.
func sdkTool(t *testing.T, name string) string {
	t.Helper()
	p := filepath.Join(repoRoot(t), ".tools", "bin", name)
	if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
		return p
	}
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	msg := fmt.Sprintf("%s (remote-apis-sdks) not found in %s or on PATH (run scripts/install-test-deps.sh)",
		name, filepath.Join(repoRoot(t), ".tools", "bin"))
	if inCI() {
		t.Fatal(msg + "; CI=true, so a missing client is a failure")
	}
	t.Skip(msg)
	return ""
}

// newSDKTools finds the tools (skipping or failing the test when they are
// missing) before it starts a server for them.
func newSDKTools(t *testing.T) (*sdkTools, *gantryProc) {
	t.Helper()
	remotetool, rexec := sdkTool(t, "remotetool"), sdkTool(t, "rexec")
	g := startGantry(t)
	return &sdkTools{
		remotetool: remotetool,
		rexec:      rexec,
		flags: []string{
			"--service=" + g.GRPCAddr,
			"--service_no_security",
			"--use_application_default_credentials=false",
			"--instance=" + sdkInstance,
			// glog: everything to stderr, no log files under /tmp.
			"--logtostderr",
		},
		env: []string{"TMPDIR=" + testDir(t, "sdk-tmp")},
	}, g
}

// remote runs `remotetool --operation=op args...` in dir.
func (s *sdkTools) remote(t *testing.T, dir, op string, args ...string) cmdResult {
	t.Helper()
	argv := append([]string{s.remotetool, "--operation=" + op}, s.flags...)
	return runCmd(t, dir, s.env, sdkToolTimeout, append(argv, args...)...)
}

// mustRemote is remote that fails the test on a non-zero exit.
func (s *sdkTools) mustRemote(t *testing.T, dir, op string, args ...string) cmdResult {
	t.Helper()
	res := s.remote(t, dir, op, args...)
	if res.code != 0 {
		t.Fatalf("remotetool --operation=%s %q exited %d; stdout:\n%s\nstderr:\n%s", op, args, res.code, tail(res.stdout), tail(res.stderr))
	}
	return res
}

// run runs `rexec flags... -- command...` with execRoot as its exec root
// and working directory, with --v=1 so that it logs the action's digest.
func (s *sdkTools) run(t *testing.T, execRoot string, flags []string, command ...string) cmdResult {
	t.Helper()
	argv := append([]string{s.rexec, "--exec_root=" + execRoot, "--v=1"}, s.flags...)
	argv = append(append(argv, flags...), "--")
	res := runCmd(t, execRoot, s.env, sdkToolTimeout, append(argv, command...)...)
	// rexec exits 0 whatever became of the action; an error of its own is
	// glog's fatal exit.
	if res.code != 0 {
		t.Fatalf("rexec %q exited %d; stderr:\n%s", flags, res.code, tail(res.stderr))
	}
	return res
}

var rexecActionDigest = regexp.MustCompile(`> Action digest: ([0-9a-f]{64}/[0-9]+)`)

// actionDigest returns the digest rexec logged for the action it ran.
func actionDigest(t *testing.T, res cmdResult) string {
	t.Helper()
	m := rexecActionDigest.FindStringSubmatch(res.stderr)
	if m == nil {
		t.Fatalf("rexec logged no action digest; stderr:\n%s", tail(res.stderr))
	}
	return m[1]
}

// TestSDKTools drives remote-apis-sdks' remotetool and rexec against `gantry
// serve` (with its embedded worker): CAS blobs and directory trees with
// symlinks, actions run with rexec then re-run by digest with remotetool,
// check_determinism both ways, download_action_result, and rexec's inputs,
// outputs (an output directory with a symlink, under a working directory),
// failing commands and timeouts.
func TestSDKTools(t *testing.T) {
	if testing.Short() {
		t.Skip("real-client end-to-end test: skipped with -short")
	}
	s, g := newSDKTools(t)

	t.Run("blob", func(t *testing.T) {
		dir := testDir(t, "sdk-blob")
		want := []byte("a blob from remotetool\x00\xff with a NUL and a high byte\n")
		src := filepath.Join(dir, "in.bin")
		sdkWriteFile(t, src, want, 0o644)
		s.mustRemote(t, dir, "upload_blob", "--path="+src)

		sum := sha256.Sum256(want)
		digest := fmt.Sprintf("%s/%d", hex.EncodeToString(sum[:]), len(want))
		dst := filepath.Join(dir, "out.bin")
		s.mustRemote(t, dir, "download_blob", "--digest="+digest, "--path="+dst)
		if got := sdkReadFile(t, dst); string(got) != string(want) {
			t.Errorf("download_blob %s wrote %q, want %q", digest, got, want)
		}

		// A blob nobody uploaded is NOT_FOUND, not empty bytes.
		missing := fmt.Sprintf("%064x/5", 1)
		res := s.remote(t, dir, "download_blob", "--digest="+missing, "--path="+filepath.Join(dir, "missing"))
		if res.code == 0 || !strings.Contains(res.stderr, "code = NotFound") {
			t.Errorf("download_blob of a blob never uploaded exited %d, want a failure with NotFound; stderr:\n%s", res.code, tail(res.stderr))
		}
	})

	t.Run("directory", func(t *testing.T) {
		dir := testDir(t, "sdk-dir")
		src := filepath.Join(dir, "src")
		sdkWriteFile(t, filepath.Join(src, "top.txt"), []byte("top\n"), 0o644)
		sdkWriteFile(t, filepath.Join(src, "sub", "deeper", "leaf.txt"), []byte("leaf\n"), 0o644)
		sdkWriteFile(t, filepath.Join(src, "sub", "tool.sh"), []byte("#!/bin/sh\necho tool\n"), 0o755)
		sdkSymlink(t, "sub/deeper/leaf.txt", filepath.Join(src, "link-to-file"))
		sdkSymlink(t, "deeper", filepath.Join(src, "sub", "link-to-dir"))
		sdkSymlink(t, "../top.txt", filepath.Join(src, "sub", "up"))

		res := s.mustRemote(t, dir, "upload_dir", "--path="+src, "--symlink_behavior=preserve", "--json=-")
		var stats struct {
			InputSymlinks int
			RootDigest    struct {
				Hash string
				Size int64
			}
		}
		if err := json.Unmarshal([]byte(res.stdout), &stats); err != nil {
			t.Fatalf("upload_dir --json=-: %v; stdout:\n%s", err, res.stdout)
		}
		if stats.InputSymlinks != 3 {
			t.Errorf("upload_dir counted %d symlinks, want 3", stats.InputSymlinks)
		}
		root := fmt.Sprintf("%s/%d", stats.RootDigest.Hash, stats.RootDigest.Size)

		dst := filepath.Join(dir, "dst")
		s.mustRemote(t, dir, "download_dir", "--digest="+root, "--path="+dst)
		if got, want := sdkTreeListing(t, dst), sdkTreeListing(t, src); got != want {
			t.Errorf("download_dir %s gave the tree\n%s\nwant the uploaded one\n%s", root, got, want)
		}
	})

	t.Run("actions", func(t *testing.T) {
		root := testDir(t, "sdk-action")
		sdkWriteFile(t, filepath.Join(root, "in", "words.txt"), []byte("gantry runs remotetool\n"), 0o644)
		sdkWriteFile(t, filepath.Join(root, "in", "more.txt"), []byte("and rexec\n"), 0o644)
		script := "mkdir -p out && cat in/words.txt in/more.txt | tr a-z A-Z > out/upper.txt && echo on-stdout && echo on-stderr >&2"
		res := s.run(t, root, []string{"--inputs=in", "--output_files=out/upper.txt"}, "/bin/sh", "-c", script)
		const wantUpper = "GANTRY RUNS REMOTETOOL\nAND REXEC\n"
		if got := string(sdkReadFile(t, filepath.Join(root, "out", "upper.txt"))); got != wantUpper {
			t.Errorf("rexec brought back out/upper.txt = %q, want %q", got, wantUpper)
		}
		if !strings.Contains(res.stdout, "on-stdout") || !strings.Contains(res.stderr, "on-stderr") {
			t.Errorf("rexec did not pass the action's stdout and stderr on; stdout:\n%s\nstderr:\n%s", res.stdout, tail(res.stderr))
		}
		digest := actionDigest(t, res)

		out := s.mustRemote(t, root, "show_action", "--digest="+digest).stdout
		for _, want := range []string{"in/words.txt", "out/upper.txt", "Exit code: 0"} {
			if !strings.Contains(out, want) {
				t.Errorf("show_action %s does not mention %q:\n%s", digest, want, out)
			}
		}

		// execute_action runs the action again (skipping the cache) and
		// downloads its outputs.
		executed := g.counter(t, executedSeries)
		reran := filepath.Join(root, "reran")
		out = s.mustRemote(t, root, "execute_action", "--digest="+digest, "--path="+reran).stdout
		if !strings.Contains(out, "Status:SuccessResultStatus") {
			t.Errorf("execute_action %s did not succeed by running it:\n%s", digest, out)
		}
		if got := string(sdkReadFile(t, filepath.Join(reran, "out", "upper.txt"))); got != wantUpper {
			t.Errorf("execute_action wrote out/upper.txt = %q, want %q", got, wantUpper)
		}

		// check_determinism runs it three times more and compares outputs.
		s.mustRemote(t, root, "check_determinism", "--digest="+digest, "--exec_attempts=3")
		// The server counts an operation just after its last message.
		waitFor(t, 10*time.Second, "the server counted 4 more executions", func() bool {
			return g.counter(t, executedSeries)-executed >= 4
		})
		if n := g.counter(t, executedSeries) - executed; n != 4 {
			t.Errorf("execute_action and check_determinism --exec_attempts=3 made the server execute %v actions, want 4", n)
		}

		// download_action_result: the cached result's outputs, stdout and stderr.
		got := filepath.Join(root, "result")
		s.mustRemote(t, root, "download_action_result", "--digest="+digest, "--path="+got)
		for name, want := range map[string]string{
			"out/upper.txt": wantUpper,
			"stdout":        "on-stdout\n",
			"stderr":        "on-stderr\n",
		} {
			if b := string(sdkReadFile(t, filepath.Join(got, name))); b != want {
				t.Errorf("download_action_result wrote %s = %q, want %q", name, b, want)
			}
		}
	})

	t.Run("not_deterministic", func(t *testing.T) {
		root := testDir(t, "sdk-nondet")
		res := s.run(t, root, []string{"--output_files=now.txt"}, "/bin/sh", "-c", "date +%s%N > now.txt")
		digest := actionDigest(t, res)
		chk := s.remote(t, root, "check_determinism", "--digest="+digest, "--exec_attempts=2")
		if chk.code == 0 {
			t.Fatalf("check_determinism of an action writing the time exited 0; stderr:\n%s", tail(chk.stderr))
		}
		for _, want := range []string{"does not produce a consistent digest for now.txt", "action is not deterministic"} {
			if !strings.Contains(chk.stderr, want) {
				t.Errorf("check_determinism did not say %q; stderr:\n%s", want, tail(chk.stderr))
			}
		}
	})

	t.Run("rexec_working_directory", func(t *testing.T) {
		// Inputs are relative to the exec root, outputs to the working
		// directory (as remote_execution.proto's Command says; rexec's
		// --help says "relative to exec root" for them too).
		root := testDir(t, "sdk-wd")
		sdkWriteFile(t, filepath.Join(root, "sub", "in.txt"), []byte("input\n"), 0o644)
		s.run(t, root, []string{"--working_directory=sub", "--inputs=sub/in.txt", "--output_files=f.txt", "--output_directories=od"},
			"/bin/sh", "-c", "mkdir -p od/deep && cp in.txt od/deep/c.txt && ln -s deep/c.txt od/link && echo f > f.txt")
		const want = `./
sub/
sub/f.txt exec=false "f\n"
sub/in.txt exec=false "input\n"
sub/od/
sub/od/deep/
sub/od/deep/c.txt exec=false "input\n"
sub/od/link -> deep/c.txt
`
		if got := sdkTreeListing(t, root); got != want {
			t.Errorf("after rexec --working_directory=sub the exec root holds\n%s\nwant\n%s", got, want)
		}
	})

	t.Run("rexec_exit_code", func(t *testing.T) {
		root := testDir(t, "sdk-exit")
		res := s.run(t, root, nil, "/bin/sh", "-c", "echo about-to-fail >&2; exit 3")
		// rexec itself exits 0 (remote-apis-sdks' rexec ignores the result):
		// the exit code is in its message.
		for _, want := range []string{"about-to-fail", "Remote action FAILED with exit code 3."} {
			if !strings.Contains(res.stderr, want) {
				t.Errorf("rexec of a command exiting 3 did not print %q; stderr:\n%s", want, tail(res.stderr))
			}
		}
	})

	t.Run("rexec_timeout", func(t *testing.T) {
		root := testDir(t, "sdk-timeout")
		start := time.Now()
		res := s.run(t, root, []string{"--exec_timeout=1s", "--output_files=never.txt"}, "/bin/sh", "-c", "sleep 30; touch never.txt")
		// The SDK reports TIMED OUT only for DEADLINE_EXCEEDED in the
		// ExecuteResponse's status.
		if !strings.Contains(res.stderr, "Remote action TIMED OUT after 1.0") {
			t.Errorf("rexec --exec_timeout=1s of `sleep 30` did not report a timeout; stderr:\n%s", tail(res.stderr))
		}
		if d := time.Since(start); d > 20*time.Second {
			t.Errorf("rexec --exec_timeout=1s of `sleep 30` took %v", d)
		}
		if _, err := os.Lstat(filepath.Join(root, "never.txt")); err == nil {
			t.Errorf("the timed-out action's output never.txt came back")
		}
	})
}

// sdkWriteFile writes b to path with mode perm, making its parent directories.
func sdkWriteFile(t *testing.T, path string, b []byte, perm os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, perm); err != nil {
		t.Fatal(err)
	}
}

func sdkReadFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Errorf("%v", err)
	}
	return b
}

func sdkSymlink(t *testing.T, target, path string) {
	t.Helper()
	if err := os.Symlink(target, path); err != nil {
		t.Fatal(err)
	}
}

// sdkTreeListing describes the tree under root, one line per entry: its path,
// and a file's executable bit and content or a symlink's target (never
// followed).
func sdkTreeListing(t *testing.T, root string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(path)
			if err != nil {
				return err
			}
			fmt.Fprintf(&b, "%s -> %s\n", rel, target)
		case d.IsDir():
			fmt.Fprintf(&b, "%s/\n", rel)
		default:
			content, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			fmt.Fprintf(&b, "%s exec=%v %q\n", rel, info.Mode()&0o100 != 0, content)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("listing %s: %v", root, err)
	}
	return b.String()
}
