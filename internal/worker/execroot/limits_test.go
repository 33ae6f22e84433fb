package execroot

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/protobuf/proto"

	"github.com/gantry-build/gantry/internal/blobstore"
	"github.com/gantry-build/gantry/internal/digest"
	"github.com/gantry-build/gantry/internal/inputtree"
	"github.com/gantry-build/gantry/internal/worker/filecache"
)

// A few kilobytes of Directory messages that expand to 2^40 paths must be
// refused before anything is written, and quickly enough for this test.
func TestBuildRejectsFanOutBomb(t *testing.T) {
	e := newEnv(t)
	d := e.tb.dir(&repb.Directory{Files: []*repb.FileNode{fnode("f", e.tb.file("x"), false)}})
	for i := 0; i < 40; i++ {
		d = e.tb.dir(&repb.Directory{Directories: []*repb.DirectoryNode{dnode("a", d), dnode("b", d)}})
	}
	dir := filepath.Join(t.TempDir(), "root")
	_, err := Build(context.Background(), e.cache, e.cas, fn, mustDigest(t, d), dir, &repb.Command{}, Linking{})
	var inv *InvalidError
	if !errors.As(err, &inv) || !strings.Contains(inv.Rule, "expands to more than") {
		t.Fatalf("err = %v, want an InvalidError about the expanded size", err)
	}
	if _, err := os.Stat(dir); err == nil {
		if ents, _ := os.ReadDir(dir); len(ents) > 0 {
			t.Errorf("%d entries were written for a refused tree", len(ents))
		}
	}
}

func TestBuildEntryLimitIsExact(t *testing.T) {
	old := MaxEntries
	MaxEntries = 6
	defer func() { MaxEntries = old }()
	e := newEnv(t)
	leaf := e.tb.dir(&repb.Directory{Files: []*repb.FileNode{fnode("f", e.tb.file("x"), false), fnode("g", e.tb.file("y"), false)}})
	// 2 dirs + 2*2 files = 6 entries: allowed; one more file: refused.
	ok := e.tb.dir(&repb.Directory{Directories: []*repb.DirectoryNode{dnode("a", leaf), dnode("b", leaf)}})
	r, err := Build(context.Background(), e.cache, e.cas, fn, mustDigest(t, ok), filepath.Join(t.TempDir(), "ok"), &repb.Command{}, Linking{})
	if err != nil {
		t.Fatalf("a tree at the limit was refused: %v", err)
	}
	r.Destroy()
	over := e.tb.dir(&repb.Directory{Files: []*repb.FileNode{fnode("z", e.tb.file("z"), false)}, Directories: []*repb.DirectoryNode{dnode("a", leaf), dnode("b", leaf)}})
	if _, err := Build(context.Background(), e.cache, e.cas, fn, mustDigest(t, over), filepath.Join(t.TempDir(), "over"), &repb.Command{}, Linking{}); err == nil {
		t.Fatal("a tree over the limit was accepted")
	}
}

func TestBuildRejectsDeepNesting(t *testing.T) {
	e := newEnv(t)
	for _, tc := range []struct {
		depth int
		ok    bool
	}{{MaxDepth, true}, {MaxDepth + 1, false}} {
		d := e.tb.dir(&repb.Directory{})
		for i := 0; i < tc.depth; i++ {
			d = e.tb.dir(&repb.Directory{Directories: []*repb.DirectoryNode{dnode("d", d)}})
		}
		// Short names: depth MaxDepth must still fit in PATH_MAX.
		dir := filepath.Join(t.TempDir(), "r")
		r, err := Build(context.Background(), e.cache, e.cas, fn, mustDigest(t, d), dir, &repb.Command{}, Linking{})
		var inv *InvalidError
		switch {
		case tc.ok && err != nil:
			t.Errorf("depth %d refused: %v", tc.depth, err)
		case !tc.ok && (!errors.As(err, &inv) || !strings.Contains(inv.Rule, "deep")):
			t.Errorf("depth %d: err = %v, want an InvalidError about nesting", tc.depth, err)
		}
		if r != nil {
			r.Destroy()
		}
	}
}

// TestBuildRejectsLongNames: a name longer than a file system allows is
// an InvalidError naming the limit, not a failure of the file system; a
// name at the limit is laid out.
func TestBuildRejectsLongNames(t *testing.T) {
	e := newEnv(t)
	for _, tc := range []struct {
		n  int
		ok bool
	}{{inputtree.MaxNameLength, true}, {5000, false}} {
		d := e.tb.dir(&repb.Directory{Files: []*repb.FileNode{fnode(strings.Repeat("n", tc.n), e.tb.file("x"), false)}})
		r, err := Build(context.Background(), e.cache, e.cas, fn, mustDigest(t, d), filepath.Join(t.TempDir(), "r"), &repb.Command{}, Linking{})
		var inv *InvalidError
		switch {
		case tc.ok && err != nil:
			t.Errorf("a %d-byte name refused: %v", tc.n, err)
		case !tc.ok && (!errors.As(err, &inv) || !strings.Contains(inv.Rule, "more than the 255")):
			t.Errorf("a %d-byte name: err = %v, want an InvalidError naming the limit", tc.n, err)
		}
		if r != nil {
			r.Destroy()
		}
	}
}

// FuzzBuild feeds arbitrary bytes as the root Directory message (next to a
// few real blobs it may refer to) and checks that Build never panics,
// never writes outside its directory, and cleans up when it refuses.
func FuzzBuild(f *testing.F) {
	hello := []byte("hello")
	helloD := digest.Compute(fn, hello)
	emptyDir := digest.Compute(fn, nil)
	seeds := []*repb.Directory{
		{Files: []*repb.FileNode{{Name: "a", Digest: helloD.Proto()}}},
		{Directories: []*repb.DirectoryNode{{Name: "d", Digest: emptyDir.Proto()}}, Symlinks: []*repb.SymlinkNode{{Name: "l", Target: "d/../a"}}},
		{Symlinks: []*repb.SymlinkNode{{Name: "up", Target: "../x"}}},
		{Files: []*repb.FileNode{{Name: "..", Digest: helloD.Proto()}}},
	}
	for _, s := range seeds {
		f.Add(mustMarshal(s), "out/x")
	}
	f.Fuzz(func(t *testing.T, rootMsg []byte, output string) {
		cas := blobstore.NewMemory(0)
		ctx := context.Background()
		_ = blobstore.Put(ctx, cas, helloD, hello)
		_ = blobstore.Put(ctx, cas, emptyDir, nil)
		rootD := digest.Compute(fn, rootMsg)
		_ = blobstore.Put(ctx, cas, rootD, rootMsg)
		base := t.TempDir()
		cache, err := filecache.New(filepath.Join(base, "cache"), 0, cas)
		if err != nil {
			t.Fatal(err)
		}
		dir := filepath.Join(base, "root")
		r, err := Build(ctx, cache, cas, fn, rootD, dir, &repb.Command{OutputPaths: []string{output}}, Linking{})
		ents, _ := os.ReadDir(base)
		for _, e := range ents {
			if e.Name() != "cache" && e.Name() != "root" {
				t.Fatalf("Build wrote %s outside its directory", e.Name())
			}
		}
		if err != nil {
			if left, _ := os.ReadDir(dir); len(left) > 0 {
				t.Fatalf("refused tree (%v) left %d entries behind", err, len(left))
			}
			return
		}
		if err := r.Destroy(); err != nil {
			t.Fatal(err)
		}
	})
}

func mustMarshal(d *repb.Directory) []byte {
	b, err := protoMarshal(d)
	if err != nil {
		panic(fmt.Sprint(err))
	}
	return b
}

func protoMarshal(d *repb.Directory) ([]byte, error) {
	return proto.MarshalOptions{Deterministic: true}.Marshal(d)
}
