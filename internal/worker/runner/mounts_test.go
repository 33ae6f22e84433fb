package runner

import (
	"os"
	"path/filepath"
	"testing"
)

// hostPath finds what a sandboxed action will see at a path through the
// mounts, following symlinks that lead into a mount and ".." out of one.
func TestHostPathThroughMounts(t *testing.T) {
	base := t.TempDir()
	root, tree := filepath.Join(base, "root"), filepath.Join(base, "cache", "tree")
	for _, d := range []string{filepath.Join(root, "big"), filepath.Join(root, "src"), filepath.Join(tree, "bin")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.Symlink("big/bin", filepath.Join(root, "tools"))       // outside the mount, into it
	os.Symlink("../../src", filepath.Join(tree, "bin", "up")) // inside the mount, out of it
	mounts := []Mount{{Src: tree, Dst: filepath.Join(root, "big")}}
	for in, want := range map[string]string{
		root + "/src":                 root + "/src",
		root + "/big":                 tree,
		root + "/big/bin/gcc":         tree + "/bin/gcc",
		root + "/tools/gcc":           tree + "/bin/gcc",
		root + "/big/bin/../../src":   root + "/src",
		root + "/big/bin/up/x":        root + "/src/x",
		root + "/src/../big/./bin/cc": tree + "/bin/cc",
		"/":                           "/",
	} {
		if got := hostPath(in, mounts); got != want {
			t.Errorf("hostPath(%s) = %s, want %s", in, got, want)
		}
	}
	if got := hostPath("/x/../y", nil); got != "/x/../y" {
		t.Errorf("without mounts the path is used as given, got %s", got)
	}
}

// In chroot mode the exec root is the action's "/": its program and
// working directory are found inside it, an absolute symlink leads to the
// same path inside it and ".." at its top stays there; an input directory
// bound below "/" is found in its own source.
func TestHostPathInChroot(t *testing.T) {
	base := t.TempDir()
	root, tree := filepath.Join(base, "root"), filepath.Join(base, "tree")
	for _, d := range []string{filepath.Join(root, "bin"), filepath.Join(root, "usr", "bin"), filepath.Join(root, "opt"), filepath.Join(tree, "lib")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(root, "bin", "busybox"), []byte("#!/bin/busybox\n"), 0o755)
	os.Symlink("/bin/busybox", filepath.Join(root, "usr", "bin", "sh")) // absolute: inside the root
	os.Symlink("../../../../etc", filepath.Join(root, "usr", "up"))     // climbs above "/": stays at it
	mounts := []Mount{{Src: root, Dst: "/"}, {Src: tree, Dst: "/opt"}}
	for in, want := range map[string]string{
		"/":             root + "/",
		"/usr/bin/sh":   root + "/bin/busybox",
		"/usr/up":       root + "/etc",
		"/../../bin":    root + "/bin",
		"/opt/lib":      tree + "/lib",
		"/usr/../opt/x": tree + "/x",
	} {
		if got := hostPath(in, mounts); got != want {
			t.Errorf("hostPath(%s) = %s, want %s", in, got, want)
		}
	}
	// The program is looked up in the action's PATH inside the root, and
	// passed on as the action names it (busybox picks its applet by it).
	p, err := resolveProgram("sh", "/", []string{"PATH=/usr/bin:/bin"}, mounts)
	if err != nil || p != "/usr/bin/sh" {
		t.Errorf("resolveProgram(sh) = %q, %v; want /usr/bin/sh, found inside the root", p, err)
	}
}
