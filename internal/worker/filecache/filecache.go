// Package filecache keeps a worker-local, content-addressed cache of CAS
// blobs as read-only files on disk, so that input files can be hardlinked
// into execution roots instead of being downloaded for every action.
//
// Each entry is one file named after its digest. Executable and
// non-executable variants of the same blob are separate entries (a hardlink
// shares its mode with every other link, so the two cannot share an inode).
// Entries are reference counted: Acquire and Link take a reference that the
// caller drops with the returned release function. Only unreferenced entries
// are evicted, least recently used first, when the cache holds more than its
// byte budget.
//
// Concurrent requests for an entry that is not yet on disk share a single
// download. Downloads are verified against the digest before they become
// visible, so a corrupt transfer is never cached.
//
// The cache survives restarts: New rescans the directory and adopts every
// well-formed entry (name, size and mode are checked; content is not
// re-hashed), deleting anything else.
//
// Hardlinked inputs share their inode with the cache. An action running as
// root can write to a read-only file, so when the last reference to an entry
// is released the cache checks that the file's size, mode and modification
// time are unchanged and drops the entry if they are not. Run actions as an
// unprivileged user (see runner.Spec.Wrapper) to prevent such writes
// altogether.
package filecache

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gantry-build/gantry/internal/blobstore"
	"github.com/gantry-build/gantry/internal/digest"
)

// File modes of cached entries.
const (
	modeRegular    fs.FileMode = 0o444
	modeExecutable fs.FileMode = 0o555
)

// tmpDirName is the directory, under the cache root, where downloads are
// written before they are verified and renamed into place.
const tmpDirName = "tmp"

// Cache is a content-addressed file cache on local disk. It is safe for
// concurrent use.
type Cache struct {
	dir      string
	tmp      string
	maxBytes int64
	cas      blobstore.Store
	// large fetches blobs of at least largeFrom bytes (nil: none), for
	// example from their chunks.
	large     LargeReader
	largeFrom int64

	mu      sync.Mutex
	entries map[key]*entry
	lru     *list.List // unreferenced ready entries, most recently used at the front
	total   int64      // bytes of ready entries
	stats   Stats
}

type key struct {
	d    digest.Digest
	exec bool
}

// entry is one cached file. All fields are guarded by Cache.mu.
type entry struct {
	key   key
	path  string
	refs  int
	elem  *list.Element // in Cache.lru while ready and unreferenced
	ready bool

	// Set while the file is being downloaded.
	flight *flight

	// Recorded when the file became ready, to detect writes through
	// hardlinks.
	mtime time.Time
}

// flight is a download in progress that any number of Acquire calls wait for.
type flight struct {
	done      chan struct{}
	err       error
	cancel    context.CancelFunc
	abandoned bool // every waiter gave up; the result is discarded
}

// Stats is a snapshot of the cache's state and counters.
type Stats struct {
	// Entries and Bytes count files on disk and ready for use.
	Entries int
	Bytes   int64
	// MaxBytes is the byte budget (0 means unbounded).
	MaxBytes int64
	// Referenced is the number of ready entries with at least one reference.
	Referenced int
	// Downloading is the number of downloads in progress and Waiting the
	// number of Acquire calls waiting for one of them.
	Downloading int
	Waiting     int

	// Hits counts Acquire calls served by an entry already on disk (or
	// already being downloaded); Misses those that started a download.
	Hits   int64
	Misses int64
	// Downloads and DownloadedBytes count completed, verified downloads;
	// DownloadErrors failed ones (including corrupt content).
	Downloads       int64
	DownloadedBytes int64
	DownloadErrors  int64
	// Evictions counts entries removed to stay within MaxBytes; Dropped
	// entries found modified (written through a hardlink) or deleted
	// behind the cache's back.
	Evictions int64
	Dropped   int64
	// CopyFallbacks counts Link calls that copied because a hardlink was
	// impossible (another file system, or too many links).
	CopyFallbacks int64
}

// LargeReader writes a large blob to w another way than a whole-blob
// read: client.Chunked's ReadTo fetches only the chunks not already held.
// ReadTo checks what it wrote against the digest and fails if it does not
// match (the cache then discards the file); w is the cache's temporary
// file, so a reader may rewind it and write again.
type LargeReader interface {
	ReadTo(ctx context.Context, d digest.Digest, w io.Writer) error
}

// New opens the cache rooted at dir, creating the directory if needed and
// adopting the entries a previous run left there. maxBytes bounds the bytes
// of unreferenced entries kept; 0 or less means unbounded. Referenced
// entries are never evicted, so the cache can exceed maxBytes while they are
// in use.
func New(dir string, maxBytes int64, cas blobstore.Store) (*Cache, error) {
	return NewWithLarge(dir, maxBytes, cas, nil, 0)
}

// NewWithLarge is New with blobs of at least largeFrom bytes fetched
// through large (nil: none are).
func NewWithLarge(dir string, maxBytes int64, cas blobstore.Store, large LargeReader, largeFrom int64) (*Cache, error) {
	if cas == nil {
		return nil, errors.New("filecache: no CAS given; pass the blobstore.Store to download blobs from")
	}
	if maxBytes < 0 {
		maxBytes = 0
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("filecache: resolving cache directory %q: %w", dir, err)
	}
	c := &Cache{
		dir:      abs,
		tmp:      filepath.Join(abs, tmpDirName),
		maxBytes: maxBytes,
		cas:      cas,
		large:    large, largeFrom: largeFrom,
		entries: make(map[key]*entry),
		lru:     list.New(),
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return nil, fmt.Errorf("filecache: creating cache directory: %w", err)
	}
	if err := os.RemoveAll(c.tmp); err != nil {
		return nil, fmt.Errorf("filecache: clearing leftover downloads in %s: %w", c.tmp, err)
	}
	if err := os.MkdirAll(c.tmp, 0o755); err != nil {
		return nil, fmt.Errorf("filecache: creating %s: %w", c.tmp, err)
	}
	if err := c.load(); err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.evictLocked()
	c.mu.Unlock()
	return c, nil
}

// Dir returns the cache's root directory.
func (c *Cache) Dir() string { return c.dir }

// pathFor returns where the entry for k lives:
// {dir}/{function}/{hash[:2]}/{hash}-{size}[-x].
func (c *Cache) pathFor(k key) string {
	name := k.d.Hash + "-" + strconv.FormatInt(k.d.Size, 10)
	if k.exec {
		name += "-x"
	}
	return filepath.Join(c.dir, digest.Name(k.d.Function), k.d.Hash[:2], name)
}

// parseName is the inverse of pathFor for the last three path elements.
func parseName(fnName, prefix, name string) (key, bool) {
	var fn digest.Function
	found := false
	for _, f := range digest.Supported {
		if digest.Name(f) == fnName {
			fn, found = f, true
		}
	}
	if !found {
		return key{}, false
	}
	exec := false
	if s, ok := strings.CutSuffix(name, "-x"); ok {
		exec, name = true, s
	}
	hash, sizeStr, ok := strings.Cut(name, "-")
	if !ok {
		return key{}, false
	}
	size, err := strconv.ParseInt(sizeStr, 10, 64)
	if err != nil || strconv.FormatInt(size, 10) != sizeStr {
		return key{}, false
	}
	d, err := digest.Parse(fn, hash, size)
	if err != nil || len(hash) < 2 || hash[:2] != prefix {
		return key{}, false
	}
	return key{d: d, exec: exec}, true
}

// load adopts the well-formed entries under c.dir and removes the rest.
// Entries are ordered for eviction by modification time (the time they were
// downloaded), oldest first.
func (c *Cache) load() error {
	type found struct {
		k     key
		mtime time.Time
	}
	var all []found
	err := filepath.WalkDir(c.dir, func(p string, de fs.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("filecache: scanning %s: %w", p, err)
		}
		rel, _ := filepath.Rel(c.dir, p)
		if rel == "." {
			return nil
		}
		parts := strings.Split(rel, string(filepath.Separator))
		if parts[0] == tmpDirName {
			return fs.SkipDir
		}
		if de.IsDir() {
			if len(parts) <= 2 {
				return nil
			}
			// Too deep to be part of the layout.
			return removeAllLogged(p)
		}
		if len(parts) != 3 {
			return removeLogged(p)
		}
		k, ok := parseName(parts[0], parts[1], parts[2])
		if !ok {
			return removeLogged(p)
		}
		info, err := de.Info()
		if err != nil {
			return removeLogged(p)
		}
		want := modeRegular
		if k.exec {
			want = modeExecutable
		}
		if !info.Mode().IsRegular() || info.Mode().Perm() != want || info.Size() != k.d.Size {
			return removeLogged(p)
		}
		all = append(all, found{k: k, mtime: info.ModTime()})
		return nil
	})
	if err != nil {
		return err
	}
	sort.SliceStable(all, func(i, j int) bool { return all[i].mtime.Before(all[j].mtime) })
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, f := range all {
		e := &entry{key: f.k, path: c.pathFor(f.k), ready: true, mtime: f.mtime}
		e.elem = c.lru.PushFront(e)
		c.entries[f.k] = e
		c.total += f.k.d.Size
	}
	return nil
}

func removeLogged(p string) error {
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("filecache: removing malformed cache file %s: %w; remove it by hand or clear the cache directory", p, err)
	}
	return nil
}

func removeAllLogged(p string) error {
	if err := os.RemoveAll(p); err != nil {
		return fmt.Errorf("filecache: removing unexpected directory %s: %w; remove it by hand or clear the cache directory", p, err)
	}
	return fs.SkipDir
}

// Acquire returns the path of a read-only file holding blob d (mode 0555 if
// executable, else 0444), downloading it from the CAS if it is not cached.
// The file stays in the cache until release is called; release may be
// called more than once. Callers must not modify or remove the file.
//
// A blob the CAS does not have yields an error matching
// blobstore.ErrNotFound (errors.Is). If ctx ends while waiting, Acquire
// returns ctx's error; the download continues as long as another caller
// waits for it.
func (c *Cache) Acquire(ctx context.Context, d digest.Digest, executable bool) (string, func(), error) {
	if !digest.IsSupported(d.Function) || len(d.Hash) != digest.HexLen(d.Function) || d.Size < 0 {
		return "", nil, fmt.Errorf("filecache: invalid digest %s; pass a digest validated by digest.Parse or digest.FromProto", d)
	}
	if err := ctx.Err(); err != nil {
		return "", nil, err
	}
	k := key{d: d, exec: executable}

	c.mu.Lock()
	e, ok := c.entries[k]
	if ok && e.ready {
		c.refLocked(e)
		c.stats.Hits++
		c.mu.Unlock()
		return e.path, c.releaseFunc(e), nil
	}
	var f *flight
	if ok {
		c.stats.Hits++
		f = e.flight
		e.refs++
	} else {
		c.stats.Misses++
		dctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		f = &flight{done: make(chan struct{}), cancel: cancel}
		e = &entry{key: k, path: c.pathFor(k), refs: 1, flight: f}
		c.entries[k] = e
		go c.download(dctx, e, f)
	}
	c.mu.Unlock()

	select {
	case <-f.done:
		if f.err != nil {
			// The failed entry was already removed from the index.
			return "", nil, f.err
		}
		return e.path, c.releaseFunc(e), nil
	case <-ctx.Done():
		c.mu.Lock()
		select {
		case <-f.done:
			// The download finished while we were giving up: keep its
			// result consistent by releasing the reference we hold.
			c.mu.Unlock()
			if f.err == nil {
				c.releaseFunc(e)()
			}
			return "", nil, ctx.Err()
		default:
		}
		e.refs--
		if e.refs == 0 {
			// Nobody wants this download any more.
			f.abandoned = true
			f.cancel()
			if c.entries[k] == e {
				delete(c.entries, k)
			}
		}
		c.mu.Unlock()
		return "", nil, ctx.Err()
	}
}

// Holds reports whether blob d, with that executable bit, is in the
// cache and ready, so that Acquire would not download it (unless it is
// evicted first, which no caller can rule out: Acquire then downloads it).
func (c *Cache) Holds(d digest.Digest, executable bool) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[key{d: d, exec: executable}]
	return ok && e.ready
}

// refLocked adds a reference to a ready entry.
func (c *Cache) refLocked(e *entry) {
	e.refs++
	if e.elem != nil {
		c.lru.Remove(e.elem)
		e.elem = nil
	}
}

// releaseFunc returns an idempotent function dropping one reference to e.
func (c *Cache) releaseFunc(e *entry) func() {
	var once sync.Once
	return func() { once.Do(func() { c.release(e) }) }
}

func (c *Cache) release(e *entry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e.refs--
	if e.refs > 0 || c.entries[e.key] != e {
		return
	}
	if !c.intactLocked(e) {
		c.dropLocked(e)
		c.stats.Dropped++
		return
	}
	e.elem = c.lru.PushFront(e)
	c.evictLocked()
}

// intactLocked reports whether e's file still looks as it did when it was
// cached.
func (c *Cache) intactLocked(e *entry) bool {
	info, err := os.Lstat(e.path)
	if err != nil {
		return false
	}
	want := modeRegular
	if e.key.exec {
		want = modeExecutable
	}
	return info.Mode().IsRegular() && info.Mode().Perm() == want &&
		info.Size() == e.key.d.Size && info.ModTime().Equal(e.mtime)
}

// dropLocked removes an unreferenced entry and its file.
func (c *Cache) dropLocked(e *entry) {
	if e.elem != nil {
		c.lru.Remove(e.elem)
		e.elem = nil
	}
	delete(c.entries, e.key)
	c.total -= e.key.d.Size
	_ = os.Remove(e.path) // a failure leaves a file that the next New adopts or deletes
}

// evictLocked removes least recently used unreferenced entries until the
// total fits the budget.
func (c *Cache) evictLocked() {
	for c.maxBytes > 0 && c.total > c.maxBytes {
		back := c.lru.Back()
		if back == nil {
			return
		}
		c.dropLocked(back.Value.(*entry))
		c.stats.Evictions++
	}
}

// download fetches e's blob into a temporary file, verifies it and moves it
// into place, then wakes every waiter.
func (c *Cache) download(ctx context.Context, e *entry, f *flight) {
	defer f.cancel()
	tmp, err := c.fetch(ctx, e.key)

	c.mu.Lock()
	defer c.mu.Unlock()
	defer close(f.done)
	if err == nil && f.abandoned {
		err = context.Canceled
	}
	if err == nil {
		err = os.MkdirAll(filepath.Dir(e.path), 0o755)
		if err == nil {
			err = os.Rename(tmp, e.path)
		}
		if err != nil {
			err = fmt.Errorf("filecache: moving download of %s into %s: %w", e.key.d, e.path, err)
		}
	}
	var info fs.FileInfo
	if err == nil {
		info, err = os.Lstat(e.path)
	}
	if err != nil {
		if tmp != "" {
			_ = os.Remove(tmp)
		}
		if !f.abandoned {
			c.stats.DownloadErrors++
		}
		f.err = err
		if c.entries[e.key] == e {
			delete(c.entries, e.key)
		}
		return
	}
	e.mtime = info.ModTime()
	e.ready = true
	e.flight = nil
	c.total += e.key.d.Size
	c.stats.Downloads++
	c.stats.DownloadedBytes += e.key.d.Size
	if e.refs == 0 {
		e.elem = c.lru.PushFront(e)
	}
	c.evictLocked()
}

// fetch writes blob k.d into a new temporary file with k's mode and returns
// its path. The content is verified against the digest.
func (c *Cache) fetch(ctx context.Context, k key) (_ string, err error) {
	fl, err := os.CreateTemp(c.tmp, "dl-*")
	if err != nil {
		return "", fmt.Errorf("filecache: creating a temporary file in %s: %w", c.tmp, err)
	}
	tmp := fl.Name()
	defer func() {
		if fl != nil {
			fl.Close()
		}
		if err != nil {
			os.Remove(tmp)
		}
	}()
	if c.large != nil && k.d.Size >= c.largeFrom && !k.d.IsEmpty() {
		if err := c.large.ReadTo(ctx, k.d, fl); err != nil {
			if errors.Is(err, blobstore.ErrNotFound) {
				return "", fmt.Errorf("filecache: blob %s is not in the CAS: %w", k.d, err)
			}
			return "", fmt.Errorf("filecache: downloading blob %s: %w", k.d, err)
		}
		if info, err := fl.Stat(); err != nil || info.Size() != k.d.Size {
			return "", fmt.Errorf("filecache: blob %s: the download left a file of the wrong size (%v); upload the blob again", k.d, err)
		}
	} else if !k.d.IsEmpty() {
		r, err := c.cas.Open(ctx, k.d, 0)
		if err != nil {
			if errors.Is(err, blobstore.ErrNotFound) {
				return "", fmt.Errorf("filecache: blob %s is not in the CAS: %w", k.d, err)
			}
			return "", fmt.Errorf("filecache: opening blob %s in the CAS: %w", k.d, err)
		}
		h := digest.NewHasher(k.d.Function)
		// Read one byte more than expected to notice an over-long blob.
		n, err := io.Copy(io.MultiWriter(fl, h), io.LimitReader(r, k.d.Size+1))
		r.Close()
		if err != nil {
			return "", fmt.Errorf("filecache: downloading blob %s: %w", k.d, err)
		}
		if n != k.d.Size {
			return "", fmt.Errorf("filecache: blob %s: the CAS returned %d bytes, the digest says %d; the stored blob is corrupt, upload it again", k.d, n, k.d.Size)
		}
		if got := digest.HexOf(h.Sum(nil)); got != k.d.Hash {
			return "", fmt.Errorf("filecache: blob %s: the CAS returned data hashing to %s; the stored blob is corrupt, upload it again", k.d, got)
		}
	}
	mode := modeRegular
	if k.exec {
		mode = modeExecutable
	}
	if err := fl.Chmod(mode); err != nil {
		return "", fmt.Errorf("filecache: setting the mode of %s: %w", tmp, err)
	}
	if err := fl.Close(); err != nil {
		fl = nil
		return "", fmt.Errorf("filecache: writing %s: %w", tmp, err)
	}
	fl = nil
	return tmp, nil
}

// linkFile is os.Link; tests replace it to simulate EXDEV and EMLINK.
var linkFile = os.Link

// Link places blob d at dst, which must not exist, as a hardlink to the
// cached file (so it is read-only, with mode 0555 or 0444). If a hardlink is
// impossible (dst is on another file system, or the cached file has too
// many links) the content is copied instead. The returned release drops the
// cache reference that the link holds; call it once dst is no longer used
// (removing dst is the caller's business).
func (c *Cache) Link(ctx context.Context, d digest.Digest, executable bool, dst string) (func(), error) {
	for attempt := 0; ; attempt++ {
		src, release, err := c.Acquire(ctx, d, executable)
		if err != nil {
			return nil, err
		}
		err = linkFile(src, dst)
		if err == nil {
			return release, nil
		}
		if errors.Is(err, syscall.EXDEV) || errors.Is(err, syscall.EMLINK) {
			err = copyFile(src, dst)
			release()
			if err != nil {
				return nil, err
			}
			c.mu.Lock()
			c.stats.CopyFallbacks++
			c.mu.Unlock()
			return func() {}, nil
		}
		if _, serr := os.Lstat(src); attempt == 0 && errors.Is(serr, fs.ErrNotExist) {
			// The cached file was deleted behind our back: forget it
			// and download again.
			c.invalidate(key{d: d, exec: executable})
			release()
			continue
		}
		release()
		return nil, fmt.Errorf("filecache: linking blob %s to %s: %w", d, dst, err)
	}
}

// invalidate forgets a ready entry whose file went missing. References
// already handed out stay valid (their release finds the entry gone).
func (c *Cache) invalidate(k key) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[k]
	if !ok || !e.ready {
		return
	}
	if e.elem != nil {
		c.lru.Remove(e.elem)
		e.elem = nil
	}
	delete(c.entries, k)
	c.total -= k.d.Size
	c.stats.Dropped++
}

// copyFile copies src to the new file dst, keeping src's permission bits.
func copyFile(src, dst string) (err error) {
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("filecache: copying %s: %w", src, err)
	}
	defer in.Close()
	info, err := in.Stat()
	if err != nil {
		return fmt.Errorf("filecache: copying %s: %w", src, err)
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("filecache: copying to %s: %w", dst, err)
	}
	defer func() {
		if cerr := out.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("filecache: copying to %s: %w", dst, cerr)
		}
		if err != nil {
			os.Remove(dst)
		}
	}()
	if _, err := io.Copy(out, in); err != nil {
		return fmt.Errorf("filecache: copying %s to %s: %w", src, dst, err)
	}
	if err := out.Chmod(info.Mode().Perm()); err != nil {
		return fmt.Errorf("filecache: setting the mode of %s: %w", dst, err)
	}
	return nil
}

// Excess returns how many bytes the cache holds over its budget (0 when
// within it or unbounded). The cache itself evicts only unreferenced
// entries, so an excess means entries are pinned: by running actions, or
// by directory trees kept for reuse (dircache), whose owner then evicts
// idle trees until the excess is gone. It is cheap (no walk of the
// entries).
func (c *Cache) Excess() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.maxBytes <= 0 || c.total <= c.maxBytes {
		return 0
	}
	return c.total - c.maxBytes
}

// Stats returns a snapshot of the cache's state and counters.
func (c *Cache) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.stats
	s.MaxBytes = c.maxBytes
	s.Bytes = c.total
	for _, e := range c.entries {
		switch {
		case e.ready:
			s.Entries++
			if e.refs > 0 {
				s.Referenced++
			}
		case e.flight != nil:
			s.Downloading++
			s.Waiting += e.refs
		}
	}
	return s
}
