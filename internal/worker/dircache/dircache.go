// Package dircache keeps whole input directories materialized on the
// worker's disk, keyed by the digest of their Directory message, so that an
// exec root can take a big input tree as one read-only bind mount instead
// of one hardlink per file (issue 23 item 6, "directory linking").
//
// A tree is laid out once by the caller's Fill function (directories,
// symlinks, and files hardlinked from the worker's filecache.Cache) in a
// temporary directory, made read-only and renamed into place. It is
// reference counted while exec roots use it and kept, idle, for later
// actions until the disk budget needs its space.
//
// Disk accounting: a tree's files are hardlinks to file cache entries, so
// they take no space of their own, but the inodes stay allocated for as
// long as the tree exists, whatever the file cache thinks. A tree therefore
// holds a file cache reference for every file it links (the pins Fill
// returns) until it is deleted: the file cache keeps counting those bytes
// and never believes it freed them. Referenced entries are never evicted by
// the file cache, which can thus go over its budget because of idle trees;
// Trim deletes idle trees, least recently used first, until the file cache
// reports no excess (filecache.Cache.Excess). The directories of a tree
// (a few KiB each) are not counted, as the exec roots' are not.
//
// Trees do not survive a restart: New empties the directory (adopting them
// would mean re-taking every pin without knowing their digests).
package dircache

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"github.com/gantry-build/gantry/internal/digest"
	"github.com/gantry-build/gantry/internal/worker/filecache"
)

// treeMode is the mode of every directory of a cached tree: the bind
// mount is read-only anyway, this also keeps the worker's own code (and an
// unsandboxed process that finds the path) from adding entries by mistake.
const treeMode fs.FileMode = 0o555

// Fill lays out the tree in dir, an empty directory, and returns the file
// cache references its files hold (released when the tree is deleted). On
// error it returns the references taken so far, which the cache releases.
type Fill func(ctx context.Context, dir string) (pins []func(), err error)

// Cache is the set of materialized trees under one directory. It is safe
// for concurrent use.
type Cache struct {
	dir   string
	files *filecache.Cache

	mu    sync.Mutex
	trees map[digest.Digest]*tree
	lru   *list.List // idle ready trees, most recently used at the front
	seq   int
	stats Stats
}

// tree is one cached directory. Fields are guarded by Cache.mu.
type tree struct {
	d    digest.Digest
	path string
	refs int
	elem *list.Element // in Cache.lru while ready and idle
	// done is closed when the first Acquire finished building (err says
	// how); ready is set on success.
	done  chan struct{}
	err   error
	ready bool
	pins  []func()
}

// Stats is a snapshot of the cache's state and counters.
type Stats struct {
	// Trees counts trees on disk; InUse those an exec root uses now.
	Trees, InUse int
	// Hits counts Acquire calls served by a tree already on disk (or
	// being built), Builds the trees built, Evictions the idle trees
	// deleted to give their space back to the file cache.
	Hits, Builds, Evictions int64
}

// New opens the tree cache in dir, deleting whatever a previous run left
// there. Its trees' files are hardlinks into files, whose budget it keeps.
func New(dir string, files *filecache.Cache) (*Cache, error) {
	if files == nil {
		return nil, errors.New("dircache: no file cache given; trees are made of its files")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("dircache: resolving %q: %w", dir, err)
	}
	if err := removeTree(abs); err != nil {
		return nil, fmt.Errorf("dircache: clearing the trees of a previous run in %s: %w; remove it by hand", abs, err)
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return nil, fmt.Errorf("dircache: creating %s: %w", abs, err)
	}
	return &Cache{dir: abs, files: files, trees: make(map[digest.Digest]*tree), lru: list.New()}, nil
}

// Dir returns the directory the trees live in.
func (c *Cache) Dir() string { return c.dir }

// Acquire returns the path of the read-only tree of Directory d, building
// it with fill if it is not cached (concurrent callers for the same tree
// wait for one build). The tree stays on disk until release is called
// (idempotent); callers must not modify it.
func (c *Cache) Acquire(ctx context.Context, d digest.Digest, fill Fill) (path string, release func(), err error) {
	for {
		c.mu.Lock()
		t, ok := c.trees[d]
		if !ok {
			c.seq++
			t = &tree{d: d, refs: 1, done: make(chan struct{}),
				path: filepath.Join(c.dir, digest.Name(d.Function)+"-"+d.Hash+"-"+strconv.FormatInt(d.Size, 10))}
			c.trees[d] = t
			tmp := filepath.Join(c.dir, "tmp-"+strconv.Itoa(c.seq))
			c.stats.Builds++
			c.mu.Unlock()
			return c.build(ctx, t, tmp, fill)
		}
		c.stats.Hits++
		t.refs++
		if t.elem != nil {
			c.lru.Remove(t.elem)
			t.elem = nil
		}
		c.mu.Unlock()
		select {
		case <-t.done:
		case <-ctx.Done():
			c.release(t)
			return "", nil, ctx.Err()
		}
		if t.err == nil {
			return t.path, c.releaseFunc(t), nil
		}
		// The build failed (perhaps only its caller's context ended):
		// drop our reference to the failed entry and try again.
		c.release(t)
		if err := ctx.Err(); err != nil {
			return "", nil, err
		}
	}
}

// build lays the tree out in tmp, makes it read-only and moves it to
// t.path, then wakes the waiters.
func (c *Cache) build(ctx context.Context, t *tree, tmp string, fill Fill) (string, func(), error) {
	pins, err := c.fill(ctx, tmp, fill)
	if err == nil {
		if err = os.Rename(tmp, t.path); err != nil {
			err = fmt.Errorf("dircache: moving the tree %s into place: %w", t.d, err)
		}
	}
	if err != nil {
		_ = removeTree(tmp)
		for _, p := range pins {
			p()
		}
		c.mu.Lock()
		t.err = err
		delete(c.trees, t.d)
		t.refs--
		close(t.done)
		c.mu.Unlock()
		return "", nil, err
	}
	c.mu.Lock()
	t.pins = pins
	t.ready = true
	close(t.done)
	c.mu.Unlock()
	// Building may have pushed the file cache over its budget.
	c.Trim()
	return t.path, c.releaseFunc(t), nil
}

// fill runs the caller's Fill in a new directory and makes its
// directories read-only.
func (c *Cache) fill(ctx context.Context, tmp string, fill Fill) ([]func(), error) {
	if err := os.Mkdir(tmp, 0o755); err != nil {
		return nil, fmt.Errorf("dircache: creating %s: %w", tmp, err)
	}
	pins, err := fill(ctx, tmp)
	if err != nil {
		return pins, err
	}
	// Deepest first does not matter for chmod to 0555: the owner keeps
	// search permission, so the walk can still descend.
	err = filepath.WalkDir(tmp, func(p string, de fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if de.IsDir() {
			return os.Chmod(p, treeMode)
		}
		return nil
	})
	if err != nil {
		return pins, fmt.Errorf("dircache: making the tree in %s read-only: %w", tmp, err)
	}
	return pins, nil
}

func (c *Cache) releaseFunc(t *tree) func() {
	var once sync.Once
	return func() { once.Do(func() { c.release(t) }) }
}

// release drops one reference; an idle tree goes to the LRU list, and
// trees are trimmed if the file cache needs the space.
func (c *Cache) release(t *tree) {
	c.mu.Lock()
	t.refs--
	idle := t.refs == 0 && t.ready && c.trees[t.d] == t
	if idle {
		t.elem = c.lru.PushFront(t)
	}
	c.mu.Unlock()
	if idle {
		c.Trim()
	}
}

// Trim deletes idle trees, least recently used first, while the file
// cache is over its budget. Call it after anything that may have grown
// the file cache (an exec root built file by file downloads into it).
func (c *Cache) Trim() {
	for c.files.Excess() > 0 {
		c.mu.Lock()
		back := c.lru.Back()
		if back == nil {
			c.mu.Unlock()
			return
		}
		t := back.Value.(*tree)
		c.lru.Remove(back)
		t.elem = nil
		delete(c.trees, t.d)
		c.stats.Evictions++
		// Renamed under the lock, so that a tree of the same digest
		// built from now on does not meet this one at its path.
		c.seq++
		gone := filepath.Join(c.dir, "gone-"+strconv.Itoa(c.seq))
		if err := os.Rename(t.path, gone); err != nil {
			gone = t.path
		}
		c.mu.Unlock()
		_ = removeTree(gone) // a leftover is cleared by the next New
		// Only now may the file cache evict the files.
		for _, pin := range t.pins {
			pin()
		}
	}
}

// Stats returns a snapshot of the cache's state and counters.
func (c *Cache) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.stats
	for _, t := range c.trees {
		if t.ready {
			s.Trees++
			if t.refs > 0 {
				s.InUse++
			}
		}
	}
	return s
}

// removeTree deletes p, first giving its directories write permission
// back (a tree's are read-only).
func removeTree(p string) error {
	_ = filepath.WalkDir(p, func(q string, de fs.DirEntry, err error) error {
		if err == nil && de.IsDir() {
			_ = os.Chmod(q, 0o755)
		}
		return nil
	})
	return os.RemoveAll(p)
}
