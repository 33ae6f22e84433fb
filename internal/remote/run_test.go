package remote

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/gantry-build/gantry/internal/digest"
)

// TestRunInputsOutputsAndCache: a command reads inputs from nested
// directories and from a sibling directory, writes output files (one
// executable, one in a new directory), an output directory and prints to
// stdout and stderr; its exit code comes back. The second run is an
// ActionCache hit that uploads nothing and rewrites nothing.
func TestRunInputsOutputsAndCache(t *testing.T) {
	c, _ := newClient(t)
	root := t.TempDir()
	writeFiles(t, root, map[string]string{
		"src/main.txt":        "main\n",
		"src/sub/deep/x.txt":  "deep\n",
		"include/header.txt":  "header\n",
		"include/nested/y.h":  "y\n",
		"src/sub/unused.txt":  "sent but unused\n",
		"outside/not-sent.sh": "never\n",
	})
	if err := os.Chmod(filepath.Join(root, "src/main.txt"), 0o755); err != nil {
		t.Fatal(err)
	}
	spec := Spec{
		Args: sh(`set -e
cat main.txt sub/deep/x.txt ../include/header.txt ../include/nested/y.h > out/all.txt
test -x main.txt && echo exec-kept > out/exec.txt
test ! -e ../outside && echo not-sent >> out/exec.txt
mkdir -p gen/a && echo gen > gen/a/g.txt && echo top > gen/top.txt
printf '#!/bin/sh\n' > tool.sh && chmod +x tool.sh
echo to-stdout; echo to-stderr >&2; echo "$GREETING"`),
		Env:         []string{"PATH=/usr/bin:/bin", "GREETING=hello"},
		LocalRoot:   root,
		WorkingDir:  "src",
		Inputs:      []Input{{Local: filepath.Join(root, "src"), Path: "src"}, {Local: filepath.Join(root, "include"), Path: "include"}},
		OutputFiles: []string{"out/all.txt", "out/exec.txt", "tool.sh"},
		OutputDirs:  []string{"gen"},
	}
	code, stdout, stderr, info := runSpec(t, c, spec)
	if code != 0 {
		t.Errorf("exit code %d, want 0", code)
	}
	if stdout != "to-stdout\nhello\n" || stderr != "to-stderr\n" {
		t.Errorf("stdout %q, stderr %q", stdout, stderr)
	}
	for p, want := range map[string]string{
		"src/out/all.txt":  "main\ndeep\nheader\ny\n",
		"src/out/exec.txt": "exec-kept\nnot-sent\n",
		"src/gen/a/g.txt":  "gen\n",
		"src/gen/top.txt":  "top\n",
		"src/tool.sh":      "#!/bin/sh\n",
	} {
		if got := readFile(t, filepath.Join(root, p)); got != want {
			t.Errorf("%s = %q, want %q", p, got, want)
		}
	}
	if fi, err := os.Stat(filepath.Join(root, "src/tool.sh")); err != nil || fi.Mode().Perm()&0o100 == 0 {
		t.Errorf("tool.sh lost its executable bit: %v %v", fi.Mode(), err)
	}
	if info.CacheHit() || info.Upload.Uploaded == 0 || info.BytesUp() == 0 || info.Exec.OperationName == "" {
		t.Errorf("first run: %+v", info)
	}
	if info.Prepare.Files != 5 {
		t.Errorf("first run sent %d files, want 5", info.Prepare.Files)
	}
	firstAction := info.Action

	code, stdout, stderr, info = runSpec(t, c, spec)
	if code != 0 || stdout != "to-stdout\nhello\n" || stderr != "to-stderr\n" {
		t.Errorf("second run: code %d stdout %q stderr %q", code, stdout, stderr)
	}
	if info.Action != firstAction {
		t.Errorf("the outputs of the first run, inside an input directory, changed the action: %s, then %s", firstAction, info.Action)
	}
	if !info.Lookup.Hit || info.Upload.Uploaded != 0 || info.Exec.OperationName != "" {
		t.Errorf("second run was not an ActionCache hit without uploads: %+v", info)
	}
	if info.Download.Written != 0 || info.Download.Unchanged != info.Download.Files || info.Download.Files != 5 {
		t.Errorf("second run rewrote outputs that were up to date: %+v", info.Download)
	}

	// A damaged output is rewritten from the cache.
	os.WriteFile(filepath.Join(root, "src/gen/a/g.txt"), []byte("damaged"), 0o644)
	_, _, _, info = runSpec(t, c, spec)
	if got := readFile(t, filepath.Join(root, "src/gen/a/g.txt")); got != "gen\n" || info.Download.Written != 1 {
		t.Errorf("damaged output: %q, download %+v", got, info.Download)
	}
}

// TestRunExitCode: a failing action's exit code and stderr come back, and
// (as the server does not cache failures) it runs again next time.
func TestRunExitCode(t *testing.T) {
	c, _ := newClient(t)
	spec := Spec{Args: sh("echo broken >&2; exit 3"), LocalRoot: t.TempDir()}
	for i := range 2 {
		code, stdout, stderr, info := runSpec(t, c, spec)
		if code != 3 || stdout != "" || stderr != "broken\n" || info.CacheHit() {
			t.Errorf("run %d: code %d stdout %q stderr %q info %+v", i, code, stdout, stderr, info)
		}
	}
}

// TestRunNoCache: NoCache skips the lookup and runs the action again.
func TestRunNoCache(t *testing.T) {
	c, _ := newClient(t)
	root := t.TempDir()
	counter := filepath.Join(t.TempDir(), "runs")
	spec := Spec{Args: sh("echo run >> " + counter + "; echo done"), LocalRoot: root}
	for range 2 {
		if _, stdout, _, _ := runSpec(t, c, spec); stdout != "done\n" {
			t.Fatalf("stdout %q", stdout)
		}
	}
	if got := readFile(t, counter); got != "run\n" {
		t.Fatalf("the cached action ran %d times, want once", strings.Count(got, "run"))
	}
	spec.NoCache = true
	_, _, _, info := runSpec(t, c, spec)
	if info.CacheHit() {
		t.Errorf("a --no-cache run reports a cache hit: %+v", info)
	}
	if got := readFile(t, counter); got != "run\nrun\n" {
		t.Errorf("NoCache did not run the action again: %q", got)
	}
}

// TestUploadSkipsWhatTheCASHas: a second action sharing inputs with a
// first one asks only about its new blobs and uploads only those; a large
// input (more than a batch) is streamed and arrives intact.
func TestUploadSkipsWhatTheCASHas(t *testing.T) {
	c, _ := newClient(t)
	root := t.TempDir()
	big := bytes.Repeat([]byte("0123456789abcdef"), (3<<20)/16+7) // 3 MiB + 112 bytes
	writeFiles(t, root, map[string]string{"shared.h": "shared\n", "a.c": "a\n", "b.c": "b\n", "big.bin": string(big)})
	in := func(names ...string) []Input {
		var ins []Input
		for _, n := range names {
			ins = append(ins, Input{Local: filepath.Join(root, n), Path: n})
		}
		return ins
	}
	a, err := c.Prepare(Spec{Args: sh("cat a.c shared.h; wc -c < big.bin"), LocalRoot: root, Inputs: in("a.c", "shared.h", "big.bin")})
	if err != nil {
		t.Fatal(err)
	}
	up, err := c.Upload(testCtx(t), a)
	if err != nil {
		t.Fatal(err)
	}
	// a.c, shared.h, big.bin, the root Directory, Command, Action.
	if up.Blobs != 6 || up.Queried != 6 || up.Uploaded != 6 {
		t.Errorf("first upload: %+v", up)
	}
	res, _, err := c.Execute(testCtx(t), a, nil)
	if err != nil {
		t.Fatal(err)
	}
	out, _, err := c.Download(testCtx(t), a, res)
	if err != nil {
		t.Fatal(err)
	}
	if want := "a\nshared\n" + "3145840\n"; string(out.Stdout) != want {
		t.Errorf("stdout %q, want %q", out.Stdout, want)
	}

	b, err := c.Prepare(Spec{Args: sh("cat b.c shared.h"), LocalRoot: root, Inputs: in("b.c", "shared.h")})
	if err != nil {
		t.Fatal(err)
	}
	up, err = c.Upload(testCtx(t), b)
	if err != nil {
		t.Fatal(err)
	}
	// shared.h is known present: only b.c, the root, Command and Action,
	// so few and small that they are sent without asking FindMissingBlobs.
	if up.Blobs != 5 || up.Queried != 0 || up.Uploaded != 4 || up.UploadedBytes >= 1000 {
		t.Errorf("second upload: %+v", up)
	}

	// Another Client (a fresh process) asks about everything but uploads
	// only what is new.
	c2, err := New(testCtx(t), c.Conn(), "", Options{})
	if err != nil {
		t.Fatal(err)
	}
	b2, err := c2.Prepare(Spec{Args: sh("cat b.c shared.h"), LocalRoot: root, Inputs: in("b.c", "shared.h", "big.bin")})
	if err != nil {
		t.Fatal(err)
	}
	up, err = c2.Upload(testCtx(t), b2)
	if err != nil {
		t.Fatal(err)
	}
	if up.Queried != 6 || up.Uploaded != 2 || up.UploadedBytes >= 1000 {
		t.Errorf("fresh client's upload: %+v (want only the new root and Action sent)", up)
	}
}

// TestRunReuploadsWhenTheCASLostInputs: if the Client wrongly believes the
// CAS holds the inputs, the server's FAILED_PRECONDITION makes Run upload
// them and run again.
func TestRunReuploadsWhenTheCASLostInputs(t *testing.T) {
	c, _ := newClient(t)
	root := t.TempDir()
	writeFiles(t, root, map[string]string{"in.txt": "input\n"})
	spec := Spec{Args: sh("cat in.txt"), LocalRoot: root, Inputs: []Input{{Local: filepath.Join(root, "in.txt"), Path: "in.txt"}}}
	a, err := c.Prepare(spec)
	if err != nil {
		t.Fatal(err)
	}
	c.markPresent(slices.Collect(maps.Keys(a.blobs)))
	code, stdout, _, info := runSpec(t, c, spec)
	if code != 0 || stdout != "input\n" || info.Upload.Uploaded == 0 {
		t.Errorf("code %d stdout %q info %+v", code, stdout, info)
	}
}

// TestExecuteReportsTheOperationEarly: started gets the operation name
// while the action still runs (the action waits for a file that started
// creates).
func TestExecuteReportsTheOperationEarly(t *testing.T) {
	c, _ := newClient(t)
	gate := filepath.Join(t.TempDir(), "gate")
	a, err := c.Prepare(Spec{Args: sh("while [ ! -e " + gate + " ]; do sleep 0.01; done; echo through"), LocalRoot: t.TempDir(), NoCache: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Upload(testCtx(t), a); err != nil {
		t.Fatal(err)
	}
	var names []string
	res, info, err := c.Execute(testCtx(t), a, func(name string) {
		names = append(names, name)
		os.WriteFile(gate, nil, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	out, _, err := c.Download(testCtx(t), a, res)
	if err != nil {
		t.Fatal(err)
	}
	if len(names) != 1 || names[0] != info.OperationName || string(out.Stdout) != "through\n" {
		t.Errorf("names %q, info %+v, stdout %q", names, info, out.Stdout)
	}
}

// TestCancelStopsTheAction: Cancel with the name Execute reported ends
// the running action, and Execute returns an error rather than a result.
func TestCancelStopsTheAction(t *testing.T) {
	c, _ := newClient(t)
	a, err := c.Prepare(Spec{Args: sh("sleep 120"), LocalRoot: t.TempDir(), NoCache: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Upload(testCtx(t), a); err != nil {
		t.Fatal(err)
	}
	cancelErr := make(chan error, 1)
	res, _, err := c.Execute(testCtx(t), a, func(name string) {
		go func() { cancelErr <- c.Cancel(testCtx(t), name) }()
	})
	if err == nil {
		t.Fatalf("Execute of a cancelled action returned a result: %v", res)
	}
	var ee *ExecError
	if !errors.As(err, &ee) || ee.Code != codes.Canceled {
		t.Errorf("Execute's error does not say the operation was cancelled: %v", err)
	}
	if err := <-cancelErr; err != nil {
		t.Fatal(err)
	}
}

// TestUploadLargeMessage: a Command larger than a batch (a long argument
// list) is streamed from memory, not looked for as a file.
func TestUploadLargeMessage(t *testing.T) {
	c, _ := newClient(t)
	args := []string{"echo"}
	for i := range 30000 {
		args = append(args, fmt.Sprintf("argument-%06d-%s", i, strings.Repeat("x", 40)))
	}
	a, err := c.Prepare(Spec{Args: args, LocalRoot: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if size := a.Proto().CommandDigest.SizeBytes; size <= 1<<20 {
		t.Fatalf("the Command has %d bytes; the test needs more than 1 MiB", size)
	}
	up, err := c.Upload(testCtx(t), a)
	if err != nil {
		t.Fatal(err)
	}
	missing, err := c.cas.FindMissing(testCtx(t), slices.Collect(maps.Keys(a.blobs)))
	if err != nil || len(missing) != 0 || up.Uploaded != 2 {
		t.Errorf("after Upload (%+v) the CAS lacks %v (%v)", up, missing, err)
	}
}

// TestRunTimeoutReplaysOutput: an action killed by its timeout is an
// ExecError with DEADLINE_EXCEEDED, and what it printed so far is
// replayed (it often says why it hung).
func TestRunTimeoutReplaysOutput(t *testing.T) {
	c, _ := newClient(t)
	var stdout, stderr bytes.Buffer
	_, _, err := c.Run(testCtx(t), Spec{Args: sh("echo started; echo waiting >&2; sleep 60"), LocalRoot: t.TempDir(), Timeout: time.Second}, &stdout, &stderr, nil)
	var ee *ExecError
	if !errors.As(err, &ee) || ee.Code != codes.DeadlineExceeded {
		t.Fatalf("Run of an action past its timeout: %v", err)
	}
	if stdout.String() != "started\n" || stderr.String() != "waiting\n" {
		t.Errorf("stdout %q, stderr %q; want what the action printed before the timeout", stdout.String(), stderr.String())
	}
}

// TestRunWhenCachedOutputsAreGone: an ActionCache result whose output is
// not in the CAS (evicted after the lookup, or a server that does not
// check) does not break Run: it runs the action instead.
func TestRunWhenCachedOutputsAreGone(t *testing.T) {
	c, _ := newClient(t)
	gone := digest.Compute(digest.SHA256, []byte("evicted long ago\n"))
	c.ac = staleCache{c.ac, &repb.ActionResult{OutputFiles: []*repb.OutputFile{{Path: "out.txt", Digest: gone.Proto()}}}}
	root := t.TempDir()
	code, _, _, info := runSpec(t, c, Spec{Args: sh("echo fresh > out.txt"), LocalRoot: root, OutputFiles: []string{"out.txt"}})
	if code != 0 || readFile(t, filepath.Join(root, "out.txt")) != "fresh\n" || info.Exec.OperationName == "" || info.Lookup.Hit {
		t.Errorf("code %d, info %+v", code, info)
	}
}

// staleCache is an ActionCache that answers every lookup with result.
type staleCache struct {
	repb.ActionCacheClient
	result *repb.ActionResult
}

func (s staleCache) GetActionResult(context.Context, *repb.GetActionResultRequest, ...grpc.CallOption) (*repb.ActionResult, error) {
	return s.result, nil
}
