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
