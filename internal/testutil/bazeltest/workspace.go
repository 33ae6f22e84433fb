package bazeltest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// MaxIdleSecs is --max_idle_secs: a Bazel server that was somehow not shut
// down (a killed test process) goes away by itself after it.
const MaxIdleSecs = 900

// WorkspaceTests is how many tests `bazel test //...` of the workspace runs.
const WorkspaceTests = 2

// Workspace is a private copy of testdata/bazel with its own Bazel output
// root, and so its own Bazel server: Shutdown stops it.
type Workspace struct {
	Client *Client
	// Dir is the workspace root Bazel runs in (the directory holding
	// WORKSPACE): the copy's workspace, or another of its workspaces
	// (crash, kill, platforms, ...) that a test points it at.
	Dir string
	// OutputUserRoot is --output_user_root.
	OutputUserRoot string
	// LogDir holds each invocation's command line and output.
	LogDir string
	// Invocations counts the invocations, naming their logs.
	Invocations int
}

// NewWorkspace copies testdata (the repository's testdata/bazel: the
// workspaces and the stand-ins for the external repositories they declare)
// to dir/bazel, so that the convenience symlinks Bazel creates stay out of
// the repository; Bazel's output root and the logs go under dir too.
func NewWorkspace(c *Client, testdata, dir string) (*Workspace, error) {
	if err := CopyTree(testdata, filepath.Join(dir, "bazel")); err != nil {
		return nil, fmt.Errorf("copying the workspace %s: %w", testdata, err)
	}
	w := &Workspace{
		Client:         c,
		Dir:            filepath.Join(dir, "bazel", "workspace"),
		OutputUserRoot: filepath.Join(dir, "root"),
		LogDir:         filepath.Join(dir, "logs"),
	}
	if err := os.MkdirAll(w.LogDir, 0o755); err != nil {
		return nil, err
	}
	return w, nil
}

// Result is what one Bazel invocation did.
type Result struct {
	Args     []string
	Output   string // stdout and stderr, interleaved
	ExitCode int
	Duration time.Duration
	// Log is the file holding Args and Output.
	Log string
}

// Run runs `bazel <command> <args>` in the workspace until it exits or ctx
// ends. Build and test commands also get the client's flags and the flags
// every test wants. A non-zero exit is not an error; failing to run Bazel,
// or ctx ending first (the Result holds the output so far), is.
func (w *Workspace) Run(ctx context.Context, command string, args ...string) (*Result, error) {
	argv := []string{
		"--output_user_root=" + w.OutputUserRoot,
		"--max_idle_secs=" + strconv.Itoa(MaxIdleSecs),
		// A developer's ~/.bazelrc must not change what is tested; Debian's system
		// bazelrc stays, since Bazel 4.2.3 needs its install_base.
		"--nohome_rc",
	}
	argv = append(argv, w.Client.StartupFlags...)
	argv = append(argv, command)
	switch command {
	case "build", "test":
		argv = append(argv, "--color=no", "--curses=no", "--incompatible_strict_action_env")
		argv = append(argv, w.Client.Flags...)
	}
	argv = append(argv, args...)

	cmd := exec.CommandContext(ctx, w.Client.Path, argv...)
	cmd.Dir = w.Dir
	cmd.Stdin = nil
	cmd.WaitDelay = 10 * time.Second
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out

	start := time.Now()
	err := cmd.Run()
	res := &Result{Args: argv, Output: out.String(), Duration: time.Since(start)}
	w.Invocations++
	res.Log = filepath.Join(w.LogDir, fmt.Sprintf("%02d-%s.log", w.Invocations, command))
	_ = os.WriteFile(res.Log, []byte(strings.Join(argv, " ")+"\n\n"+res.Output), 0o644)
	var exitErr *exec.ExitError
	switch {
	case ctx.Err() != nil:
		return res, fmt.Errorf("%s %s did not finish: %w", w.Client.Name, command, ctx.Err())
	case errors.As(err, &exitErr):
		res.ExitCode = exitErr.ExitCode()
	case err != nil:
		return res, fmt.Errorf("running %s: %w", w.Client.Path, err)
	}
	return res, nil
}

// Shutdown stops the workspace's Bazel server (nothing when Bazel never
// ran), bounded by timeout.
func (w *Workspace) Shutdown(timeout time.Duration) error {
	if _, err := os.Stat(w.OutputUserRoot); err != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	res, err := w.Run(ctx, "shutdown")
	if err != nil {
		return err
	}
	if res.ExitCode != 0 {
		return fmt.Errorf("bazel shutdown exited %d:\n%s", res.ExitCode, res.Output)
	}
	return nil
}

// ReadOutput returns the content of a file under bazel-bin.
func (w *Workspace) ReadOutput(rel string) (string, error) {
	b, err := os.ReadFile(filepath.Join(w.Dir, "bazel-bin", rel))
	if err != nil {
		return "", fmt.Errorf("reading output: %w", err)
	}
	return string(b), nil
}

// WorkspaceOutputs are the outputs of //... of the workspace in bazel-bin.
var WorkspaceOutputs = map[string]string{
	"greeting.txt":          "hello from gantry e2e\n",
	"shout.txt":             "HELLO FROM GANTRY E2E\n",
	"pair_first.txt":        "HELLO FROM GANTRY E2E\n",
	"pair_second.txt":       "22\n",
	"tree/a.txt":            "alpha\n",
	"tree/sub/b.txt":        "beta\n",
	"tree/sub/deeper/c.txt": "gamma\n",
	"tree_listing.txt":      "./a.txt\n./sub/b.txt\n./sub/deeper/c.txt\nalpha\nbeta\ngamma\n",
	"greeter_output.txt":    "hello, gantry (from C)\n",
}

// CheckOutputs checks the outputs of //... of the workspace in bazel-bin,
// so that bytes that came back from the remote cache or executor are the
// right ones (and executables still run).
func (w *Workspace) CheckOutputs() error {
	keys := make([]string, 0, len(WorkspaceOutputs))
	for k := range WorkspaceOutputs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var errs []error
	for _, k := range keys {
		got, err := w.ReadOutput(k)
		if err != nil {
			errs = append(errs, err)
		} else if got != WorkspaceOutputs[k] {
			errs = append(errs, fmt.Errorf("bazel-bin/%s = %q, want %q", k, got, WorkspaceOutputs[k]))
		}
	}
	out, err := exec.Command(filepath.Join(w.Dir, "bazel-bin", "greeter"), "cache").CombinedOutput()
	if err != nil || string(out) != "hello, cache (from C)\n" {
		errs = append(errs, fmt.Errorf("running bazel-bin/greeter: %v, output %q", err, out))
	}
	return errors.Join(errs...)
}

// TestsPassed checks that Bazel's output says every test of the
// workspace passed.
func (r *Result) TestsPassed() error {
	want := fmt.Sprintf("%d tests pass", WorkspaceTests)
	if !strings.Contains(r.Output, want) {
		return fmt.Errorf("Bazel's output does not say %q:\n%s", want, r.Output)
	}
	return nil
}

// ExitCodeHint explains the Bazel exit codes the tests meet.
func ExitCodeHint(code int) string {
	switch code {
	case 1:
		return " (build failed)"
	case 2:
		return " (command line or environment problem)"
	case 3:
		return " (build OK, some tests failed)"
	case 4:
		return " (build OK, no tests found)"
	case 34:
		return " (remote error: Bazel could not talk to the remote cache or executor)"
	case 36:
		return " (local environmental issue)"
	case 37:
		return " (Bazel crashed: unhandled exception)"
	}
	return ""
}

// CopyTree copies the regular files, directories and symlinks under src to
// dst, keeping executable bits and leaving out Bazel's convenience symlinks.
func CopyTree(src, dst string) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			if strings.HasPrefix(d.Name(), "bazel-") {
				return fs.SkipDir // convenience symlinks followed by accident
			}
			return os.MkdirAll(target, 0o755)
		case info.Mode()&fs.ModeSymlink != 0:
			if strings.HasPrefix(d.Name(), "bazel-") {
				return nil // convenience symlinks of a local run in the repository
			}
			link, err := os.Readlink(path)
			if err != nil {
				return err
			}
			return os.Symlink(link, target)
		case info.Mode().IsRegular():
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			return os.WriteFile(target, b, info.Mode().Perm()|0o200)
		default:
			return nil
		}
	})
}
