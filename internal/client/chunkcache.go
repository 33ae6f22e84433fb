package client

import (
	"container/list"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gantry-build/gantry/internal/digest"
)

// ChunkCache is a local directory of chunks, one file per chunk named by
// its digest, bounded in total size: the least recently used chunks are
// removed first. Chunked downloads read the chunks it holds instead of
// fetching them, so a new version of a large blob costs only its changed
// chunks. Every chunk read is checked against its digest; a damaged one
// is removed and reported as absent, so it is fetched again.
//
// Several processes may share a directory: files are written to a
// temporary name and renamed into place, and a chunk another process
// removed is just a miss. Each process bounds what it knows of, so the
// directory may briefly exceed the bound by what others added.
//
// The directory is made and read on first use, so that a process that
// moves no large file (most compiles of `gantry cc`) pays nothing for it;
// a directory that cannot be made or read makes every Get a miss.
type ChunkCache struct {
	dir   string
	limit int64

	once    sync.Once
	loadErr error

	mu      sync.Mutex
	lru     *list.List // of *cacheEntry, most recently used first
	entries map[string]*list.Element
	size    int64
}

type cacheEntry struct {
	name string
	size int64
}

// staleTemp is the age from which a temporary file in the cache is taken
// for the leftover of a crash rather than another process's write.
const staleTemp = time.Hour

// OpenChunkCache returns the chunk cache in dir, bounded to limit bytes.
// Chunks already there are kept, oldest use first in line for removal.
func OpenChunkCache(dir string, limit int64) (*ChunkCache, error) {
	if limit <= 0 {
		return nil, fmt.Errorf("chunk cache %s: size bound %d is not positive; give a size such as 1GiB", dir, limit)
	}
	return &ChunkCache{dir: dir, limit: limit, lru: list.New(), entries: make(map[string]*list.Element)}, nil
}

// load makes and reads the directory, once.
func (c *ChunkCache) load() error {
	c.once.Do(func() { c.loadErr = c.scan() })
	return c.loadErr
}

func (c *ChunkCache) scan() error {
	if err := os.MkdirAll(c.dir, 0o755); err != nil {
		return fmt.Errorf("chunk cache: %w; make the directory writable or point the cache elsewhere", err)
	}
	des, err := os.ReadDir(c.dir)
	if err != nil {
		return fmt.Errorf("chunk cache: %w", err)
	}
	type found struct {
		name  string
		size  int64
		mtime time.Time
	}
	var all []found
	for _, de := range des {
		fi, err := de.Info()
		if err != nil || !fi.Mode().IsRegular() {
			continue
		}
		if strings.HasPrefix(de.Name(), ".tmp") {
			if time.Since(fi.ModTime()) > staleTemp {
				os.Remove(filepath.Join(c.dir, de.Name())) // a write a crash interrupted
			}
			continue
		}
		all = append(all, found{de.Name(), fi.Size(), fi.ModTime()})
	}
	slices.SortFunc(all, func(a, b found) int { return b.mtime.Compare(a.mtime) })
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, f := range all {
		c.entries[f.name] = c.lru.PushBack(&cacheEntry{f.name, f.size})
		c.size += f.size
	}
	c.evict()
	return nil
}

// chunkName is the file name of chunk d.
func chunkName(d digest.Digest) string {
	return strings.ToLower(digest.Name(d.Function)) + "-" + d.Hash + "-" + strconv.FormatInt(d.Size, 10)
}

// Size is the bytes of the chunks the cache knows of.
func (c *ChunkCache) Size() int64 {
	_ = c.load()
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.size
}

// Get returns chunk d's bytes if the cache holds it, checked against d
// when verify is set (else only its size is). corrupt is true when it
// held damaged data, which it has now removed.
func (c *ChunkCache) Get(d digest.Digest, verify bool) (data []byte, ok, corrupt bool) {
	return c.GetInto(d, nil, verify)
}

// GetInto is Get reading into buf when it has room (a caller reading many
// chunks reuses its memory instead of faulting in fresh pages).
func (c *ChunkCache) GetInto(d digest.Digest, buf []byte, verify bool) (data []byte, ok, corrupt bool) {
	if c.load() != nil {
		return nil, false, false
	}
	name := chunkName(d)
	p := filepath.Join(c.dir, name)
	data, err := readInto(p, buf, d.Size)
	if err != nil {
		c.drop(name)
		return nil, false, false
	}
	if int64(len(data)) != d.Size || verify && digest.Compute(d.Function, data) != d {
		os.Remove(p)
		c.drop(name)
		return nil, false, true
	}
	now := time.Now()
	_ = os.Chtimes(p, now, now) // the order of use survives a restart
	c.mu.Lock()
	if e, ok := c.entries[name]; ok {
		c.lru.MoveToFront(e)
	} else {
		c.add(name, d.Size)
	}
	c.mu.Unlock()
	return data, true, false
}

// readInto reads the file at p, expected to hold size bytes, into buf if
// it fits, else into new memory. A file of another size reads as what it
// holds, up to one byte past size, for the caller to reject.
func readInto(p string, buf []byte, size int64) ([]byte, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if int64(cap(buf)) < size+1 {
		buf = make([]byte, size+1)
	}
	n, err := io.ReadFull(f, buf[:size+1])
	if err == io.ErrUnexpectedEOF || err == io.EOF {
		err = nil
	}
	return buf[:n], err
}

// Put stores chunk d, whose bytes the caller has verified. A chunk
// larger than the whole bound is not kept.
func (c *ChunkCache) Put(d digest.Digest, data []byte) error {
	if d.Size > c.limit {
		return nil
	}
	if err := c.load(); err != nil {
		return err
	}
	name := chunkName(d)
	c.mu.Lock()
	_, have := c.entries[name]
	c.mu.Unlock()
	if have {
		return nil
	}
	f, err := os.CreateTemp(c.dir, ".tmp")
	if err != nil {
		return fmt.Errorf("chunk cache: %w", err)
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), filepath.Join(c.dir, name))
	}
	if err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("chunk cache: storing chunk %s: %w", d, err)
	}
	c.mu.Lock()
	if _, ok := c.entries[name]; !ok {
		c.add(name, d.Size)
		c.evict()
	}
	c.mu.Unlock()
	return nil
}

// add records a chunk as most recently used; c.mu is held.
func (c *ChunkCache) add(name string, size int64) {
	c.entries[name] = c.lru.PushFront(&cacheEntry{name, size})
	c.size += size
}

// drop forgets a chunk that is gone.
func (c *ChunkCache) drop(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.entries[name]; ok {
		c.size -= e.Value.(*cacheEntry).size
		c.lru.Remove(e)
		delete(c.entries, name)
	}
}

// evict removes the least recently used chunks until the cache fits its
// bound; c.mu is held.
func (c *ChunkCache) evict() {
	for c.size > c.limit {
		e := c.lru.Back()
		ce := e.Value.(*cacheEntry)
		os.Remove(filepath.Join(c.dir, ce.name))
		c.size -= ce.size
		c.lru.Remove(e)
		delete(c.entries, ce.name)
	}
}
