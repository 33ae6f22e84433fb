package execroot

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
)

// sysrootTree is a small sysroot as BuildStream stages one: busybox with
// absolute symlinks to it, a directory reached through an absolute
// symlink, a relative symlink that climbs above the root (harmless in a
// chroot, where "/.." is "/"), and the element's working directory.
func sysrootTree(e env) *repb.Digest {
	tb := e.tb
	empty := tb.dir(&repb.Directory{})
	bin := tb.dir(&repb.Directory{
		Files:    []*repb.FileNode{fnode("busybox", tb.file("#!busybox\n"), true)},
		Symlinks: []*repb.SymlinkNode{snode("sh", "/bin/busybox")},
	})
	element := tb.dir(&repb.Directory{Directories: []*repb.DirectoryNode{dnode("e", empty)}})
	bst := tb.dir(&repb.Directory{Directories: []*repb.DirectoryNode{dnode("p", element)}})
	return tb.dir(&repb.Directory{
		Directories: []*repb.DirectoryNode{dnode("bin", bin), dnode("buildstream", bst), dnode("dev", empty), dnode("proc", empty), dnode("real", empty)},
		Symlinks:    []*repb.SymlinkNode{snode("up", "../../.."), snode("usrbin", "/bin"), snode("w", "/real")},
	})
}

func TestChrootBuildKeepsAbsoluteSymlinks(t *testing.T) {
	e := newEnv(t)
	root := mustDigest(t, sysrootTree(e))
	cmd := &repb.Command{WorkingDirectory: "buildstream/p/e", OutputDirectories: []string{"out", "../../../buildstream-install"}}
	dir := filepath.Join(t.TempDir(), "root")
	r, err := Build(context.Background(), e.cache, e.cas, fn, root, dir, cmd, Linking{Chroot: true})
	if err != nil {
		t.Fatalf("a sysroot with absolute symlinks for a chroot worker: %v", err)
	}
	defer r.Destroy()
	for link, want := range map[string]string{"bin/sh": "/bin/busybox", "usrbin": "/bin", "up": "../../.."} {
		if got, err := os.Readlink(filepath.Join(dir, link)); err != nil || got != want {
			t.Errorf("%s -> %q, %v; want the symlink as given, -> %q", link, got, err, want)
		}
	}
	// A working directory reached through an absolute symlink resolves
	// inside the input root.
	cmd = &repb.Command{WorkingDirectory: "w/x/..", OutputPaths: []string{"o"}}
	r2, err := Build(context.Background(), e.cache, e.cas, fn, root, filepath.Join(t.TempDir(), "root"), cmd, Linking{Chroot: true})
	if err != nil {
		t.Errorf("working directory through an absolute symlink: %v", err)
	} else {
		r2.Destroy()
	}

	// Anywhere else absolute targets stay refused, naming what allows them.
	_, err = Build(context.Background(), e.cache, e.cas, fn, root, filepath.Join(t.TempDir(), "root"), &repb.Command{}, Linking{})
	var ie *InvalidError
	if !errors.As(err, &ie) || !strings.Contains(ie.Rule, "absolute") || !strings.Contains(ie.Rule, "worker.sandbox.mode chroot") {
		t.Errorf("without chroot: %v, want an InvalidError about absolute symlinks naming worker.sandbox.mode chroot", err)
	}
}

// On the host an absolute symlink of the input tree leads into the host's
// file system: making an output's parent through it must not follow it
// there, nor through a relative one that climbs above the exec root.
func TestChrootOutputParentsNeverFollowSymlinksOutOfTheRoot(t *testing.T) {
	e := newEnv(t)
	bait := t.TempDir() // a host directory an absolute symlink names
	empty := e.tb.dir(&repb.Directory{})
	deep := e.tb.dir(&repb.Directory{Directories: []*repb.DirectoryNode{dnode("b", e.tb.dir(&repb.Directory{Directories: []*repb.DirectoryNode{dnode("c", empty)}}))}})
	root := mustDigest(t, e.tb.dir(&repb.Directory{
		Directories: []*repb.DirectoryNode{dnode("a", deep)},
		Symlinks:    []*repb.SymlinkNode{snode("abs", bait), snode("climb", "a/b/c/../../../..")},
	}))
	// The exec roots are made next to bait: on the host "climb/.." is
	// the directory holding both.
	for _, out := range []string{"abs/made/o", "climb/../" + filepath.Base(bait) + "/made/o"} {
		dir := filepath.Join(t.TempDir(), "root")
		r, err := Build(context.Background(), e.cache, e.cas, fn, root, dir, &repb.Command{OutputPaths: []string{out}}, Linking{Chroot: true})
		var ie *InvalidError
		if err == nil {
			r.Destroy()
		}
		if !errors.As(err, &ie) || ie.Path != out || !strings.Contains(ie.Rule, "inside the input root") {
			t.Errorf("output %s: %v, want an InvalidError saying its directory cannot be made inside the input root", out, err)
		}
		if _, err := os.Stat(filepath.Join(bait, "made")); err == nil {
			t.Fatalf("output %s: the worker made a directory on the host, in %s", out, bait)
		}
	}
}
