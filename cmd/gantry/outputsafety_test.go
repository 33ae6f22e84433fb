package main

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/protobuf/proto"

	"github.com/gantry-build/gantry/internal/batch"
	"github.com/gantry-build/gantry/internal/client"
	"github.com/gantry-build/gantry/internal/digest"
	"github.com/gantry-build/gantry/internal/job"
	"github.com/gantry-build/gantry/internal/remote"
)

// plantResult stores ar as the ActionCache entry of action ad on the
// server at addr, with blobs in its CAS first: what a tenant who may
// write the shared cache can do.
func plantResult(t *testing.T, addr string, ad *repb.Digest, ar *repb.ActionResult, blobs ...[]byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := client.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	m := make(map[digest.Digest][]byte)
	for _, b := range blobs {
		m[digest.Compute(digest.SHA256, b)] = b
	}
	if err := client.NewCAS(conn, "", digest.SHA256, 4<<20).PutMany(ctx, m); err != nil {
		t.Fatal(err)
	}
	if _, err := repb.NewActionCacheClient(conn).UpdateActionResult(ctx, &repb.UpdateActionResultRequest{
		ActionDigest: ad, ActionResult: ar, DigestFunction: repb.DigestFunction_SHA256,
	}); err != nil {
		t.Fatal(err)
	}
}

// actionOf is the digest of the action spec makes on the server at addr.
func actionOf(t *testing.T, addr string, spec remote.Spec) *repb.Digest {
	t.Helper()
	conn, err := client.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := remote.New(ctx, conn, "", remote.Options{})
	if err != nil {
		t.Fatal(err)
	}
	a, err := c.Prepare(spec)
	if err != nil {
		t.Fatal(err)
	}
	return a.Digest().Proto()
}

// pwnedTree is the Tree of a directory holding the file "pwned", and the
// blobs to store with it.
func pwnedTree(t *testing.T) (*repb.Digest, [][]byte) {
	t.Helper()
	content := []byte("PWNED\n")
	tree, err := proto.MarshalOptions{Deterministic: true}.Marshal(&repb.Tree{Root: &repb.Directory{
		Files: []*repb.FileNode{{Name: "pwned", Digest: digest.Compute(digest.SHA256, content).Proto()}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	return digest.Compute(digest.SHA256, tree).Proto(), [][]byte{tree, content}
}

// emptyDir fails the test if dir holds anything.
func emptyDir(t *testing.T, dir string) {
	t.Helper()
	if entries, err := os.ReadDir(dir); err != nil || len(entries) > 0 {
		t.Errorf("%s holds %v (%v); nothing may be written there", dir, entries, err)
	}
}

// TestRunNeverWritesThroughPlantedSymlinks is the case: a cached
// result of one command makes its output a link to a victim directory
// outside the project; a later command whose output lies below that link
// is refused with an error naming it, and nothing reaches the victim.
func TestRunNeverWritesThroughPlantedSymlinks(t *testing.T) {
	addr := startExecServer(t)
	base := t.TempDir()
	victim := filepath.Join(base, "victim")
	work := filepath.Join(base, "proj", "a", "b")
	for _, d := range []string{victim, work} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Chdir(work)
	spec, err := runSpec(runFlags{outputs: []string{"sub"}}, []string{"true"})
	if err != nil {
		t.Fatal(err)
	}
	plantResult(t, addr, actionOf(t, addr, spec), &repb.ActionResult{
		OutputSymlinks: []*repb.OutputSymlink{{Path: "sub", Target: "../../../victim"}},
	})
	code, _, stderr := gantryRun(t, work, "--server", addr, "--output", "sub", "--", "true")
	if code != 0 {
		t.Fatalf("the planted link: exit %d, %s", code, stderr)
	}
	if got, err := os.Readlink(filepath.Join(work, "sub")); err != nil || got != "../../../victim" {
		t.Fatalf("sub -> %q (%v); want the link the result names, made as a link", got, err)
	}

	// The issue's own first step: a worker reports the link an action
	// made (as a link, not followed), and the client makes it.
	code, _, stderr = gantryRun(t, work, "--server", addr, "--output", "made", "--", "sh", "-c", "ln -s ../../../victim made")
	if got, err := os.Readlink(filepath.Join(work, "made")); code != 0 || err != nil || got != "../../../victim" {
		t.Fatalf("the executed link: exit %d (%s), made -> %q (%v)", code, stderr, got, err)
	}

	for _, out := range []string{"sub/out", "sub/new/out", "made/out"} {
		code, _, stderr = gantryRun(t, work, "--server", addr, "--output", out, "--",
			"sh", "-c", "mkdir -p $(dirname "+out+") && echo PWNED > "+out)
		link := filepath.Join(work, strings.Split(out, "/")[0])
		if code != exitOwnFailure || !strings.Contains(stderr, link+" is a symbolic link (to ../../../victim)") {
			t.Errorf("--output %s: exit %d, stderr %q; want %d and an error naming the link", out, code, stderr, exitOwnFailure)
		}
		emptyDir(t, victim)
	}
}

// ccAction is the action digest GANTRY_CC_VERBOSE's line in stderr names.
func ccAction(t *testing.T, stderr string) *repb.Digest {
	t.Helper()
	m := regexp.MustCompile(`; action ([0-9a-f]{64})/(\d+);`).FindStringSubmatch(stderr)
	if m == nil {
		t.Fatalf("no action digest in %q", stderr)
	}
	size, _ := strconv.ParseInt(m[2], 10, 64)
	return &repb.Digest{Hash: m[1], SizeBytes: size}
}

// TestCCNeverWritesThroughPlantedSymlinks: cached results of a compile
// first make its object a link to a victim directory, then an output
// directory there: the link is replaced by a directory and the result
// lands inside. A link above the object is refused with an error naming
// it. Nothing reaches the victim.
func TestCCNeverWritesThroughPlantedSymlinks(t *testing.T) {
	needCC(t)
	addr := startExecServer(t)
	dir := ccProject(t)
	build := filepath.Join(dir, "build")
	victim := filepath.Join(t.TempDir(), "victim")
	for _, d := range []string{victim, filepath.Join(build, "obj")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("GANTRY_SERVER", addr)
	t.Setenv("GANTRY_CACHE_DIR", t.TempDir())
	t.Setenv("GANTRY_CC_VERBOSE", "true")
	t.Setenv("GANTRY_CC_FALLBACK", "false") // a refused result must not compile locally
	argv := []string{"gcc", "-c", "../src/a.c", "-I../inc", "-o", "obj/a.o"}
	code, _, stderr := gantryCC(t, build, argv...)
	if code != 0 {
		t.Fatalf("first compile: exit %d: %s", code, stderr)
	}
	ad := ccAction(t, stderr)
	obj := filepath.Join(build, "obj", "a.o")

	plantResult(t, addr, ad, &repb.ActionResult{OutputSymlinks: []*repb.OutputSymlink{{Path: "obj/a.o", Target: victim}}})
	if code, _, stderr := gantryCC(t, build, argv...); code != 0 {
		t.Fatalf("the planted link: exit %d: %s", code, stderr)
	}
	if got, err := os.Readlink(obj); err != nil || got != victim {
		t.Fatalf("obj/a.o -> %q (%v); want the link the result names", got, err)
	}

	tree, blobs := pwnedTree(t)
	plantResult(t, addr, ad, &repb.ActionResult{OutputDirectories: []*repb.OutputDirectory{{Path: "obj/a.o", TreeDigest: tree}}}, blobs...)
	if code, _, stderr := gantryCC(t, build, argv...); code != 0 {
		t.Fatalf("the planted directory: exit %d: %s", code, stderr)
	}
	emptyDir(t, victim)
	if fi, err := os.Lstat(filepath.Join(obj, "pwned")); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("obj/a.o/pwned: %v; want the result's file inside the output, the link replaced", err)
	}

	// A link above the output (obj) is the user's or an earlier
	// result's: refused, not followed.
	if err := os.RemoveAll(filepath.Join(build, "obj")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, filepath.Join(build, "obj")); err != nil {
		t.Fatal(err)
	}
	code, _, stderr = gantryCC(t, build, argv...)
	if code != exitOwnFailure || !strings.Contains(stderr, filepath.Join(build, "obj")+" is a symbolic link (to "+victim+")") {
		t.Errorf("a link above the object: exit %d, stderr %q; want %d and an error naming the link", code, stderr, exitOwnFailure)
	}
	emptyDir(t, victim)

	// The dependency file goes where outputs go: not through a link
	// either.
	if err := os.Remove(filepath.Join(build, "obj")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(build, "obj"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, filepath.Join(build, "deps")); err != nil {
		t.Fatal(err)
	}
	code, _, stderr = gantryCC(t, build, append(argv, "-MD", "-MF", "deps/a.d")...)
	if code != exitOwnFailure || !strings.Contains(stderr, "writing the dependency file") || !strings.Contains(stderr, filepath.Join(build, "deps")+" is a symbolic link") {
		t.Errorf("a link above the dependency file: exit %d, stderr %q; want %d and an error naming the link", code, stderr, exitOwnFailure)
	}
	emptyDir(t, victim)
}

// TestBatchNeverWritesThroughPlantedSymlinks: in one batch, a job's
// cached result makes its output a link to a victim directory, and a
// later job's output lies below that link: the later job fails with an
// error naming the link, and neither its output nor the directory batch
// makes for it reaches the victim.
func TestBatchNeverWritesThroughPlantedSymlinks(t *testing.T) {
	server := startExecServer(t)
	dir := t.TempDir()
	victim := filepath.Join(t.TempDir(), "victim")
	if err := os.MkdirAll(victim, 0o755); err != nil {
		t.Fatal(err)
	}
	writeTree(t, dir, map[string]string{"jobs.yaml": `jobs:
  - name: link
    command: [true]
    outputs: [sub]
  - name: write
    command: [sh, -c, "mkdir -p sub/made && echo PWNED > sub/made/out"]
    outputs: [sub/made/out]
    deps: [link]
`})
	jobs, err := batch.ParseFile(filepath.Join(dir, "jobs.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	spec, err := job.CommandSpec(jobs[0])
	if err != nil {
		t.Fatal(err)
	}
	plantResult(t, server, actionOf(t, server, spec), &repb.ActionResult{
		OutputSymlinks: []*repb.OutputSymlink{{Path: "sub", Target: victim}},
	})
	code, stdout, stderr := gantryBatch(t, dir, server, "--json", "--keep-going", "jobs.yaml")
	emptyDir(t, victim)
	s := decodeSummary(t, stdout, stderr)
	if code != 1 || s.Succeeded != 1 || s.Failed != 1 {
		t.Fatalf("exit %d, summary %+v; want the link job to succeed and the write job to fail\n%s", code, s, stderr)
	}
	if got, err := os.Readlink(filepath.Join(dir, "sub")); err != nil || got != victim {
		t.Errorf("sub -> %q (%v); want the link the result names", got, err)
	}
	if f := s.Failures[0]; f.Job != "write" || !strings.Contains(f.Error, filepath.Join(dir, "sub")+" is a symbolic link") {
		t.Errorf("failure %+v; want the write job's, naming the link", f)
	}
}
