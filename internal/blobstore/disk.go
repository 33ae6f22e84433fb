package blobstore

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
	"time"

	"github.com/gantry-build/gantry/internal/digest"
)

// Disk is a Store of one file per blob under a directory, bounded in bytes
// with LRU eviction. Blobs are written to a temporary file and renamed into
// place once verified, so a crash never leaves a partial blob visible. The
// index is rebuilt from the directory at start, in modification-time order.
type Disk struct {
	root     string
	tmp      string
	maxBytes int64
	fsync    bool

	mu      sync.Mutex
	total   int64
	lru     *list.List // of *diskEntry, most recently used at the front
	index   map[digest.Digest]*list.Element
	dirs    sync.Map // prefix dirs known to exist
	evicted int64
}

type diskEntry struct {
	d digest.Digest
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
			if !ok || perr != nil || derr != nil || ierr != nil || info.Size() != size {
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
		s.index[f.d] = s.lru.PushBack(&diskEntry{d: f.d})
		s.total += f.d.Size
	}
	s.evictLocked()
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
	s.mu.Lock()
	e, ok := s.index[d]
	if ok {
		s.lru.MoveToFront(e)
	}
	s.mu.Unlock()
	if !ok {
		return nil, ErrNotFound
	}
	f, err := os.Open(s.path(d))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			s.forget(d)
			return nil, ErrNotFound
		}
		return nil, err
	}
	if offset > 0 {
		if _, err := f.Seek(offset, io.SeekStart); err != nil {
			f.Close()
			return nil, err
		}
	}
	return f, nil
}

// forget drops d from the index after its file was found missing.
func (s *Disk) forget(d digest.Digest) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.index[d]; ok {
		s.lru.Remove(e)
		delete(s.index, d)
		s.total -= d.Size
	}
}

// Create implements Store.
func (s *Disk) Create(_ context.Context, d digest.Digest) (Writer, error) {
	f, err := os.CreateTemp(s.tmp, "w")
	if err != nil {
		return nil, fmt.Errorf("creating temporary blob file: %w", err)
	}
	return &diskWriter{s: s, f: f, v: newVerifier(d)}, nil
}

type diskWriter struct {
	s    *Disk
	f    *os.File
	v    verifier
	done bool
}

func (w *diskWriter) Write(p []byte) (int, error) {
	if err := w.v.write(p); err != nil {
		return 0, err
	}
	return w.f.Write(p)
}

func (w *diskWriter) Written() int64 { return w.v.n }

func (w *diskWriter) Commit() error {
	if w.done {
		return errors.New("blob writer already closed")
	}
	if err := w.v.check(); err != nil {
		return err
	}
	if w.s.fsync {
		if err := w.f.Sync(); err != nil {
			return err
		}
	}
	if err := w.f.Close(); err != nil {
		return err
	}
	w.done = true
	tmpName := w.f.Name()
	err := w.s.insert(w.v.want, tmpName)
	if err != nil {
		os.Remove(tmpName)
	}
	return err
}

func (w *diskWriter) Close() error {
	if w.done {
		return nil
	}
	w.done = true
	w.f.Close()
	return os.Remove(w.f.Name())
}

// insert moves a verified temporary file into place and indexes it.
func (s *Disk) insert(d digest.Digest, tmpName string) error {
	if d.IsEmpty() {
		return os.Remove(tmpName)
	}
	final := s.path(d)
	dir := filepath.Dir(final)
	if _, ok := s.dirs.Load(dir); !ok {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		s.dirs.Store(dir, true)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.index[d]; ok {
		s.lru.MoveToFront(e)
		return os.Remove(tmpName)
	}
	// The rename happens under the lock so that eviction of the same
	// digest cannot unlink the file between rename and indexing.
	if err := os.Rename(tmpName, final); err != nil {
		return err
	}
	s.index[d] = s.lru.PushFront(&diskEntry{d: d})
	s.total += d.Size
	s.evictLocked()
	return nil
}

func (s *Disk) evictLocked() {
	for s.maxBytes > 0 && s.total > s.maxBytes && s.lru.Len() > 1 {
		back := s.lru.Back()
		d := back.Value.(*diskEntry).d
		s.lru.Remove(back)
		delete(s.index, d)
		s.total -= d.Size
		s.evicted++
		// Open readers keep their file: unlinking only drops the name.
		os.Remove(s.path(d))
	}
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
