package worker

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"

	workerpb "github.com/gantry-build/gantry/api/worker/v1"
	"github.com/gantry-build/gantry/internal/blobstore"
	"github.com/gantry-build/gantry/internal/digest"
	"github.com/gantry-build/gantry/internal/worker/dircache"
	"github.com/gantry-build/gantry/internal/worker/execroot"
	"github.com/gantry-build/gantry/internal/worker/sandbox"
)

// requireSandboxTools skips without bubblewrap (and util-linux) on a dev
// machine, but fails under CI=true: CI must run the sandbox tests.
func requireSandboxTools(t *testing.T) {
	t.Helper()
	tools := []string{"bwrap", "prlimit"}
	if os.Geteuid() == 0 {
		tools = append(tools, "setpriv")
	}
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("%s is required under CI=true (install bubblewrap and util-linux): %v", tool, err)
			}
			t.Skipf("%s not installed: %v", tool, err)
		}
	}
}

// linkingWorker is stageWorker running every action in the sandbox, with
// directory linking on.
func linkingWorker(t *testing.T) (*Worker, *blobstore.Memory, *fakeScheduler, *dircache.Cache) {
	t.Helper()
	requireSandboxTools(t)
	w, store, sched := stageWorker(t)
	workDir := filepath.Dir(w.roots.dir)
	// The action user must traverse the work dir's ancestors.
	for d := workDir; d != "/" && d != "."; d = filepath.Dir(d) {
		if strings.HasPrefix(d, "/tmp/") {
			break // a private tmpfs in the sandbox
		}
		os.Chmod(d, 0o755)
	}
	sb, err := sandbox.New(sandbox.Config{WorkDir: workDir, UID: 61740, GID: 65534})
	if err != nil {
		t.Fatal(err)
	}
	w.sb = sb
	w.cfg.Sandbox, w.cfg.SandboxAll, w.cfg.LinkInputDirectories = &sandbox.Config{}, true, true
	trees, err := dircache.New(filepath.Join(workDir, "trees"), w.cache)
	if err != nil {
		t.Fatal(err)
	}
	w.trees = trees
	wrap := newWrapping(w.cfg, true, "")
	w.inputs = newInputFetcher(w.cache, trees, wrap, w.roots)
	w.executor = newExecutor(w.sup, sb, wrap, w.logs, w, nil, nil)
	return w, store, sched, trees
}

// bigInputRoot uploads an input root with big/ (12 directories of 100
// files, more than DefaultLinkMinFiles, and the program big/d00/tool),
// top.txt and the symlink tools -> big/d00, and returns it.
func bigInputRoot(t *testing.T, store blobstore.Store) *repb.Digest {
	t.Helper()
	big := &repb.Directory{}
	for i := range 12 {
		d := &repb.Directory{}
		for k := range 100 {
			d.Files = append(d.Files, &repb.FileNode{Name: fmt.Sprintf("f%03d", k), Digest: put(t, store, fmt.Appendf(nil, "file %d/%d\n", i, k)).Proto()})
		}
		if i == 0 {
			d.Files = append(d.Files, &repb.FileNode{Name: "tool", IsExecutable: true, Digest: put(t, store, []byte("#!/bin/sh\necho tool ran in \"$(pwd)\"\n")).Proto()})
		}
		big.Directories = append(big.Directories, &repb.DirectoryNode{Name: fmt.Sprintf("d%02d", i), Digest: put(t, store, marshal(t, d)).Proto()})
	}
	if 12*100 < execroot.DefaultLinkMinFiles {
		t.Fatal("the big tree is too small to be linked")
	}
	return put(t, store, marshal(t, &repb.Directory{
		Files:       []*repb.FileNode{{Name: "top.txt", Digest: put(t, store, []byte("top\n")).Proto()}},
		Directories: []*repb.DirectoryNode{{Name: "big", Digest: put(t, store, marshal(t, big)).Proto()}},
		Symlinks:    []*repb.SymlinkNode{{Name: "tools", Target: "big/d00"}},
	})).Proto()
}

// treeAssignment is an assignment running args in the input root.
func treeAssignment(t *testing.T, store blobstore.Store, id string, root *repb.Digest, wd string, args []string, outputs ...string) *workerpb.Assignment {
	t.Helper()
	cmd := &repb.Command{Arguments: args, WorkingDirectory: wd, OutputPaths: outputs,
		EnvironmentVariables: []*repb.Command_EnvironmentVariable{{Name: "PATH", Value: "/usr/bin:/bin"}}}
	cmdBytes := marshal(t, cmd)
	actionBytes := marshal(t, &repb.Action{CommandDigest: put(t, store, cmdBytes).Proto(), InputRootDigest: root, DoNotCache: true})
	ad := digest.Compute(digest.SHA256, actionBytes)
	return &workerpb.Assignment{LeaseId: id, TaskId: "task-" + id, ActionDigest: &workerpb.Digest{Hash: ad.Hash, SizeBytes: ad.Size, DigestFunction: int32(digest.SHA256)},
		Action: actionBytes, Command: cmdBytes, Cores: 1, Attempt: 1}
}

func sh(script string) []string { return []string{"/bin/sh", "-c", script} }

// runOK runs a and returns its result, failing unless it exited 0.
func runOK(t *testing.T, w *Worker, store blobstore.Store, sched *fakeScheduler, a *workerpb.Assignment) *repb.ActionResult {
	t.Helper()
	reqs := run(t, w, sched, a)
	if len(reqs) != 1 || reqs[0].StatusCode != 0 {
		t.Fatalf("%s: completions %v", a.LeaseId, reqs)
	}
	r := result(t, reqs[0])
	if r.ExitCode != 0 {
		t.Fatalf("%s: exit %d, stdout %q, stderr %q", a.LeaseId, r.ExitCode, blob(t, store, r.StdoutDigest), blob(t, store, r.StderrDigest))
	}
	return r
}

// An action under bubblewrap sees a big input directory bound read-only
// from the tree cache: it reads the files, ".." from a working directory
// inside it leads back into the exec root (not into the cache), it cannot
// write there, and the next action reuses the cached tree; outputs next
// to the big tree work, and an action writing inside it gets it file by
// file.
func TestSandboxLinksInputDirectories(t *testing.T) {
	w, store, sched, trees := linkingWorker(t)
	root := bigInputRoot(t, store)

	script := `set -e
cat f007 ../d05/f001 ../../top.txt
pwd -P
test ! -w . || { echo writable; exit 1; }
if touch new 2>/dev/null; then echo created a file; exit 1; fi
if echo x > f007 2>/dev/null; then echo overwrote an input; exit 1; fi
if chmod u+w f007 2>/dev/null; then echo chmod an input; exit 1; fi
awk -v m="$(cd ../.. && pwd -P)/big" '$5 == m { split($6, o, ","); print "mounted " o[1] }' /proc/self/mountinfo`
	r := runOK(t, w, store, sched, treeAssignment(t, store, "read", root, "big/d03", sh(script)))
	out := blob(t, store, r.StdoutDigest)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 5 || strings.Join(lines[:3], "\n") != "file 3/7\nfile 5/1\ntop" || lines[4] != "mounted ro" {
		t.Fatalf("stdout %q", out)
	}
	// The physical working directory is inside the exec root: a bind,
	// not a symlink into the cache.
	if pwd := lines[3]; !strings.HasPrefix(pwd, w.roots.dir+"/") || !strings.HasSuffix(pwd, "/big/d03") {
		t.Errorf("pwd -P = %q, want a path in the exec roots under %s", pwd, w.roots.dir)
	}
	if s := trees.Stats(); s.Builds != 1 || s.Trees != 1 || s.InUse != 0 {
		t.Fatalf("tree cache %+v, want big built once and idle", s)
	}
	treeDir := cachedTree(t, trees)
	if n := countFiles(t, treeDir); n != 1201 {
		t.Fatalf("cached tree has %d files after the action, want 1201", n)
	}

	// Outputs next to the big tree; the tree is taken from the cache.
	r = runOK(t, w, store, sched, treeAssignment(t, store, "outputs", root, "", sh("cat big/d11/f099 > out/copy && mkdir -p gen && echo g > gen/x"), "out/copy", "gen"))
	if len(r.OutputFiles) != 1 || blob(t, store, r.OutputFiles[0].Digest) != "file 11/99\n" || len(r.OutputDirectories) != 1 {
		t.Errorf("outputs %v %v", r.OutputFiles, r.OutputDirectories)
	}
	if s := trees.Stats(); s.Builds != 1 || s.Hits != 1 {
		t.Errorf("tree cache %+v, want the second action to reuse the tree", s)
	}

	// The program itself may be in the linked tree, also reached through
	// ".." out of it and a symlink back in: the worker finds it in the
	// cache, the sandbox runs it at its place in the exec root.
	r = runOK(t, w, store, sched, treeAssignment(t, store, "tool", root, "big/d01", []string{"../../tools/tool"}))
	if got := blob(t, store, r.StdoutDigest); !strings.HasPrefix(got, "tool ran in "+w.roots.dir+"/") || !strings.HasSuffix(got, "/big/d01\n") {
		t.Errorf("tool: stdout %q", got)
	}

	// An output inside big: big is laid out file by file (its
	// directories are too small to be linked on their own).
	r = runOK(t, w, store, sched, treeAssignment(t, store, "inside", root, "", sh("cat big/d00/f000 > big/d01/new"), "big/d01/new"))
	if len(r.OutputFiles) != 1 || blob(t, store, r.OutputFiles[0].Digest) != "file 0/0\n" {
		t.Errorf("outputs %v", r.OutputFiles)
	}
	if s := trees.Stats(); s.Builds != 1 || s.Hits != 2 {
		t.Errorf("tree cache %+v: a tree was used for an action writing inside it", s)
	}
	if n := countFiles(t, treeDir); n != 1201 {
		t.Errorf("cached tree has %d files, want 1201", n)
	}
	checkReleased(t, w)
}

// cachedTree is the one tree in the cache's directory.
func cachedTree(t *testing.T, trees *dircache.Cache) string {
	t.Helper()
	ents, err := os.ReadDir(trees.Dir())
	if err != nil || len(ents) != 1 {
		t.Fatalf("tree cache holds %v (%v), want one tree", ents, err)
	}
	return filepath.Join(trees.Dir(), ents[0].Name())
}

func countFiles(t *testing.T, dir string) int {
	t.Helper()
	n := 0
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			n++
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}
