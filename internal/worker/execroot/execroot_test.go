package execroot

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/protobuf/proto"

	"github.com/gantry-build/gantry/internal/blobstore"
	"github.com/gantry-build/gantry/internal/digest"
	"github.com/gantry-build/gantry/internal/inputtree"
	"github.com/gantry-build/gantry/internal/worker/filecache"
)

const fn = digest.SHA256

// treeBuilder uploads files and Directory messages to a CAS.
type treeBuilder struct {
	t   testing.TB
	cas blobstore.Store
}

func (b treeBuilder) blob(data []byte) *repb.Digest {
	b.t.Helper()
	d := digest.Compute(fn, data)
	if err := blobstore.Put(context.Background(), b.cas, d, data); err != nil {
		b.t.Fatal(err)
	}
	return d.Proto()
}

func (b treeBuilder) file(content string) *repb.Digest { return b.blob([]byte(content)) }

func (b treeBuilder) dir(msg *repb.Directory) *repb.Digest {
	b.t.Helper()
	data, err := proto.MarshalOptions{Deterministic: true}.Marshal(msg)
	if err != nil {
		b.t.Fatal(err)
	}
	return b.blob(data)
}

// absent returns the digest of content without uploading it.
func absent(content string) *repb.Digest { return digest.Compute(fn, []byte(content)).Proto() }

func dirDigest(msg *repb.Directory) *repb.Digest {
	data, _ := proto.MarshalOptions{Deterministic: true}.Marshal(msg)
	return digest.Compute(fn, data).Proto()
}

func fnode(name string, d *repb.Digest, exec bool) *repb.FileNode {
	return &repb.FileNode{Name: name, Digest: d, IsExecutable: exec}
}

func dnode(name string, d *repb.Digest) *repb.DirectoryNode {
	return &repb.DirectoryNode{Name: name, Digest: d}
}

func snode(name, target string) *repb.SymlinkNode {
	return &repb.SymlinkNode{Name: name, Target: target}
}

func mustDigest(t *testing.T, d *repb.Digest) digest.Digest {
	t.Helper()
	dd, err := digest.FromProto(fn, d)
	if err != nil {
		t.Fatal(err)
	}
	return dd
}

type env struct {
	cas   *blobstore.Memory
	cache *filecache.Cache
	tb    treeBuilder
}

func newEnv(t *testing.T) env {
	t.Helper()
	cas := blobstore.NewMemory(0)
	cache, err := filecache.New(t.TempDir(), 0, cas)
	if err != nil {
		t.Fatal(err)
	}
	return env{cas: cas, cache: cache, tb: treeBuilder{t, cas}}
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestBuildMaterializesTree(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	deep := e.tb.dir(&repb.Directory{Files: []*repb.FileNode{fnode("c", e.tb.file("deep"), false)}})
	sub := e.tb.dir(&repb.Directory{
		Files:       []*repb.FileNode{fnode("b", e.tb.file("hello"), false)},
		Directories: []*repb.DirectoryNode{dnode("deep", deep)},
		Symlinks:    []*repb.SymlinkNode{snode("up", "../a.txt")},
	})
	root := e.tb.dir(&repb.Directory{
		Files: []*repb.FileNode{
			fnode("a.txt", e.tb.file("hello"), false),
			fnode("empty", digest.Empty(fn).Proto(), false),
			fnode("run.sh", e.tb.file("#!/bin/sh\necho hi\n"), true),
		},
		Directories: []*repb.DirectoryNode{dnode("sub", sub), dnode("sub2", sub)},
		Symlinks:    []*repb.SymlinkNode{snode("dirlink", "sub"), snode("link", "sub/b")},
	})
	cmd := &repb.Command{
		WorkingDirectory:  "sub",
		OutputFiles:       []string{"out/x/y.o", "top.o"},
		OutputDirectories: []string{"gen/d", "deep/new"},
	}
	dir := filepath.Join(t.TempDir(), "exec", "1")
	r, err := Build(ctx, e.cache, e.cas, fn, mustDigest(t, root), dir, cmd, Linking{})
	if err != nil {
		t.Fatal(err)
	}

	if r.Dir != dir || r.WorkDir != filepath.Join(dir, "sub") {
		t.Errorf("Dir, WorkDir = %s, %s", r.Dir, r.WorkDir)
	}
	if r.Files != 7 || r.Directories != 4 || r.Symlinks != 4 {
		t.Errorf("counts files=%d dirs=%d symlinks=%d, want 7, 4, 4", r.Files, r.Directories, r.Symlinks)
	}
	// hello twice in each of sub and sub2 and at the top, deep twice, the
	// script once: sizes as placed, shared subdirectories in each place.
	if want := int64(3*len("hello") + 2*len("deep") + len("#!/bin/sh\necho hi\n")); r.FileBytes != want {
		t.Errorf("FileBytes = %d, want %d", r.FileBytes, want)
	}
	files := []struct {
		path, content string
		mode          os.FileMode
	}{
		{"a.txt", "hello", 0o444},
		{"empty", "", 0o444},
		{"run.sh", "#!/bin/sh\necho hi\n", 0o555},
		{"sub/b", "hello", 0o444},
		{"sub/deep/c", "deep", 0o444},
		{"sub2/deep/c", "deep", 0o444},
		{"link", "hello", 0o444},       // through the symlink
		{"dirlink/up", "hello", 0o444}, // through two symlinks
	}
	for _, f := range files {
		p := filepath.Join(dir, f.path)
		if got := readFile(t, p); got != f.content {
			t.Errorf("%s = %q, want %q", f.path, got, f.content)
		}
		info, _ := os.Stat(p)
		if info.Mode().Perm() != f.mode {
			t.Errorf("%s mode = %v, want %v", f.path, info.Mode().Perm(), f.mode)
		}
	}
	for p, want := range map[string]string{"link": "sub/b", "dirlink": "sub", "sub/up": "../a.txt", "sub2/up": "../a.txt"} {
		if got, err := os.Readlink(filepath.Join(dir, p)); err != nil || got != want {
			t.Errorf("readlink %s = %q, %v; want %q", p, got, err, want)
		}
	}
	// Identical blobs share the cache's inode.
	a, _ := os.Stat(filepath.Join(dir, "a.txt"))
	b, _ := os.Stat(filepath.Join(dir, "sub2/b"))
	if !os.SameFile(a, b) {
		t.Error("a.txt and sub2/b are not hardlinks of one cached file")
	}
	// Output parents exist; output directories themselves do not.
	for p, want := range map[string]bool{
		"sub/out/x": true, "sub/gen": true, "sub/gen/d": false, "sub/deep/new": false, "sub/out/x/y.o": false, "sub/top.o": false,
	} {
		info, err := os.Stat(filepath.Join(dir, p))
		if got := err == nil && info.IsDir(); got != want {
			t.Errorf("directory %s exists = %v, want %v", p, got, want)
		}
	}
	if s := e.cache.Stats(); s.Referenced != 4 {
		t.Errorf("cache references = %d, want 4 (hello, deep, script, empty)", s.Referenced)
	}

	if err := r.Destroy(); err != nil {
		t.Fatal(err)
	}
	if err := r.Destroy(); err != nil {
		t.Errorf("second Destroy: %v", err)
	}
	if _, err := os.Lstat(dir); !os.IsNotExist(err) {
		t.Errorf("root still exists after Destroy: %v", err)
	}
	if s := e.cache.Stats(); s.Referenced != 0 || s.Entries != 4 {
		t.Errorf("after Destroy stats = %+v, want 4 unreferenced entries", s)
	}
}

func TestBuildOutputPathsAndEmptyRoot(t *testing.T) {
	e := newEnv(t)
	tests := []struct {
		name     string
		cmd      *repb.Command
		wantDirs []string
		noDirs   []string
	}{
		{
			name:     "output_paths supersede legacy fields",
			cmd:      &repb.Command{OutputPaths: []string{"bin/tool", "gen"}, OutputFiles: []string{"/ignored"}},
			wantDirs: []string{"bin"},
			noDirs:   []string{"gen", "bin/tool", "ignored"},
		},
		{
			name:     "output directory of the whole working directory",
			cmd:      &repb.Command{OutputDirectories: []string{""}},
			wantDirs: []string{"."},
		},
		{
			name:     "dot dot inside the root",
			cmd:      &repb.Command{OutputPaths: []string{"a/../b/c"}},
			wantDirs: []string{"a", "b"},
		},
		{
			name:     "deep legacy output file",
			cmd:      &repb.Command{OutputFiles: []string{"x/y/z/f"}},
			wantDirs: []string{"x/y/z"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir() // exists and is empty: allowed
			r, err := Build(context.Background(), e.cache, e.cas, fn, digest.Empty(fn), dir, tt.cmd, Linking{})
			if err != nil {
				t.Fatal(err)
			}
			defer r.Destroy()
			for _, p := range tt.wantDirs {
				if info, err := os.Stat(filepath.Join(dir, p)); err != nil || !info.IsDir() {
					t.Errorf("%s is not a directory: %v", p, err)
				}
			}
			for _, p := range tt.noDirs {
				if _, err := os.Lstat(filepath.Join(dir, p)); err == nil {
					t.Errorf("%s exists", p)
				}
			}
		})
	}
}

func TestBuildRejectsNonEmptyDir(t *testing.T) {
	e := newEnv(t)
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "leftover"), nil, 0o644)
	_, err := Build(context.Background(), e.cache, e.cas, fn, digest.Empty(fn), dir, &repb.Command{}, Linking{})
	if err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Fatalf("got %v, want a 'not empty' error", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "leftover")); err != nil {
		t.Error("Build removed a file it did not create")
	}
}

func TestBuildInvalid(t *testing.T) {
	e := newEnv(t)
	tb := e.tb
	hello := tb.file("hello")
	empty := &repb.Directory{}
	emptyD := tb.dir(empty)
	subFile := tb.dir(&repb.Directory{Files: []*repb.FileNode{fnode("f", hello, false)}})
	// A directory whose symlink is fine at depth 2 but escapes at depth 1.
	shared := tb.dir(&repb.Directory{Symlinks: []*repb.SymlinkNode{snode("up", "../..")}})
	sharedHolder := tb.dir(&repb.Directory{Directories: []*repb.DirectoryNode{dnode("S", shared)}})
	garbage := tb.blob([]byte("\xff\xff\xff not a proto"))
	dlink := tb.dir(&repb.Directory{Symlinks: []*repb.SymlinkNode{snode("l", "..")}})

	tests := []struct {
		name     string
		root     *repb.Directory
		rootD    *repb.Digest // used instead of root when set
		cmd      *repb.Command
		wantPath string
		wantRule string
	}{
		{name: "slash in name", root: &repb.Directory{Files: []*repb.FileNode{fnode("a/b", hello, false)}}, wantPath: "a/b", wantRule: "contains '/'"},
		{name: "dot name", root: &repb.Directory{Directories: []*repb.DirectoryNode{dnode(".", emptyD)}}, wantPath: ".", wantRule: "not allowed"},
		{name: "dot dot name", root: &repb.Directory{Symlinks: []*repb.SymlinkNode{snode("..", "x")}}, wantPath: "..", wantRule: "not allowed"},
		{name: "empty name", root: &repb.Directory{Files: []*repb.FileNode{fnode("", hello, false)}}, wantPath: "", wantRule: "empty name"},
		{name: "nested bad name", root: &repb.Directory{Directories: []*repb.DirectoryNode{dnode("d", tb.dir(&repb.Directory{Files: []*repb.FileNode{fnode("x/y", hello, false)}}))}}, wantPath: "d/x/y", wantRule: "contains '/'"},
		{name: "duplicate files", root: &repb.Directory{Files: []*repb.FileNode{fnode("a", hello, false), fnode("a", hello, true)}}, wantPath: "a", wantRule: "appears twice"},
		{name: "unsorted files", root: &repb.Directory{Files: []*repb.FileNode{fnode("b", hello, false), fnode("a", hello, false)}}, wantPath: "a", wantRule: "not sorted"},
		{name: "unsorted directories", root: &repb.Directory{Directories: []*repb.DirectoryNode{dnode("z", emptyD), dnode("y", emptyD)}}, wantPath: "y", wantRule: "not sorted"},
		{name: "unsorted symlinks", root: &repb.Directory{Symlinks: []*repb.SymlinkNode{snode("b", "x"), snode("B", "x")}}, wantPath: "B", wantRule: "not sorted"},
		{name: "file and directory share a name", root: &repb.Directory{Files: []*repb.FileNode{fnode("x", hello, false)}, Directories: []*repb.DirectoryNode{dnode("x", emptyD)}}, wantPath: "x", wantRule: "more than one"},
		{name: "directory and symlink share a name", root: &repb.Directory{Directories: []*repb.DirectoryNode{dnode("x", emptyD)}, Symlinks: []*repb.SymlinkNode{snode("x", "y")}}, wantPath: "x", wantRule: "more than one"},
		{name: "bad file digest", root: &repb.Directory{Files: []*repb.FileNode{fnode("f", &repb.Digest{Hash: "abc", SizeBytes: 3}, false)}}, wantPath: "f", wantRule: "file digest"},
		{name: "missing file digest", root: &repb.Directory{Files: []*repb.FileNode{fnode("f", nil, false)}}, wantPath: "f", wantRule: "digest is missing"},
		{name: "bad directory digest", root: &repb.Directory{Directories: []*repb.DirectoryNode{dnode("d", &repb.Digest{Hash: strings.Repeat("A", 64)})}}, wantPath: "d", wantRule: "directory digest"},
		{name: "not a Directory message", rootD: garbage, wantPath: "", wantRule: "not a valid Directory"},
		{name: "absolute symlink", root: &repb.Directory{Symlinks: []*repb.SymlinkNode{snode("l", "/etc/passwd")}}, wantPath: "l", wantRule: "absolute"},
		{name: "empty symlink target", root: &repb.Directory{Symlinks: []*repb.SymlinkNode{snode("l", "")}}, wantPath: "l", wantRule: "empty target"},
		{name: "symlink to parent of root", root: &repb.Directory{Symlinks: []*repb.SymlinkNode{snode("l", "..")}}, wantPath: "l", wantRule: "outside the input root"},
		{name: "nested symlink with too many dot dots", root: &repb.Directory{Directories: []*repb.DirectoryNode{dnode("d", tb.dir(&repb.Directory{Symlinks: []*repb.SymlinkNode{snode("x", "../../etc")}}))}}, wantPath: "d/x", wantRule: "outside the input root"},
		{name: "symlink chain escapes", root: &repb.Directory{Directories: []*repb.DirectoryNode{dnode("d", dlink)}, Symlinks: []*repb.SymlinkNode{snode("x", "d/l/..")}}, wantPath: "x", wantRule: "outside the input root"},
		{name: "symlink through a missing name escapes", root: &repb.Directory{Symlinks: []*repb.SymlinkNode{snode("x", "nope/../../y")}}, wantPath: "x", wantRule: "outside the input root"},
		{name: "shared directory escapes at one place", root: &repb.Directory{Directories: []*repb.DirectoryNode{dnode("S", shared), dnode("a", sharedHolder)}}, wantPath: "S/up", wantRule: "outside the input root"},
		{name: "absolute working directory", root: empty, cmd: &repb.Command{WorkingDirectory: "/tmp"}, wantPath: "/tmp", wantRule: "absolute"},
		{name: "working directory escapes", root: empty, cmd: &repb.Command{WorkingDirectory: ".."}, wantPath: "..", wantRule: "outside the input root"},
		{name: "working directory missing", root: empty, cmd: &repb.Command{WorkingDirectory: "nope"}, wantPath: "nope", wantRule: "not a directory of the input tree"},
		{name: "working directory is a file", root: &repb.Directory{Files: []*repb.FileNode{fnode("f", hello, false)}}, cmd: &repb.Command{WorkingDirectory: "f"}, wantPath: "f", wantRule: "not a directory"},
		{name: "working directory trailing slash", root: empty, cmd: &repb.Command{WorkingDirectory: "a/"}, wantPath: "a/", wantRule: "trailing slash"},
		{name: "absolute output file", root: empty, cmd: &repb.Command{OutputFiles: []string{"/out"}}, wantPath: "/out", wantRule: "absolute"},
		{name: "empty output file", root: empty, cmd: &repb.Command{OutputFiles: []string{""}}, wantPath: "", wantRule: "empty"},
		{name: "output directory trailing slash", root: empty, cmd: &repb.Command{OutputDirectories: []string{"out/"}}, wantPath: "out/", wantRule: "trailing slash"},
		{name: "output path double slash", root: empty, cmd: &repb.Command{OutputPaths: []string{"a//b"}}, wantPath: "a//b", wantRule: "empty segment"},
		{name: "output path ending in dot dot escapes", root: empty, cmd: &repb.Command{OutputPaths: []string{"a/../.."}}, wantPath: "a/../..", wantRule: "outside the input root"},
		{name: "output file ending in dot", root: empty, cmd: &repb.Command{OutputFiles: []string{"."}}, wantPath: ".", wantRule: `ends in "."`},
		{name: "output directory ending in dot dot escapes through a symlink", root: &repb.Directory{Symlinks: []*repb.SymlinkNode{snode("l", ".")}}, cmd: &repb.Command{OutputDirectories: []string{"l/.."}}, wantPath: "l/..", wantRule: "outside the input root"},
		{name: "output escapes", root: empty, cmd: &repb.Command{OutputPaths: []string{"../../x"}}, wantPath: "../../x", wantRule: "outside the input root"},
		{name: "output escapes from working directory", root: &repb.Directory{Directories: []*repb.DirectoryNode{dnode("w", emptyD)}}, cmd: &repb.Command{WorkingDirectory: "w", OutputFiles: []string{"../../x"}}, wantPath: "../../x", wantRule: "outside the input root"},
		{name: "output escapes physically through a symlink", root: &repb.Directory{Symlinks: []*repb.SymlinkNode{snode("l", ".")}}, cmd: &repb.Command{OutputPaths: []string{"l/../x"}}, wantPath: "l/../x", wantRule: "outside the input root"},
		{name: "output under an input file", root: &repb.Directory{Directories: []*repb.DirectoryNode{dnode("d", subFile)}}, cmd: &repb.Command{OutputFiles: []string{"d/f/out"}}, wantPath: "d/f/out", wantRule: "input file"},
		{name: "duplicate output paths", root: empty, cmd: &repb.Command{OutputPaths: []string{"a", "a"}}, wantPath: "a", wantRule: "twice"},
		{name: "duplicate output files", root: empty, cmd: &repb.Command{OutputFiles: []string{"a", "a"}}, wantPath: "a", wantRule: "twice"},
		{name: "output file is also a directory", root: empty, cmd: &repb.Command{OutputFiles: []string{"a"}, OutputDirectories: []string{"a"}}, wantPath: "a", wantRule: "both"},
		{name: "output file contains an output", root: empty, cmd: &repb.Command{OutputFiles: []string{"a", "a/b"}}, wantPath: "a", wantRule: "parent of output"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rootD := tt.rootD
			if rootD == nil {
				rootD = tb.dir(tt.root)
			}
			cmd := tt.cmd
			if cmd == nil {
				cmd = &repb.Command{}
			}
			dir := filepath.Join(t.TempDir(), "root")
			r, err := Build(context.Background(), e.cache, e.cas, fn, mustDigest(t, rootD), dir, cmd, Linking{})
			if err == nil {
				r.Destroy()
				t.Fatal("Build succeeded, want an InvalidError")
			}
			var ie *InvalidError
			if !errors.As(err, &ie) {
				t.Fatalf("got %T %v, want *InvalidError", err, err)
			}
			if ie.Path != tt.wantPath || !strings.Contains(ie.Rule, tt.wantRule) {
				t.Errorf("got path %q rule %q, want path %q and a rule containing %q", ie.Path, ie.Rule, tt.wantPath, tt.wantRule)
			}
			if !strings.Contains(err.Error(), tt.wantRule) {
				t.Errorf("message %q lacks the rule", err)
			}
			if _, err := os.Lstat(dir); !os.IsNotExist(err) {
				t.Errorf("Build left %s behind", dir)
			}
		})
	}
	if s := e.cache.Stats(); s.Referenced != 0 {
		t.Errorf("%d cache references leaked", s.Referenced)
	}
}

// TestBuildRefusesWithExecutesMessage: the worker refuses an output that
// leaves the input root with the words Execute uses (one rule,
// inputtree.OutputLocation), and accepts the outputs Execute accepts:
// "." and a path climbing out of the working directory, whose parents
// it creates.
func TestBuildRefusesWithExecutesMessage(t *testing.T) {
	e := newEnv(t)
	c := e.tb.dir(&repb.Directory{})
	root := e.tb.dir(&repb.Directory{Directories: []*repb.DirectoryNode{dnode("a", e.tb.dir(&repb.Directory{Directories: []*repb.DirectoryNode{dnode("c", c)}}))}})
	bad := &repb.Command{WorkingDirectory: "a/c", OutputDirectories: []string{"../../../x"}}
	_, err := Build(context.Background(), e.cache, e.cas, fn, mustDigest(t, root), filepath.Join(t.TempDir(), "root"), bad, Linking{})
	_, want := inputtree.OutputLocation(inputtree.OutputDirectories, bad.WorkingDirectory, bad.OutputDirectories[0])
	var ie *InvalidError
	if want == nil || !errors.As(err, &ie) || ie.Rule != want.Error() {
		t.Errorf("Build: %v; want an InvalidError saying %v", err, want)
	}
	dir := filepath.Join(t.TempDir(), "root")
	good := &repb.Command{WorkingDirectory: "a/c", OutputDirectories: []string{".", "../../install/bin"}}
	r, err := Build(context.Background(), e.cache, e.cas, fn, mustDigest(t, root), dir, good, Linking{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Destroy()
	if info, err := os.Stat(filepath.Join(dir, "install")); err != nil || !info.IsDir() {
		t.Errorf("the parent of ../../install/bin was not created: %v", err)
	}
}

func TestBuildAcceptsInsideSymlinks(t *testing.T) {
	e := newEnv(t)
	tb := e.tb
	hello := tb.file("hello")
	inner := tb.dir(&repb.Directory{
		Files:    []*repb.FileNode{fnode("f", hello, false)},
		Symlinks: []*repb.SymlinkNode{snode("loop1", "loop2"), snode("loop2", "loop1"), snode("toroot", "../.."), snode("up", "..")},
	})
	mid := tb.dir(&repb.Directory{Directories: []*repb.DirectoryNode{dnode("in", inner)}})
	root := tb.dir(&repb.Directory{
		Directories: []*repb.DirectoryNode{dnode("m", mid)},
		Symlinks: []*repb.SymlinkNode{
			snode("a", "m/in/up/in/f"),
			snode("dangling", "nothing/here"),
			snode("dot", "."),
			snode("into", "m/in/toroot/m"),
		},
	})
	dir := filepath.Join(t.TempDir(), "root")
	r, err := Build(context.Background(), e.cache, e.cas, fn, mustDigest(t, root), dir, &repb.Command{WorkingDirectory: "into/in", OutputPaths: []string{"out/o"}}, Linking{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Destroy()
	if got := readFile(t, filepath.Join(dir, "a")); got != "hello" {
		t.Errorf("a = %q", got)
	}
	if info, err := os.Stat(filepath.Join(dir, "m/in/out")); err != nil || !info.IsDir() {
		t.Errorf("output parent under a symlinked working directory: %v", err)
	}
}

func TestBuildMissingBlobs(t *testing.T) {
	e := newEnv(t)
	tb := e.tb
	missingFile1 := absent("not uploaded 1")
	missingFile2 := absent("not uploaded 2")
	missingDirMsg := &repb.Directory{Files: []*repb.FileNode{fnode("x", tb.file("x"), false)}}
	missingDir := dirDigest(missingDirMsg)
	sub2 := tb.dir(&repb.Directory{Files: []*repb.FileNode{
		fnode("f2", missingFile2, false),
		fnode("f2dup", missingFile2, true),
		fnode("present", tb.file("present"), false),
	}})
	root := tb.dir(&repb.Directory{
		Files:       []*repb.FileNode{fnode("f1", missingFile1, false)},
		Directories: []*repb.DirectoryNode{dnode("sub", missingDir), dnode("sub2", sub2)},
	})
	dir := filepath.Join(t.TempDir(), "root")
	_, err := Build(context.Background(), e.cache, e.cas, fn, mustDigest(t, root), dir, &repb.Command{}, Linking{})
	var me *MissingError
	if !errors.As(err, &me) {
		t.Fatalf("got %v, want *MissingError", err)
	}
	want := []digest.Digest{mustDigest(t, missingFile1), mustDigest(t, missingFile2), mustDigest(t, missingDir)}
	if !sameSet(me.Digests, want) {
		t.Errorf("missing = %v, want %v", me.Digests, want)
	}
	if !strings.Contains(err.Error(), "3 input blob(s) missing") || !strings.Contains(err.Error(), "upload") {
		t.Errorf("message %q", err)
	}
	if _, err := os.Lstat(dir); !os.IsNotExist(err) {
		t.Error("Build created the directory despite missing inputs")
	}

	// The root Directory itself missing.
	_, err = Build(context.Background(), e.cache, e.cas, fn, mustDigest(t, missingDir), dir, &repb.Command{}, Linking{})
	if !errors.As(err, &me) || len(me.Digests) != 1 || me.Digests[0] != mustDigest(t, missingDir) {
		t.Errorf("missing root: got %v", err)
	}
}

func sameSet(a, b []digest.Digest) bool {
	key := func(d digest.Digest) string { return d.String() }
	x, y := make([]string, len(a)), make([]string, len(b))
	for i := range a {
		x[i] = key(a[i])
	}
	for i := range b {
		y[i] = key(b[i])
	}
	slices.Sort(x)
	slices.Sort(y)
	return slices.Equal(x, y)
}

// lyingStore claims to hold every blob but cannot open the ones in gone.
type lyingStore struct {
	blobstore.Store
	gone map[digest.Digest]bool
}

func (s *lyingStore) FindMissing(context.Context, []digest.Digest) ([]digest.Digest, error) {
	return nil, nil
}

func (s *lyingStore) Open(ctx context.Context, d digest.Digest, off int64) (io.ReadCloser, error) {
	if s.gone[d] {
		return nil, blobstore.ErrNotFound
	}
	return s.Store.Open(ctx, d, off)
}

func TestBuildBlobVanishesAfterFindMissing(t *testing.T) {
	mem := blobstore.NewMemory(0)
	tb := treeBuilder{t, mem}
	g1, g2 := absent("gone 1"), absent("gone 2")
	var files []*repb.FileNode
	for i := range 50 {
		files = append(files, fnode(fmt.Sprintf("f%02d", i), tb.file(fmt.Sprint("present ", i)), i%3 == 0))
	}
	files = append(files, fnode("g1", g1, false), fnode("g2", g2, false))
	root := tb.dir(&repb.Directory{Files: files})
	ls := &lyingStore{Store: mem, gone: map[digest.Digest]bool{mustDigest(t, g1): true, mustDigest(t, g2): true}}
	cache, err := filecache.New(t.TempDir(), 0, ls)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "root")
	_, err = Build(context.Background(), cache, ls, fn, mustDigest(t, root), dir, &repb.Command{}, Linking{})
	var me *MissingError
	if !errors.As(err, &me) || !sameSet(me.Digests, []digest.Digest{mustDigest(t, g1), mustDigest(t, g2)}) {
		t.Fatalf("got %v, want a MissingError for both vanished blobs", err)
	}
	if _, err := os.Lstat(dir); !os.IsNotExist(err) {
		t.Error("a failed Build left its directory behind")
	}
	if s := cache.Stats(); s.Referenced != 0 {
		t.Errorf("%d cache references leaked", s.Referenced)
	}
}

func TestBuildCancelled(t *testing.T) {
	e := newEnv(t)
	root := e.tb.dir(&repb.Directory{Files: []*repb.FileNode{fnode("f", e.tb.file("x"), false)}})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	dir := filepath.Join(t.TempDir(), "root")
	if _, err := Build(ctx, e.cache, e.cas, fn, mustDigest(t, root), dir, &repb.Command{}, Linking{}); err == nil {
		t.Fatal("Build with a cancelled context succeeded")
	}
	if _, err := os.Lstat(dir); !os.IsNotExist(err) {
		t.Error("a cancelled Build left its directory behind")
	}
}

func TestDestroyReadOnlyDirectories(t *testing.T) {
	e := newEnv(t)
	hello := e.tb.file("hello")
	root := e.tb.dir(&repb.Directory{Files: []*repb.FileNode{fnode("in", hello, false)}})
	dir := filepath.Join(t.TempDir(), "root")
	r, err := Build(context.Background(), e.cache, e.cas, fn, mustDigest(t, root), dir, &repb.Command{}, Linking{})
	if err != nil {
		t.Fatal(err)
	}
	// What an action might leave behind.
	ro := filepath.Join(dir, "ro", "deeper")
	os.MkdirAll(ro, 0o755)
	os.WriteFile(filepath.Join(ro, "f"), []byte("x"), 0o400)
	os.Chmod(ro, 0o500)
	os.Chmod(filepath.Join(dir, "ro"), 0o000)
	os.Symlink("/etc", filepath.Join(dir, "abs"))
	if err := r.Destroy(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(dir); !os.IsNotExist(err) {
		t.Error("root survived Destroy")
	}
	// The cached file keeps its read-only mode: Destroy never chmods files.
	p, release, err := e.cache.Acquire(context.Background(), mustDigest(t, hello), false)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	if info, _ := os.Stat(p); info.Mode().Perm() != 0o444 {
		t.Errorf("cached file mode = %v after Destroy, want 0444", info.Mode().Perm())
	}
}

func TestRecycleEmptiesForReuse(t *testing.T) {
	e := newEnv(t)
	hello := e.tb.file("hello")
	root := e.tb.dir(&repb.Directory{Files: []*repb.FileNode{fnode("in", hello, false)}})
	dir := filepath.Join(t.TempDir(), "root")
	for round := range 2 {
		r, err := Build(context.Background(), e.cache, e.cas, fn, mustDigest(t, root), dir, &repb.Command{OutputFiles: []string{"out/x"}}, Linking{})
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if got := tree(t, dir); got != "d out\nf in" {
			t.Fatalf("round %d: the root holds\n%s", round, got)
		}
		ro := filepath.Join(dir, "ro")
		os.MkdirAll(ro, 0o755)
		os.WriteFile(filepath.Join(ro, "f"), []byte("x"), 0o400)
		os.Chmod(ro, 0o000)
		os.Chmod(dir, 0o500)
		if _, err := r.Recycle(); err != nil {
			t.Fatal(err)
		}
		// Only directories are left, writable again.
		if got := tree(t, dir); got != "d out\nd ro" {
			t.Fatalf("round %d: after Recycle the root holds\n%s", round, got)
		}
		if info, err := os.Stat(ro); err != nil || info.Mode().Perm() != 0o755 {
			t.Fatalf("round %d: ro after Recycle: %v %v", round, info.Mode(), err)
		}
		if st := e.cache.Stats(); st.Referenced != 0 {
			t.Fatalf("round %d: %d cache entries still referenced", round, st.Referenced)
		}
	}
}

// tree lists everything under dir, one "KIND PATH" line each (d, f, l ->
// target), sorted.
func tree(t *testing.T, dir string) string {
	t.Helper()
	var lines []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		switch {
		case d.IsDir():
			lines = append(lines, "d "+rel)
		case d.Type()&fs.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			lines = append(lines, "l "+rel+" -> "+target)
		default:
			lines = append(lines, "f "+rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// A recycled root keeps its directories; the next Build reuses those its
// tree needs and removes the rest, also where the new tree has a file or a
// symlink, so that the action sees exactly its inputs and output parents.
// TestBuildReusesRecycledDirectories: a recycled root keeps its
// directories for the next Build, which keeps the ones it needs and
// removes the others, whether it reads the directory (Build) or takes
// what Recycle kept (Recycled.Build).
func TestBuildReusesRecycledDirectories(t *testing.T) {
	for _, known := range []bool{false, true} {
		t.Run(fmt.Sprintf("known=%v", known), func(t *testing.T) { testBuildReusesRecycledDirectories(t, known) })
	}
}

func testBuildReusesRecycledDirectories(t *testing.T, known bool) {
	e := newEnv(t)
	hello := e.tb.file("hello")
	first := e.tb.dir(&repb.Directory{Directories: []*repb.DirectoryNode{
		dnode("a", e.tb.dir(&repb.Directory{Directories: []*repb.DirectoryNode{
			dnode("b", e.tb.dir(&repb.Directory{Files: []*repb.FileNode{fnode("f", hello, false)}})),
		}})),
		dnode("c", e.tb.dir(&repb.Directory{Files: []*repb.FileNode{fnode("g", hello, true)}})),
	}})
	dir := filepath.Join(t.TempDir(), "root")
	r, err := Build(context.Background(), e.cache, e.cas, fn, mustDigest(t, first), dir, &repb.Command{OutputFiles: []string{"out/deep/x", "work/sub/z"}}, Linking{})
	if err != nil {
		t.Fatal(err)
	}
	// What the action leaves: outputs, a directory tree of its own, a
	// read-only input directory.
	os.WriteFile(filepath.Join(dir, "out/deep/x"), []byte("x"), 0o644)
	os.MkdirAll(filepath.Join(dir, "junk/deeper"), 0o700)
	os.WriteFile(filepath.Join(dir, "junk/deeper/y"), []byte("y"), 0o644)
	os.Chmod(filepath.Join(dir, "a"), 0o500)
	rec, err := r.Recycle()
	if err != nil {
		t.Fatal(err)
	}
	if !known {
		rec = Recycled{Dir: dir} // as if nothing were known: Build reads it
	}
	want := "d a\nd a/b\nd c\nd junk\nd junk/deeper\nd out\nd out/deep\nd work\nd work/sub"
	if got := tree(t, dir); got != want {
		t.Fatalf("after Recycle:\n%s\nwant\n%s", got, want)
	}

	// Marks to tell a reused directory from one created again.
	old := time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC)
	inodeA := inode(t, filepath.Join(dir, "a"))
	os.Chtimes(filepath.Join(dir, "work/sub"), old, old)

	// The second tree: a without b, c a symlink, junk a file, out/deep an
	// output parent again, work/sub the working directory's output parent.
	second := e.tb.dir(&repb.Directory{
		Files: []*repb.FileNode{fnode("junk", hello, false)},
		Directories: []*repb.DirectoryNode{
			dnode("a", e.tb.dir(&repb.Directory{Files: []*repb.FileNode{fnode("f", hello, false)}})),
			dnode("work", e.tb.dir(&repb.Directory{})),
		},
		Symlinks: []*repb.SymlinkNode{snode("c", "a")},
	})
	r, err = rec.Build(context.Background(), e.cache, e.cas, fn, mustDigest(t, second), &repb.Command{
		WorkingDirectory: "work",
		OutputPaths:      []string{"../out/deep/x", "sub/y"},
	}, Linking{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Destroy()
	want = "d a\nd out\nd out/deep\nd work\nd work/sub\nf a/f\nf junk\nl c -> a"
	if got := tree(t, dir); got != want {
		t.Fatalf("second Build:\n%s\nwant\n%s", got, want)
	}
	if got := inode(t, filepath.Join(dir, "a")); got != inodeA {
		t.Errorf("a was created again (inode %d, was %d), not reused", got, inodeA)
	}
	if info, err := os.Stat(filepath.Join(dir, "work/sub")); err != nil || !info.ModTime().Equal(old) {
		t.Errorf("the output parent work/sub was created again, not reused (%v)", err)
	}
	if info, err := os.Stat(filepath.Join(dir, "a")); err != nil || info.Mode().Perm() != 0o755 {
		t.Errorf("a: %v %v, want a writable directory again", info.Mode(), err)
	}
	if r.Directories != 2 || r.Files != 2 || r.Symlinks != 1 {
		t.Errorf("counts dirs=%d files=%d links=%d, want 2 2 1", r.Directories, r.Files, r.Symlinks)
	}
}

func inode(t *testing.T, p string) uint64 {
	t.Helper()
	info, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	return info.Sys().(*syscall.Stat_t).Ino
}

func TestBuildRejectsFilesBelowDirectories(t *testing.T) {
	e := newEnv(t)
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "a/b"), 0o755)
	os.WriteFile(filepath.Join(dir, "a/b/leftover"), nil, 0o644)
	_, err := Build(context.Background(), e.cache, e.cas, fn, digest.Empty(fn), dir, &repb.Command{}, Linking{})
	if err == nil || !strings.Contains(err.Error(), "not empty") || !strings.Contains(err.Error(), "a/b/leftover") {
		t.Fatalf("got %v, want a 'not empty' error naming a/b/leftover", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "a/b/leftover")); err != nil {
		t.Error("Build removed a file it did not create")
	}
}

func TestBuildLargeTree(t *testing.T) {
	e := newEnv(t)
	var dirs []*repb.DirectoryNode
	for i := range 20 {
		var files []*repb.FileNode
		for j := range 30 {
			files = append(files, fnode(fmt.Sprintf("f%02d", j), e.tb.file(fmt.Sprintf("content %d", (i*30+j)%97)), j%2 == 0))
		}
		dirs = append(dirs, dnode(fmt.Sprintf("d%02d", i), e.tb.dir(&repb.Directory{Files: files})))
	}
	root := e.tb.dir(&repb.Directory{Directories: dirs})
	dir := filepath.Join(t.TempDir(), "root")
	r, err := Build(context.Background(), e.cache, e.cas, fn, mustDigest(t, root), dir, &repb.Command{}, Linking{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Destroy()
	if r.Files != 600 || r.Directories != 20 {
		t.Errorf("files=%d dirs=%d, want 600, 20", r.Files, r.Directories)
	}
	if got := readFile(t, filepath.Join(dir, "d19", "f29")); got != fmt.Sprintf("content %d", (19*30+29)%97) {
		t.Errorf("d19/f29 = %q", got)
	}
}

func TestErrorMessages(t *testing.T) {
	d := digest.Compute(fn, []byte("x"))
	tests := []struct {
		err  error
		want []string
	}{
		{&InvalidError{Path: "a/b", Rule: "names must be unique"}, []string{`"a/b"`, "names must be unique"}},
		{&MissingError{Digests: []digest.Digest{d}}, []string{"1 input blob(s)", d.String(), "upload"}},
	}
	for _, tt := range tests {
		for _, w := range tt.want {
			if !strings.Contains(tt.err.Error(), w) {
				t.Errorf("%q lacks %q", tt.err, w)
			}
		}
	}
	var many []digest.Digest
	for i := range 15 {
		many = append(many, digest.Compute(fn, []byte{byte(i)}))
	}
	if msg := newMissing(many).Error(); !strings.Contains(msg, "and 5 more") {
		t.Errorf("long list not abbreviated: %s", msg)
	}
}

func TestWorkingDirectoryDotDotAfterSymlink(t *testing.T) {
	e := newEnv(t)
	eDir := e.tb.dir(&repb.Directory{})
	d := e.tb.dir(&repb.Directory{Directories: []*repb.DirectoryNode{dnode("e", eDir)}})
	root := e.tb.dir(&repb.Directory{
		Directories: []*repb.DirectoryNode{dnode("d", d)},
		Symlinks:    []*repb.SymlinkNode{snode("l", "d/e")},
	})
	dir := filepath.Join(t.TempDir(), "root")
	// Physically l/.. is d (a lexical clean would say the root).
	r, err := Build(context.Background(), e.cache, e.cas, fn, mustDigest(t, root), dir, &repb.Command{WorkingDirectory: "l/..", OutputFiles: []string{"o/f"}}, Linking{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Destroy()
	wd, err := os.Stat(r.WorkDir)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := os.Stat(filepath.Join(dir, "d"))
	if !os.SameFile(wd, want) {
		t.Errorf("WorkDir %s is not the directory d", r.WorkDir)
	}
	if _, err := os.Stat(filepath.Join(dir, "d", "o")); err != nil {
		t.Errorf("output parent not created under d: %v", err)
	}
}

// batchCountingStore counts the GetBatch calls and the blobs opened one
// by one.
type batchCountingStore struct {
	*blobstore.Memory
	mu      sync.Mutex
	batches []int // the blobs asked for in each GetBatch
	opened  map[digest.Digest]int
	asked   []int // the digests in each FindMissing
}

func (s *batchCountingStore) FindMissing(ctx context.Context, ds []digest.Digest) ([]digest.Digest, error) {
	s.mu.Lock()
	s.asked = append(s.asked, len(ds))
	s.mu.Unlock()
	return s.Memory.FindMissing(ctx, ds)
}

func (s *batchCountingStore) GetBatch(ctx context.Context, ds []digest.Digest, data [][]byte, errs []error) {
	s.mu.Lock()
	s.batches = append(s.batches, len(ds))
	s.mu.Unlock()
	s.Memory.GetBatch(ctx, ds, data, errs)
}

func (s *batchCountingStore) Open(ctx context.Context, d digest.Digest, off int64) (io.ReadCloser, error) {
	s.mu.Lock()
	s.opened[d]++
	s.mu.Unlock()
	return s.Memory.Open(ctx, d, off)
}

// TestBuildFetchesTreeByLevel: the Directory messages of an input tree are
// read with one GetBatch per level of the tree, none one by one.
func TestBuildFetchesTreeByLevel(t *testing.T) {
	store := &batchCountingStore{Memory: blobstore.NewMemory(0), opened: map[digest.Digest]int{}}
	tb := treeBuilder{t, store}
	var dirDigests []*repb.Digest
	var top []*repb.DirectoryNode
	for i := range 12 {
		var mid []*repb.DirectoryNode
		for j := range 3 {
			leaf := tb.dir(&repb.Directory{Files: []*repb.FileNode{fnode("f", tb.file(fmt.Sprintf("file %d %d", i, j)), false)}})
			dirDigests = append(dirDigests, leaf)
			mid = append(mid, dnode(fmt.Sprintf("m%d", j), leaf))
		}
		d := tb.dir(&repb.Directory{Directories: mid})
		dirDigests = append(dirDigests, d)
		top = append(top, dnode(fmt.Sprintf("t%02d", i), d))
	}
	root := tb.dir(&repb.Directory{Directories: top})
	cache, err := filecache.New(t.TempDir(), 0, store)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "root")
	r, err := Build(context.Background(), cache, store, fn, mustDigest(t, root), dir, &repb.Command{}, Linking{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Destroy()
	if got := readFile(t, filepath.Join(dir, "t11", "m2", "f")); got != "file 11 2" {
		t.Errorf("t11/m2/f = %q", got)
	}
	if want := []int{1, 12, 36}; !slices.Equal(store.batches, want) {
		t.Errorf("GetBatch calls asked for %v Directory blobs; want one call per level: %v", store.batches, want)
	}
	for _, d := range append(dirDigests, root) {
		if n := store.opened[mustDigest(t, d)]; n != 0 {
			t.Errorf("Directory %s was opened %d times on its own", mustDigest(t, d), n)
		}
	}
}

// TestBuildAsksOnlyWhenNeeded: FindMissing is asked only about input files
// the worker's cache does not hold, and only when they are more than a
// handful or the tree itself is incomplete; a few missing files are found
// by their downloads and named together all the same.
func TestBuildAsksOnlyWhenNeeded(t *testing.T) {
	store := &batchCountingStore{Memory: blobstore.NewMemory(0), opened: map[digest.Digest]int{}}
	tb := treeBuilder{t, store}
	cache, err := filecache.New(t.TempDir(), 0, store)
	if err != nil {
		t.Fatal(err)
	}
	build := func(root *repb.Digest) (*Root, error) {
		t.Helper()
		return Build(context.Background(), cache, store, fn, mustDigest(t, root), filepath.Join(t.TempDir(), "root"), &repb.Command{}, Linking{})
	}
	asked := func() []int {
		store.mu.Lock()
		defer store.mu.Unlock()
		return slices.Clone(store.asked)
	}
	files := func(prefix string, n int) []*repb.FileNode {
		var fs []*repb.FileNode
		for i := range n {
			fs = append(fs, fnode(fmt.Sprintf("f%02d", i), tb.file(fmt.Sprintf("%s %d", prefix, i)), i == 0))
		}
		return fs
	}

	// A handful of new files: no question, the downloads answer it.
	few := tb.dir(&repb.Directory{Files: files("few", 5)})
	for range 2 {
		r, err := build(few)
		if err != nil {
			t.Fatal(err)
		}
		if got := readFile(t, filepath.Join(r.Dir, "f04")); got != "few 4" {
			t.Errorf("f04 = %q", got)
		}
		r.Destroy()
	}
	if got := asked(); len(got) != 0 {
		t.Errorf("building a tree of 5 files asked FindMissing about %v digests; want no call", got)
	}

	// Many new files: asked first, only about those not cached.
	many := tb.dir(&repb.Directory{Files: append(files("few", 5), files("many", askFirstAbove+6)[5:]...)})
	r, err := build(many)
	if err != nil {
		t.Fatal(err)
	}
	r.Destroy()
	if got := asked(); !slices.Equal(got, []int{askFirstAbove + 1}) {
		t.Errorf("building a tree with %d uncached files asked about %v digests; want one call about them", askFirstAbove+1, got)
	}

	// Two files the CAS lacks, among a few: both named, no question asked.
	gone1, gone2 := absent("gone 1"), absent("gone 2")
	holes := tb.dir(&repb.Directory{Files: append(files("few", 3), fnode("g1", gone1, false), fnode("g2", gone2, false))})
	_, err = build(holes)
	var me *MissingError
	if !errors.As(err, &me) || !sameSet(me.Digests, []digest.Digest{mustDigest(t, gone1), mustDigest(t, gone2)}) {
		t.Errorf("a tree with two files missing from the CAS: %v; want a MissingError naming both", err)
	}
	if got := asked(); len(got) != 1 {
		t.Errorf("FindMissing calls %v; want none for the tree with two missing files", got)
	}

	// A Directory missing too: the CAS is asked, and everything is named.
	holey := tb.dir(&repb.Directory{Files: []*repb.FileNode{fnode("g1", gone1, false)}, Directories: []*repb.DirectoryNode{dnode("d", absent("no such directory"))}})
	_, err = build(holey)
	if !errors.As(err, &me) || !sameSet(me.Digests, []digest.Digest{mustDigest(t, gone1), mustDigest(t, absent("no such directory"))}) {
		t.Errorf("a tree missing a Directory and a file: %v; want a MissingError naming both", err)
	}
}

// Recycle after Destroy hands back the directory as unknown (Build makes
// it again); a second Recycle empties the root again and lists the same
// directories.
func TestRecycleAfterDestroyOrRecycle(t *testing.T) {
	e := newEnv(t)
	root := e.tb.dir(&repb.Directory{Directories: []*repb.DirectoryNode{dnode("a", e.tb.dir(&repb.Directory{Files: []*repb.FileNode{fnode("f", e.tb.file("x"), false)}}))}})
	dir := filepath.Join(t.TempDir(), "root")
	r, err := Build(context.Background(), e.cache, e.cas, fn, mustDigest(t, root), dir, &repb.Command{}, Linking{})
	if err != nil {
		t.Fatal(err)
	}
	first, err := r.Recycle()
	if err != nil || first.Dir != dir || !reflect.DeepEqual(first.dirs, map[string]bool{"a": true}) {
		t.Fatalf("Recycle = %+v, %v", first, err)
	}
	os.WriteFile(filepath.Join(dir, "a", "late"), []byte("written after the first Recycle"), 0o644)
	second, err := r.Recycle()
	if err != nil || !reflect.DeepEqual(second, first) {
		t.Fatalf("second Recycle = %+v, %v; want %+v", second, err, first)
	}
	if got := tree(t, dir); got != "d a" {
		t.Errorf("after the second Recycle:\n%s", got)
	}

	r, err = second.Build(context.Background(), e.cache, e.cas, fn, mustDigest(t, root), &repb.Command{}, Linking{})
	if err != nil {
		t.Fatal(err)
	}
	r.Destroy()
	rec, err := r.Recycle()
	if err != nil || rec.Dir != dir || rec.dirs != nil {
		t.Fatalf("Recycle after Destroy = %+v, %v; want the directory, unknown", rec, err)
	}
	r, err = rec.Build(context.Background(), e.cache, e.cas, fn, mustDigest(t, root), &repb.Command{}, Linking{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Destroy()
	if got := tree(t, dir); got != "d a\nf a/f" {
		t.Errorf("Build after Destroy and Recycle:\n%s", got)
	}
}
