package blobstore

import (
	"bufio"
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
	"time"

	"github.com/gantry-build/gantry/internal/digest"
)

// smallBlob is the size up to which a Disk writer keeps the data in memory
// and, once verified, writes it straight to its final name. Larger blobs
// stream to a temporary file that is renamed into place. Creating a file
// costs far more than writing a small one, so small blobs save the
// temporary file and the rename.
const smallBlob = 1 << 20

// Disk is a Store of one file per blob under a directory, bounded in bytes
// with LRU eviction. A blob's file appears under its final name only with
// verified contents: small blobs are verified in memory before they are
// written, large ones are written to a temporary file and renamed into
// place. A file of the wrong size (a write cut short by a crash) is
// dropped at start, when the index is rebuilt from the directory in
// modification-time order.
type Disk struct {
	root     string
	tmp      string
	maxBytes int64
	fsync    bool
	dirs     sync.Map // prefix dirs known to exist

	mu      sync.Mutex
	total   int64
	lru     *list.List // of digest.Digest, most recently used at the front
	index   map[digest.Digest]*list.Element
	evicted int64
	// busy marks digests whose file is being created or removed outside
	// the lock; the channel is closed when that is over. A digest is never
	// both indexed and busy.
	busy map[digest.Digest]chan struct{}
}

var _ Store = (*Disk)(nil)

// DiskOptions tune a Disk store.
type DiskOptions struct {
	// MaxBytes bounds the bytes held; 0 means unbounded.
	MaxBytes int64
	// Fsync makes Commit flush each blob to stable storage before it
	// becomes visible (slower; protects against power loss, not just crashes).
	Fsync bool
}

// NewDisk opens (creating if needed) a disk store rooted at dir.
func NewDisk(dir string, opts DiskOptions) (*Disk, error) {
	s := &Disk{
		root:     dir,
		tmp:      filepath.Join(dir, "tmp"),
		maxBytes: opts.MaxBytes,
		fsync:    opts.Fsync,
		lru:      list.New(),
		index:    make(map[digest.Digest]*list.Element),
		busy:     make(map[digest.Digest]chan struct{}),
	}
	if err := os.RemoveAll(s.tmp); err != nil {
		return nil, fmt.Errorf("clearing %s: %w", s.tmp, err)
	}
	if err := os.MkdirAll(s.tmp, 0o755); err != nil {
		return nil, fmt.Errorf("creating blob store directory: %w", err)
	}
	if err := s.load(); err != nil {
		return nil, err
	}
	return s, nil
}

// load rebuilds the index from the files on disk.
func (s *Disk) load() error {
	type found struct {
		d     digest.Digest
		mtime time.Time
	}
	var all []found
	for _, fn := range digest.Supported {
		base := filepath.Join(s.root, digest.Name(fn))
		err := filepath.WalkDir(base, func(path string, de fs.DirEntry, err error) error {
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					return nil
				}
				return err
			}
			if de.IsDir() {
				return nil
			}
			hash, sizeStr, ok := strings.Cut(de.Name(), "-")
			size, perr := strconv.ParseInt(sizeStr, 10, 64)
			d, derr := digest.Parse(fn, hash, size)
			info, ierr := de.Info()
			if !ok || perr != nil || derr != nil || ierr != nil || info.Size() != size ||
				!info.Mode().IsRegular() || path != s.path(d) {
				// Not a blob this store wrote, or a damaged one: drop it.
				return os.Remove(path)
			}
			all = append(all, found{d, info.ModTime()})
			return nil
		})
		if err != nil {
			return fmt.Errorf("scanning blob store %s: %w", base, err)
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].mtime.After(all[j].mtime) })
	for _, f := range all {
		s.index[f.d] = s.lru.PushBack(f.d)
		s.total += f.d.Size
	}
	for _, d := range s.evictLocked() {
		os.Remove(s.path(d))
		delete(s.busy, d)
	}
	return nil
}

func (s *Disk) path(d digest.Digest) string {
	return filepath.Join(s.root, digest.Name(d.Function), d.Hash[:2], d.Hash+"-"+strconv.FormatInt(d.Size, 10))
}

// FindMissing implements Store.
func (s *Disk) FindMissing(_ context.Context, ds []digest.Digest) ([]digest.Digest, error) {
	var missing []digest.Digest
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, d := range ds {
		if e, ok := s.index[d]; ok {
			s.lru.MoveToFront(e)
		} else if !d.IsEmpty() {
			missing = append(missing, d)
		}
	}
	return missing, nil
}

// Open implements Store.
func (s *Disk) Open(_ context.Context, d digest.Digest, offset int64) (io.ReadCloser, error) {
	if d.IsEmpty() {
		return emptyReader(), nil
	}
	if offset < 0 {
		return nil, negativeOffset(d, offset)
	}
	for attempt := 0; ; attempt++ {
		if !s.touch(d) {
			return nil, ErrNotFound
		}
		f, err := os.Open(s.path(d))
		if err == nil {
			info, serr := f.Stat()
			if serr == nil && info.Size() == d.Size {
				if offset > 0 {
					if _, err := f.Seek(offset, io.SeekStart); err != nil {
						f.Close()
						return nil, fmt.Errorf("reading blob %s at offset %d: %w", d, offset, err)
					}
				}
				return f, nil
			}
			f.Close()
			if serr != nil {
				return nil, fmt.Errorf("opening blob %s: %w", d, serr)
			}
		} else if !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("opening blob %s: %w", d, err)
		}
		// The file is missing or incomplete: between the lookup and the
		// open, the blob was evicted and is being stored again. Wait for
		// that and look again; if it persists, the file was damaged.
		if attempt == 2 {
			s.forget(d)
			return nil, ErrNotFound
		}
		s.waitIdle(d)
	}
}

// touch marks d as recently used and reports whether it is indexed.
func (s *Disk) touch(d digest.Digest) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.index[d]
	if ok {
		s.lru.MoveToFront(e)
	}
	return ok
}

// waitIdle waits until no file operation on d is in progress.
func (s *Disk) waitIdle(d digest.Digest) {
	s.mu.Lock()
	for {
		ch, busy := s.busy[d]
		if !busy {
			break
		}
		s.mu.Unlock()
		<-ch
		s.mu.Lock()
	}
	s.mu.Unlock()
}

// forget drops d from the index after its file was found missing or of
// the wrong size (an operator removed or damaged it). The file is looked
// at again under the lock: if it is right, the index is right.
func (s *Disk) forget(d digest.Digest) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.index[d]; ok {
		if info, err := os.Stat(s.path(d)); err == nil && info.Size() == d.Size {
			return
		}
		s.lru.Remove(e)
		delete(s.index, d)
		s.total -= d.Size
	}
}

// claim waits until no file operation on d is in progress. If d is then
// indexed, it marks it used and returns false: there is nothing to write.
// Otherwise it marks d busy and returns true; the caller must call
// release.
func (s *Disk) claim(d digest.Digest) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		if e, ok := s.index[d]; ok {
			s.lru.MoveToFront(e)
			return false
		}
		ch, busy := s.busy[d]
		if !busy {
			s.busy[d] = make(chan struct{})
			return true
		}
		s.mu.Unlock()
		<-ch
		s.mu.Lock()
	}
}

// release ends a claim on d, indexing d if its file is now in place, and
// evicts what no longer fits.
func (s *Disk) release(d digest.Digest, stored bool) {
	s.mu.Lock()
	var victims []digest.Digest
	if stored {
		s.index[d] = s.lru.PushFront(d)
		s.total += d.Size
		victims = s.evictLocked()
	}
	close(s.busy[d])
	delete(s.busy, d)
	s.mu.Unlock()
	s.remove(victims)
}

// evictLocked drops least recently used blobs from the index until the
// store fits its bound, and marks them busy; the caller must remove their
// files with remove once it has released the lock.
func (s *Disk) evictLocked() []digest.Digest {
	var victims []digest.Digest
	for s.maxBytes > 0 && s.total > s.maxBytes && s.lru.Len() > 1 {
		back := s.lru.Back()
		d := back.Value.(digest.Digest)
		s.lru.Remove(back)
		delete(s.index, d)
		s.total -= d.Size
		s.evicted++
		s.busy[d] = make(chan struct{})
		victims = append(victims, d)
	}
	return victims
}

// remove unlinks evicted blobs' files, outside the lock. Open readers keep
// their file: unlinking only drops the name.
func (s *Disk) remove(victims []digest.Digest) {
	for _, d := range victims {
		os.Remove(s.path(d))
		s.mu.Lock()
		close(s.busy[d])
		delete(s.busy, d)
		s.mu.Unlock()
	}
}

// ensureDir creates the directory of a blob's file if it is new.
func (s *Disk) ensureDir(path string) error {
	dir := filepath.Dir(path)
	if _, ok := s.dirs.Load(dir); ok {
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating blob directory: %w", err)
	}
	s.dirs.Store(dir, true)
	return nil
}

// Create implements Store.
func (s *Disk) Create(_ context.Context, d digest.Digest) (Writer, error) {
	w := &diskWriter{s: s, v: newVerifier(d)}
	if d.Size <= smallBlob {
		w.buf = make([]byte, 0, d.Size)
		return w, nil
	}
	f, err := os.CreateTemp(s.tmp, "w")
	if err != nil {
		return nil, fmt.Errorf("creating temporary blob file: %w", err)
	}
	w.f = f
	// Clients stream in chunks as small as 16 KiB (Bazel); gathering them
	// saves a system call per chunk.
	w.bw = bufio.NewWriterSize(f, writeBuffer)
	return w, nil
}

// writeBuffer is the size of the writes to a large blob's file.
const writeBuffer = 1 << 20

// diskWriter writes one blob: into buf if it is small, else through bw
// into the temporary file f.
type diskWriter struct {
	s    *Disk
	v    verifier
	buf  []byte
	f    *os.File
	bw   *bufio.Writer
	done bool // committed or closed
}

func (w *diskWriter) Write(p []byte) (int, error) {
	if w.done {
		return 0, errWriterDone
	}
	if err := w.v.write(p); err != nil {
		return 0, err
	}
	if w.f == nil {
		w.buf = append(w.buf, p...)
		return len(p), nil
	}
	return w.bw.Write(p)
}

func (w *diskWriter) Written() int64 { return w.v.n }

func (w *diskWriter) Commit() error {
	if w.done {
		return errWriterDone
	}
	if err := w.v.check(); err != nil {
		return err
	}
	d := w.v.want
	if w.f == nil {
		w.done = true
		err := w.s.writeSmall(d, w.buf)
		w.buf = nil
		return err
	}
	if err := w.bw.Flush(); err != nil {
		return fmt.Errorf("writing blob %s: %w", d, err)
	}
	if w.s.fsync {
		if err := w.f.Sync(); err != nil {
			return fmt.Errorf("flushing blob %s: %w", d, err)
		}
	}
	if err := w.f.Close(); err != nil {
		return fmt.Errorf("writing blob %s: %w", d, err)
	}
	w.done = true
	err := w.s.renameIn(d, w.f.Name())
	if err != nil {
		os.Remove(w.f.Name())
	}
	return err
}

func (w *diskWriter) Close() error {
	if w.done {
		return nil
	}
	w.done = true
	w.buf = nil
	if w.f == nil {
		return nil
	}
	w.f.Close()
	return os.Remove(w.f.Name())
}

// writeSmall writes verified data to d's final name and indexes it.
func (s *Disk) writeSmall(d digest.Digest, data []byte) (err error) {
	if d.IsEmpty() || !s.claim(d) {
		return nil
	}
	stored := false
	defer func() { s.release(d, stored) }()
	final := s.path(d)
	if err := s.ensureDir(final); err != nil {
		return err
	}
	// Readers find the file through the index, which it joins once
	// complete, and check its size; a crash midway leaves a short file
	// that start-up drops. A new inode, never a truncated one, so that
	// readers of an older file under this name keep their data.
	f, err := os.OpenFile(final, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if errors.Is(err, fs.ErrExist) {
		// A leftover nobody indexes (a failed removal): replace it.
		os.Remove(final)
		f, err = os.OpenFile(final, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	}
	if err != nil {
		return fmt.Errorf("creating blob file: %w", err)
	}
	_, err = f.Write(data)
	if err == nil && s.fsync {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = s.syncDir(final)
	}
	if err != nil {
		os.Remove(final)
		return fmt.Errorf("writing blob %s: %w", d, err)
	}
	stored = true
	return nil
}

// syncDir flushes the directory entry of a new file when the store was
// asked to survive power loss.
func (s *Disk) syncDir(path string) error {
	if !s.fsync {
		return nil
	}
	dir, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer dir.Close()
	return dir.Sync()
}

// renameIn moves a verified temporary file to d's final name and indexes
// it.
func (s *Disk) renameIn(d digest.Digest, tmpName string) error {
	if d.IsEmpty() || !s.claim(d) {
		return os.Remove(tmpName)
	}
	stored := false
	defer func() { s.release(d, stored) }()
	final := s.path(d)
	if err := s.ensureDir(final); err != nil {
		return err
	}
	if err := os.Rename(tmpName, final); err != nil {
		return fmt.Errorf("storing blob %s: %w", d, err)
	}
	if err := s.syncDir(final); err != nil {
		os.Remove(final)
		return fmt.Errorf("storing blob %s: %w", d, err)
	}
	stored = true
	return nil
}

// Stats reports the number of blobs and bytes held.
func (s *Disk) Stats() (blobs int, bytes int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.index), s.total
}

// Evicted reports how many blobs eviction has removed since start.
func (s *Disk) Evicted() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.evicted
}
