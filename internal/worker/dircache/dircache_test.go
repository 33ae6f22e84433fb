package dircache

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/gantry-build/gantry/internal/blobstore"
	"github.com/gantry-build/gantry/internal/digest"
	"github.com/gantry-build/gantry/internal/worker/filecache"
)

const fn = digest.SHA256

type env struct {
	cas   *blobstore.Memory
	files *filecache.Cache
	trees *Cache
}

func newEnv(t *testing.T, maxBytes int64) env {
	t.Helper()
	base := t.TempDir()
	cas := blobstore.NewMemory(0)
	files, err := filecache.New(filepath.Join(base, "cache"), maxBytes, cas)
	if err != nil {
		t.Fatal(err)
	}
	trees, err := New(filepath.Join(base, "trees"), files)
	if err != nil {
		t.Fatal(err)
	}
	return env{cas: cas, files: files, trees: trees}
}

// put stores data in the CAS.
func (e env) put(t *testing.T, data string) digest.Digest {
	t.Helper()
	d := digest.Compute(fn, []byte(data))
	if err := blobstore.Put(context.Background(), e.cas, d, []byte(data)); err != nil {
		t.Fatal(err)
	}
	return d
}

// fill returns a Fill laying out files named f0.. with the given
// contents under sub/, linked from the file cache, and counting its calls.
func (e env) fill(t *testing.T, calls *atomic.Int32, contents ...string) Fill {
	ds := make([]digest.Digest, len(contents))
	for i, c := range contents {
		ds[i] = e.put(t, c)
	}
	return func(ctx context.Context, dir string) ([]func(), error) {
		calls.Add(1)
		var pins []func()
		if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
			return nil, err
		}
		for i, d := range ds {
			release, err := e.files.Link(ctx, d, false, filepath.Join(dir, "sub", fmt.Sprintf("f%d", i)))
			if err != nil {
				return pins, err
			}
			pins = append(pins, release)
		}
		return pins, nil
	}
}

// treeKey is a made-up Directory digest.
func treeKey(name string) digest.Digest { return digest.Compute(fn, []byte("dir "+name)) }

func TestAcquireBuildsOnceAndReuses(t *testing.T) {
	e := newEnv(t, 0)
	var calls atomic.Int32
	fill := e.fill(t, &calls, "alpha", "beta")
	ctx := context.Background()
	var wg sync.WaitGroup
	paths := make([]string, 4)
	releases := make([]func(), 4)
	for i := range paths {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p, rel, err := e.trees.Acquire(ctx, treeKey("a"), fill)
			if err != nil {
				t.Error(err)
				return
			}
			paths[i], releases[i] = p, rel
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	if calls.Load() != 1 {
		t.Errorf("fill ran %d times for 4 concurrent Acquires, want 1", calls.Load())
	}
	for _, p := range paths {
		if p != paths[0] {
			t.Fatalf("paths differ: %v", paths)
		}
	}
	if b, err := os.ReadFile(filepath.Join(paths[0], "sub", "f1")); err != nil || string(b) != "beta" {
		t.Errorf("sub/f1 = %q, %v", b, err)
	}
	// Read-only directories: nothing can be added by mistake.
	if info, err := os.Stat(filepath.Join(paths[0], "sub")); err != nil || info.Mode().Perm() != treeMode {
		t.Errorf("sub: %v, %v; want mode %v", info.Mode(), err, treeMode)
	}
	if s := e.trees.Stats(); s.Trees != 1 || s.InUse != 1 || s.Builds != 1 || s.Hits != 3 {
		t.Errorf("stats %+v", s)
	}
	for _, r := range releases {
		r()
		r() // idempotent
	}
	if s := e.trees.Stats(); s.Trees != 1 || s.InUse != 0 {
		t.Errorf("after release: stats %+v; an idle tree within the budget stays", s)
	}
	// A later Acquire reuses the idle tree.
	p, rel, err := e.trees.Acquire(ctx, treeKey("a"), fill)
	if err != nil || p != paths[0] || calls.Load() != 1 {
		t.Errorf("reuse: %s, %v, fill ran %d times", p, err, calls.Load())
	}
	rel()
}

// The file cache's budget covers the files of idle trees: they stay
// referenced (the file cache keeps counting them), and trees are deleted,
// least recently used first, when the file cache is over its budget.
func TestIdleTreesGiveWayToTheFileCacheBudget(t *testing.T) {
	e := newEnv(t, 100) // bytes
	ctx := context.Background()
	var calls atomic.Int32
	big := func(c byte) string { return string(make([]byte, 30)) + string(c) } // 31 bytes
	fillA := e.fill(t, &calls, big('a'), big('b'))                             // 62 bytes
	fillB := e.fill(t, &calls, big('c'))                                       // 31 bytes

	pa, relA, err := e.trees.Acquire(ctx, treeKey("A"), fillA)
	if err != nil {
		t.Fatal(err)
	}
	relA()
	_, relB, err := e.trees.Acquire(ctx, treeKey("B"), fillB)
	if err != nil {
		t.Fatal(err)
	}
	relB()
	// 93 bytes: within the budget, both trees stay, and their files are
	// still counted (pinned) by the file cache.
	if s := e.trees.Stats(); s.Trees != 2 || s.Evictions != 0 {
		t.Fatalf("stats %+v, want 2 trees and no eviction", s)
	}
	if fs := e.files.Stats(); fs.Bytes != 93 || fs.Referenced != 3 {
		t.Fatalf("file cache %+v: the trees' files must stay referenced and counted", fs)
	}
	// Another 31 bytes downloaded by a file-by-file exec root: 124 > 100.
	// The file cache cannot evict (everything is pinned) until Trim
	// deletes the least recently used tree, A.
	d := e.put(t, big('z'))
	release, err := e.files.Link(ctx, d, false, filepath.Join(t.TempDir(), "z"))
	if err != nil {
		t.Fatal(err)
	}
	if e.files.Excess() != 24 {
		t.Fatalf("excess %d, want 24", e.files.Excess())
	}
	e.trees.Trim()
	if s := e.trees.Stats(); s.Trees != 1 || s.Evictions != 1 {
		t.Errorf("after Trim: stats %+v, want tree A evicted", s)
	}
	if _, err := os.Stat(pa); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("evicted tree A still on disk: %v", err)
	}
	// A's files are unpinned: the file cache evicts what it must of them.
	if fs := e.files.Stats(); fs.Referenced != 2 || fs.Bytes > 100 || e.files.Excess() != 0 {
		t.Errorf("file cache %+v after eviction, want A's files unpinned and the cache within budget", fs)
	}
	release()

	// A tree in use is never evicted, however far over the budget.
	pb, relB, err := e.trees.Acquire(ctx, treeKey("B"), fillB)
	if err != nil {
		t.Fatal(err)
	}
	fillC := e.fill(t, &calls, big('x'), big('y'), big('w'), big('v'))
	pc, relC, err := e.trees.Acquire(ctx, treeKey("C"), fillC)
	if err != nil {
		t.Fatal(err)
	}
	e.trees.Trim()
	for _, p := range []string{pb, pc} {
		if _, err := os.Stat(filepath.Join(p, "sub", "f0")); err != nil {
			t.Errorf("a tree in use was deleted: %v", err)
		}
	}
	relC()
	relB()
	// Released: C, idle first while the file cache is over its budget, is
	// deleted; B alone fits and stays.
	if s := e.trees.Stats(); s.Trees != 1 || e.files.Excess() != 0 {
		t.Errorf("after releasing: stats %+v, excess %d", s, e.files.Excess())
	}
	if _, err := os.Stat(pb); err != nil {
		t.Errorf("tree B, used last, was evicted: %v", err)
	}
}

func TestFailedFillLeavesNothing(t *testing.T) {
	e := newEnv(t, 0)
	ctx := context.Background()
	present := e.put(t, "here")
	missing := digest.Compute(fn, []byte("not in the CAS"))
	var pinned atomic.Int32
	fill := func(ctx context.Context, dir string) ([]func(), error) {
		release, err := e.files.Link(ctx, present, false, filepath.Join(dir, "a"))
		if err != nil {
			return nil, err
		}
		pinned.Add(1)
		pins := []func(){func() { pinned.Add(-1); release() }}
		_, err = e.files.Link(ctx, missing, false, filepath.Join(dir, "b"))
		return pins, err
	}
	if _, _, err := e.trees.Acquire(ctx, treeKey("bad"), fill); !errors.Is(err, blobstore.ErrNotFound) {
		t.Fatalf("err = %v, want the fill's not-found error", err)
	}
	if pinned.Load() != 0 {
		t.Error("the references a failed fill took were not released")
	}
	ents, _ := os.ReadDir(e.trees.Dir())
	if len(ents) != 0 || e.trees.Stats().Trees != 0 {
		t.Errorf("a failed build left %v in the tree cache", ents)
	}
	// The next Acquire builds again.
	var calls atomic.Int32
	p, rel, err := e.trees.Acquire(ctx, treeKey("bad"), e.fill(t, &calls, "fine"))
	if err != nil || calls.Load() != 1 {
		t.Fatalf("retry: %s, %v", p, err)
	}
	rel()
}

func TestNewClearsLeftoverTrees(t *testing.T) {
	e := newEnv(t, 0)
	var calls atomic.Int32
	p, _, err := e.trees.Acquire(context.Background(), treeKey("a"), e.fill(t, &calls, "x"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := New(e.trees.Dir(), e.files); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a read-only tree of a previous run survived New: %v", err)
	}
}
