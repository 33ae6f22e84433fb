package execroot

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"

	"github.com/gantry-build/gantry/internal/blobstore"
	"github.com/gantry-build/gantry/internal/digest"
	"github.com/gantry-build/gantry/internal/worker/dircache"
	"github.com/gantry-build/gantry/internal/worker/filecache"
)

// bigDir uploads a directory of dirs subdirectories of files files each
// (contents unique to tag) and returns its digest.
func (b treeBuilder) bigDir(tag string, dirs, files int) *repb.Digest {
	b.t.Helper()
	outer := &repb.Directory{}
	for i := range dirs {
		inner := &repb.Directory{}
		for k := range files {
			inner.Files = append(inner.Files, fnode(fmt.Sprintf("f%03d", k), b.file(fmt.Sprintf("%s %d %d\n", tag, i, k)), false))
		}
		outer.Directories = append(outer.Directories, dnode(fmt.Sprintf("d%03d", i), b.dir(inner)))
	}
	return b.dir(outer)
}

func newTrees(t *testing.T, e env) *dircache.Cache {
	t.Helper()
	trees, err := dircache.New(filepath.Join(t.TempDir(), "trees"), e.cache)
	if err != nil {
		t.Fatal(err)
	}
	return trees
}

// linkedPaths are the mount points of r, relative to its directory.
func linkedPaths(r *Root) []string {
	var out []string
	for _, m := range r.Mounts {
		rel, _ := filepath.Rel(r.Dir, m.Dst)
		out = append(out, rel)
	}
	sort.Strings(out)
	return out
}

// Which directories are linked: the topmost big ones that no output
// passes through, ends at or lies in; nothing at all when an output's
// place cannot be known lexically.
func TestLinkableDirectories(t *testing.T) {
	e := newEnv(t)
	big := e.tb.bigDir("x", 4, 5)   // 20 files
	small := e.tb.bigDir("s", 1, 3) // 3 files
	// ext/{tc,sdk} are big, ext itself too; src/gen is big, src is too.
	root := e.tb.dir(&repb.Directory{
		Files: []*repb.FileNode{fnode("top", e.tb.file("top"), false)},
		Directories: []*repb.DirectoryNode{
			dnode("ext", e.tb.dir(&repb.Directory{Directories: []*repb.DirectoryNode{dnode("sdk", e.tb.bigDir("sdk", 4, 5)), dnode("tc", big)}})),
			dnode("small", small),
			dnode("src", e.tb.dir(&repb.Directory{Directories: []*repb.DirectoryNode{dnode("gen", e.tb.bigDir("gen", 2, 10)), dnode("lib", small)}})),
		},
		Symlinks: []*repb.SymlinkNode{snode("tools", "ext/tc")},
	})
	tests := []struct {
		name string
		cmd  *repb.Command
		want string
	}{
		{"no outputs: the topmost big directories", &repb.Command{}, "ext src"},
		{"outputs beside the big trees", &repb.Command{OutputFiles: []string{"out/a.o", "top2"}}, "ext src"},
		{"an output inside one", &repb.Command{OutputFiles: []string{"ext/sdk/new"}}, "ext/tc src"},
		{"an output directory that is a big input", &repb.Command{OutputDirectories: []string{"ext/tc"}}, "ext/sdk src"},
		{"an output directory below a big input", &repb.Command{OutputPaths: []string{"src/gen/d000/x"}}, "ext"},
		{"the working directory inside a big tree", &repb.Command{WorkingDirectory: "ext/tc/d001"}, "ext src"},
		{"an output relative to a working directory", &repb.Command{WorkingDirectory: "src", OutputFiles: []string{"lib/x"}}, "ext src/gen"},
		{"the whole root as output directory", &repb.Command{OutputDirectories: []string{""}}, ""},
		{"the working directory as output directory", &repb.Command{WorkingDirectory: "ext", OutputDirectories: []string{""}}, "src"},
		{"an output through a symlink", &repb.Command{OutputFiles: []string{"tools/x"}}, ""},
		{"an output with ..", &repb.Command{WorkingDirectory: "src", OutputFiles: []string{"../out/x"}}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, err := Build(context.Background(), e.cache, e.cas, fn, mustDigest(t, root), filepath.Join(t.TempDir(), "r"), tc.cmd, Linking{Trees: newTrees(t, e), MinFiles: 20})
			if err != nil {
				t.Fatal(err)
			}
			defer r.Destroy()
			if got := strings.Join(linkedPaths(r), " "); got != tc.want {
				t.Errorf("linked %q, want %q", got, tc.want)
			}
		})
	}
}

// A linked directory is an empty mount point in the exec root and a
// read-only tree in the cache; destroying or recycling the root leaves the
// tree alone, and the next root takes it from the cache.
func TestBuildLinksBigDirectory(t *testing.T) {
	e := newEnv(t)
	trees := newTrees(t, e)
	root := e.tb.dir(&repb.Directory{
		Files:       []*repb.FileNode{fnode("top", e.tb.file("top"), false)},
		Directories: []*repb.DirectoryNode{dnode("big", e.tb.bigDir("b", 10, 10))},
	})
	dir := filepath.Join(t.TempDir(), "r")
	cmd := &repb.Command{WorkingDirectory: "big/d003", OutputFiles: []string{"../../out/x"}}
	// With ".." in an output: file by file, and Recycle keeps big/d*.
	r, err := Build(context.Background(), e.cache, e.cas, fn, mustDigest(t, root), dir, cmd, Linking{Trees: trees, MinFiles: 100})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Mounts) != 0 || r.Files != 101 {
		t.Fatalf("mounts %v, files %d; want none and 101", r.Mounts, r.Files)
	}
	if _, err := r.Recycle(); err != nil {
		t.Fatal(err)
	}
	cmd = &repb.Command{OutputPaths: []string{"out/x"}}
	r, err = Build(context.Background(), e.cache, e.cas, fn, mustDigest(t, root), dir, cmd, Linking{Trees: trees, MinFiles: 100})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Mounts) != 1 || r.Mounts[0].Dst != filepath.Join(dir, "big") || r.Files != 101 || r.LinkedFiles != 100 {
		t.Fatalf("mounts %v, files %d, linked %d; want big linked, 101 files of which 100 linked", r.Mounts, r.Files, r.LinkedFiles)
	}
	// The recycled root's big/d* directories were pruned: the mount
	// point is empty.
	if got := tree(t, dir); got != "d big\nd out\nf top" {
		t.Errorf("exec root:\n%s\nwant an empty mount point big, out and top", got)
	}
	src := r.Mounts[0].Src
	if got := readFile(t, filepath.Join(src, "d003", "f007")); got != "b 3 7\n" {
		t.Errorf("cached tree d003/f007 = %q", got)
	}
	if err := os.WriteFile(filepath.Join(src, "d003", "new"), nil, 0o644); err == nil && os.Geteuid() != 0 {
		t.Error("the cached tree's directories are writable")
	}
	os.Remove(filepath.Join(src, "d003", "new"))
	before := tree(t, src)
	if _, err := r.Recycle(); err != nil {
		t.Fatal(err)
	}
	if got := tree(t, src); got != before {
		t.Fatal("recycling the exec root changed the cached tree")
	}
	r, err = Build(context.Background(), e.cache, e.cas, fn, mustDigest(t, root), dir, cmd, Linking{Trees: trees, MinFiles: 100})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Mounts) != 1 || r.Mounts[0].Src != src {
		t.Fatalf("second root mounts %v, want the cached tree %s again", r.Mounts, src)
	}
	if s := trees.Stats(); s.Builds != 1 || s.Hits != 1 || s.InUse != 1 {
		t.Errorf("tree cache %+v, want one build reused once", s)
	}
	if err := r.Destroy(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("exec root still there: %v", err)
	}
	if got := tree(t, src); got != before {
		t.Error("destroying the exec root changed the cached tree")
	}
	if s := trees.Stats(); s.InUse != 0 || s.Trees != 1 {
		t.Errorf("after Destroy: %+v, want the tree idle and kept", s)
	}
}

// A tree with a blob gone from the CAS fails the Build with a
// MissingError naming it, and leaves no tree and no reference behind.
func TestBuildLinkedMissingBlob(t *testing.T) {
	mem := blobstore.NewMemory(0)
	tb := treeBuilder{t, mem}
	gone := absent("soon gone")
	inner := &repb.Directory{}
	for k := range 30 {
		inner.Files = append(inner.Files, fnode(fmt.Sprintf("f%02d", k), tb.file(fmt.Sprint(k)), false))
	}
	inner.Files = append(inner.Files, fnode("zz", gone, false))
	root := tb.dir(&repb.Directory{Directories: []*repb.DirectoryNode{dnode("big", tb.dir(inner))}})
	ls := &lyingStore{Store: mem, gone: map[digest.Digest]bool{mustDigest(t, gone): true}}
	cache, err := filecache.New(t.TempDir(), 0, ls)
	if err != nil {
		t.Fatal(err)
	}
	trees := newTrees(t, env{cache: cache})
	_, err = Build(context.Background(), cache, ls, fn, mustDigest(t, root), filepath.Join(t.TempDir(), "r"), &repb.Command{}, Linking{Trees: trees, MinFiles: 10})
	var me *MissingError
	if !errors.As(err, &me) || len(me.Digests) != 1 || me.Digests[0] != mustDigest(t, gone) {
		t.Fatalf("err = %v, want a MissingError for the vanished blob", err)
	}
	if s := trees.Stats(); s.Trees != 0 || s.Builds != 1 {
		t.Errorf("tree cache %+v, want the failed tree dropped", s)
	}
	if s := cache.Stats(); s.Referenced != 0 {
		t.Errorf("%d file cache references leaked", s.Referenced)
	}
}

// inOutput: a path lies in an output directory when it or one of its
// parents is one ("/" stands for the root).
func TestInOutput(t *testing.T) {
	through := outputPaths{"a": true, "a/b": true, "a/b/": true, "c": true}
	for p, want := range map[string]bool{"a/b": true, "a/b/c/d": true, "a": false, "a/x": false, "c": false, "c/d": false} {
		if got := through.inOutput(p); got != want {
			t.Errorf("inOutput(%q) = %v, want %v", p, got, want)
		}
	}
	if !(outputPaths{"/": true}).inOutput("any/where") {
		t.Error("the root as output directory holds every path")
	}
}
