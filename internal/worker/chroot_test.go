package worker

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"

	"github.com/gantry-build/gantry/internal/blobstore"
	"github.com/gantry-build/gantry/internal/testutil"
	"github.com/gantry-build/gantry/internal/worker/dircache"
	"github.com/gantry-build/gantry/internal/worker/sandbox"
)

// chrootWorker is linkingWorker in sandbox mode chroot.
func chrootWorker(t *testing.T) (*Worker, *blobstore.Memory, *fakeScheduler, *dircache.Cache) {
	t.Helper()
	requireSandboxTools(t)
	w, store, sched := stageWorker(t)
	workDir := filepath.Dir(w.roots.dir)
	// bwrap runs as the action user and binds from the host's view:
	// every ancestor must be traversable, also under /tmp.
	for d := workDir; d != "/" && d != "."; d = filepath.Dir(d) {
		os.Chmod(d, 0o755)
	}
	cfg := sandbox.Config{Chroot: true, WorkDir: workDir, UID: 61750, GID: 65534}
	sb, err := sandbox.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	w.sb = sb
	w.cfg.Sandbox, w.cfg.SandboxAll, w.cfg.LinkInputDirectories = &cfg, true, true
	trees, err := dircache.New(filepath.Join(workDir, "trees"), w.cache)
	if err != nil {
		t.Fatal(err)
	}
	w.trees = trees
	wrap := newWrapping(w.cfg, true, "")
	w.inputs = newInputFetcher(w.cache, trees, wrap, w.roots)
	w.executor = newExecutor(w.sup, sb, wrap, w.logs, w, nil, nil)
	w.reporter = newReporter(0, wrap.chroot, nil, 0, w.log)
	return w, store, sched, trees
}

// A chroot worker offers the chroot wrapper (not bubblewrap), lays out an
// input tree with absolute symlinks as it is, finds the program inside
// it, binds a big input directory read-only at its place below "/", and
// returns output symlinks with absolute targets.
func TestChrootWorkerRunsSysrootWithLinkedDirectory(t *testing.T) {
	busybox := testutil.StaticBusybox(t)
	w, store, sched, trees := chrootWorker(t)
	if got := w.wrapperNames(); len(got) != 1 || got[0] != ChrootWrapper {
		t.Errorf("a chroot worker offers the wrappers %v, want only %s", got, ChrootWrapper)
	}
	var links []*repb.SymlinkNode
	for _, applet := range []string{"cat", "ln", "sh"} {
		links = append(links, &repb.SymlinkNode{Name: applet, Target: "/bin/busybox"})
	}
	bin := put(t, store, marshal(t, &repb.Directory{Files: []*repb.FileNode{{Name: "busybox", IsExecutable: true, Digest: put(t, store, busybox).Proto()}}, Symlinks: links}))
	bigRoot := bigInputRoot(t, store) // big/, top.txt, tools -> big/d00
	root := put(t, store, marshal(t, &repb.Directory{
		Directories: []*repb.DirectoryNode{{Name: "bin", Digest: bin.Proto()}, {Name: "sys", Digest: bigRoot}},
		Symlinks:    []*repb.SymlinkNode{{Name: "data", Target: "/sys/big/d05"}},
	}))
	script := `set -e
cat /data/f001 ../sys/top.txt
if echo x > /sys/big/d05/new 2>/dev/null; then echo wrote into the bound tree; exit 1; fi
ln -s /bin/busybox out`
	a := treeAssignment(t, store, "chroot", root.Proto(), "sys", []string{"sh", "-c", script}, "out")
	r := runOK(t, w, store, sched, a)
	if got := blob(t, store, r.StdoutDigest); got != "file 5/1\ntop\n" {
		t.Errorf("stdout %q", got)
	}
	if len(r.OutputSymlinks) != 1 || r.OutputSymlinks[0].Target != "/bin/busybox" {
		t.Errorf("output symlinks %v, want out -> /bin/busybox", r.OutputSymlinks)
	}
	if s := trees.Stats(); s.Builds != 1 {
		t.Errorf("tree cache %+v: big was not bound from it", s)
	}
	checkReleased(t, w)
}

// No worker may offer the chroot wrapper by configuring one of that name:
// it would take actions that need their input root as "/" and run them
// on its host's root.
func TestChrootWrapperNameIsReserved(t *testing.T) {
	_, err := New(nil, nil, Config{ID: "w", Cores: 1, WorkDir: t.TempDir(), ProcessWrappers: map[string][]string{ChrootWrapper: {"/usr/sbin/chroot"}}})
	if err == nil || !strings.Contains(err.Error(), "reserved") || !strings.Contains(err.Error(), "worker.sandbox.mode chroot") {
		t.Fatalf("New with a process wrapper named %s: %v, want a refusal", ChrootWrapper, err)
	}
}
