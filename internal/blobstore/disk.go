package blobstore

import (
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
	"sync/atomic"
	"time"

	"github.com/gantry-build/gantry/internal/digest"
)

// smallBlob is the size up to which a Disk writer keeps the data in memory
// and, once verified, writes it straight to its final name. Larger blobs
// stream to a temporary file that is renamed into place. Creating a file
// costs far more than writing a small one, so small blobs save the
// temporary file and the rename.
const smallBlob = 1 << 20

// Disk is a Store under a directory, bounded in bytes with (nearly) LRU
// eviction. Blobs up to the pack threshold are appended as records to
// segment files (see pack.go); larger ones get a file each. A blob's file
// appears under its final name only with verified contents: small blobs
// are verified in memory before they are written, large ones are written
// to a temporary file and renamed into place. A file of the wrong size (a
// write cut short by a crash) is dropped at start, when the index is
// rebuilt from the directory and the segments in modification-time order.
type Disk struct {
	root    string
	tmp     string
	fsync   bool
	packMax int64    // blobs up to this size are packed; 0: none
	dirs    sync.Map // prefix dirs known to exist
	// policy says what leaves the store when it is full (see evict.go).
	policy evictionPolicy
	// packs are the segments packed blobs are appended to (see
	// segments.go). Lock order: mu before the segments' own.
	packs *segments
	// spares are evicted blobs' files kept under tmp for new uploads to
	// overwrite (see spare.go).
	spares *spareFiles
	// directMin: blobs of at least this size are written with O_DIRECT
	// (0: never); noDirect is set once the file system refused it.
	directMin int64
	noDirect  atomic.Bool

	mu  sync.Mutex
	idx *blobIndex // guarded by mu
	// removers bounds the evictions being removed in the background (see
	// removeSoon); removing counts them.
	removers chan struct{}
	removing sync.WaitGroup
	// removeHook, if set (by tests), runs before evicted files are
	// unlinked, with whether that happens in the background.
	removeHook func(background bool)
	// sealer flushes the store after large files were written into
	// spares (see seal.go).
	sealer *sealer
	// verified counts the blob files hashed at start (see seal.go).
	verified int
	// life is the promise kept to FindMissing's callers (lifetime.go);
	// ticks maps the use clock to time for it and cut is the clock value
	// before which promises have expired, as of the last eviction; both
	// guarded by mu. refused counts the blobs refused to keep it.
	life    Lifetime
	ticks   tickClock
	cut     uint64
	refused atomic.Int64
}

var (
	_ Trusting           = (*Disk)(nil)
	_ TrustedBatchPutter = (*Disk)(nil)
)

// DiskOptions tune a Disk store.
type DiskOptions struct {
	// MaxBytes bounds the bytes of the blobs held (not counting the
	// headers of packed records); 0 means unbounded.
	MaxBytes int64
	// Fsync makes Commit flush each blob to stable storage before it
	// becomes visible (slower; protects against power loss, not just crashes).
	Fsync bool
	// PackThreshold is the size up to which blobs are appended to segment
	// files instead of getting a file each: 0 means 64 KiB, a negative
	// value disables packing. It is capped at 1 MiB.
	PackThreshold int64
	// SegmentSize is the size of a segment file: 0 means 64 MiB. When
	// MaxBytes is set, segments are at most MaxBytes/16, so that evicting
	// one frees a small part of the store.
	SegmentSize int64
	// DirectIOThreshold is the size from which blobs are written with
	// O_DIRECT, bypassing the page cache, so that huge blobs do not push
	// many small hot ones out of memory. 0 writes every blob through the
	// page cache. Blobs of up to 1 MiB never use it.
	DirectIOThreshold int64
	// Lifetime keeps blobs FindMissing reported present for a while, at
	// the cost of refusing new blobs when nothing else is left to evict.
	Lifetime Lifetime
}

// NewDisk opens (creating if needed) a disk store rooted at dir.
func NewDisk(dir string, opts DiskOptions) (*Disk, error) {
	s := &Disk{
		root:      dir,
		tmp:       filepath.Join(dir, "tmp"),
		policy:    evictionPolicy{maxBytes: opts.MaxBytes},
		fsync:     opts.Fsync,
		packMax:   opts.PackThreshold,
		directMin: max(opts.DirectIOThreshold, 0),
		idx:       newBlobIndex(),
		removers:  make(chan struct{}, backgroundRemovals),
		spares:    newSpareFiles(filepath.Join(dir, "tmp"), max(opts.MaxBytes, 0)/spareShare),
		sealer:    newSealer(dir, filepath.Join(dir, "tmp"), opts.Fsync),
		life:      opts.Lifetime,
		ticks:     newTickClock(opts.Lifetime),
	}
	switch {
	case s.packMax == 0:
		s.packMax = defaultPackThreshold
	case s.packMax < 0:
		s.packMax = 0
	case s.packMax > smallBlob:
		s.packMax = smallBlob
	}
	segSize := opts.SegmentSize
	if segSize <= 0 {
		segSize = defaultSegmentSize
	}
	if opts.MaxBytes > 0 {
		segSize = min(segSize, opts.MaxBytes/minSegmentsPerBound)
	}
	s.packs = newSegments(filepath.Join(dir, "packs"), segSize, opts.Fsync)
	if err := os.RemoveAll(s.tmp); err != nil {
		return nil, fmt.Errorf("clearing %s: %w", s.tmp, err)
	}
	if err := os.MkdirAll(s.tmp, 0o755); err != nil {
		return nil, fmt.Errorf("creating blob store directory: %w", err)
	}
	if err := os.MkdirAll(s.packs.dir, 0o755); err != nil {
		return nil, fmt.Errorf("creating blob store directory: %w", err)
	}
	if err := s.load(); err != nil {
		return nil, err
	}
	if err := s.sealer.recordSeal(); err != nil {
		return nil, err
	}
	return s, nil
}

// loadedBlob is a blob found on disk as the store opens: a file, or a
// record in a segment (seg non-nil, at off).
type loadedBlob struct {
	d     digest.Digest
	mtime time.Time
	seg   *segment
	off   int64
}

// load rebuilds the index from the files and segments on disk.
func (s *Disk) load() error {
	all, err := s.scanFiles()
	if err != nil {
		return err
	}
	recs, err := s.packs.load()
	if err != nil {
		return err
	}
	segs := s.packs.live()
	// A segment's blobs take its modification time; within it, later
	// records are newer (the sort below is stable).
	mtimes := make(map[*segment]time.Time, len(segs))
	for _, g := range segs {
		mtimes[g] = segmentMTime(g)
	}
	for i := len(recs) - 1; i >= 0; i-- {
		r := recs[i]
		all = append(all, loadedBlob{r.d, mtimes[r.seg], r.seg, r.off})
	}
	sort.SliceStable(all, func(i, j int) bool { return all[i].mtime.After(all[j].mtime) })
	for _, f := range all {
		if _, dup := s.idx.get(f.d); dup {
			// An older copy: a record left behind (say, by a crash while
			// its segment was evicted) stays as dead space; a file goes.
			if f.seg == nil {
				os.Remove(s.path(f.d))
			}
			continue
		}
		s.idx.addOldest(newEntry(f.d, f.seg, f.off))
	}
	s.idx.stamp()
	ev := s.evictLocked()
	for _, f := range ev.files {
		os.Remove(s.path(f.d))
		s.idx.idle(f.d)
	}
	for _, g := range ev.segs {
		g.unref()
	}
	return nil
}

// scanFiles lists the blobs stored as files of their own, removing what
// is not a blob this store wrote or is damaged. After a reboot, large
// files renamed since the last seal are hashed (see seal.go).
func (s *Disk) scanFiles() ([]loadedBlob, error) {
	var all []loadedBlob
	cutoff, verify := s.sealer.verifyCutoff()
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
			if verify && size > smallBlob {
				if ct, ok := changeTime(info); !ok || !ct.Before(cutoff) {
					s.verified++
					if !blobMatches(path, d) {
						// Written over an older blob, and only partly
						// flushed when the machine went down.
						return os.Remove(path)
					}
				}
			}
			all = append(all, loadedBlob{d: d, mtime: info.ModTime()})
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("scanning blob store %s: %w", base, err)
		}
	}
	return all, nil
}

func (s *Disk) path(d digest.Digest) string {
	return filepath.Join(s.root, digest.Name(d.Function), d.Hash[:2], d.Hash+"-"+strconv.FormatInt(d.Size, 10))
}

// FindMissing implements Store.
func (s *Disk) FindMissing(_ context.Context, ds []digest.Digest) ([]digest.Digest, error) {
	missing := make([]digest.Digest, 0, len(ds)/4)
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.datedLocked()
	for _, d := range ds {
		if e, ok := s.idx.get(d); ok {
			s.idx.use(e)
			e.promised = true
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
		e, g, off := s.touch(d)
		if e == nil {
			return nil, ErrNotFound
		}
		if g != nil {
			return s.readPacked(d, e, g, off, offset)
		}
		f, err := os.Open(s.path(d))
		if err == nil {
			info, serr := f.Stat()
			// Still indexed as e: the file opened is e's, which is not
			// recycled while e counts this reader.
			if serr == nil && info.Size() == d.Size && s.indexedAs(e) {
				if offset > 0 {
					if _, err := f.Seek(offset, io.SeekStart); err != nil {
						f.Close()
						s.doneReading(e)
						return nil, fmt.Errorf("reading blob %s at offset %d: %w", d, offset, err)
					}
				}
				return &blobFile{File: f, s: s, e: e}, nil
			}
			f.Close()
			s.doneReading(e)
			if serr != nil {
				return nil, fmt.Errorf("opening blob %s: %w", d, serr)
			}
		} else {
			s.doneReading(e)
			if !errors.Is(err, fs.ErrNotExist) {
				return nil, fmt.Errorf("opening blob %s: %w", d, err)
			}
		}
		// The file is missing or incomplete: between the lookup and the
		// open, the blob was evicted and may be being stored again. Wait
		// for that and look again; if it persists, the file was damaged.
		if attempt == 2 {
			s.forget(d)
			return nil, ErrNotFound
		}
		s.waitIdle(d)
	}
}

// touch marks d as recently used and returns its entry, or nil if it is
// not indexed. If d is packed, it also returns its segment, with a
// reference the caller must drop, and its record's offset; otherwise it
// counts a reader of the entry's file, which the caller must end with
// doneReading.
func (s *Disk) touch(d digest.Digest) (*entry, *segment, int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.idx.get(d)
	if !ok {
		return nil, nil, 0
	}
	s.idx.use(e)
	s.datedLocked()
	if e.seg != nil {
		e.seg.refs.Add(1)
	} else {
		e.readers++
	}
	return e, e.seg, e.off
}

// doneReading ends a reader that touch counted.
func (s *Disk) doneReading(e *entry) {
	s.mu.Lock()
	e.readers--
	s.mu.Unlock()
}

// indexedAs reports whether e is still d's index entry.
func (s *Disk) indexedAs(e *entry) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.idx.holds(e)
}

// blobFile is an open blob file that counts as a reader of its entry
// until it is closed.
type blobFile struct {
	*os.File
	s      *Disk
	e      *entry
	closed bool
}

func (f *blobFile) Close() error {
	err := f.File.Close()
	if !f.closed {
		f.closed = true
		f.s.doneReading(f.e)
	}
	return err
}

// waitIdle waits until no file operation on d is in progress.
func (s *Disk) waitIdle(d digest.Digest) {
	s.mu.Lock()
	for {
		ch, busy := s.idx.busyUntil(d)
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
	if e, ok := s.idx.get(d); ok && e.seg == nil {
		if info, err := os.Stat(s.path(d)); err == nil && info.Size() == d.Size {
			return
		}
		s.idx.remove(e)
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
		if e, ok := s.idx.get(d); ok {
			s.idx.use(e)
			s.datedLocked()
			return false
		}
		ch, busy := s.idx.busyUntil(d)
		if !busy {
			s.idx.markBusy(d)
			return true
		}
		s.mu.Unlock()
		<-ch
		s.mu.Lock()
	}
}

// release ends a claim on d, indexing e if it is not nil (the blob is now
// in its file or segment), and evicts what no longer fits.
func (s *Disk) release(d digest.Digest, e *entry) {
	s.mu.Lock()
	ev := s.releaseLocked(d, e)
	s.mu.Unlock()
	s.removeSoon(ev)
}

// Stats reports the number of blobs and bytes held.
func (s *Disk) Stats() (blobs int, bytes int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.idx.len(), s.idx.total
}

// Spares reports the bytes held in spare files and how many uploads have
// been written into one since start (see spare.go).
func (s *Disk) Spares() (bytes, recycled int64) { return s.spares.stats() }

// Refused reports how many blobs were refused since start because only
// blobs under the lifetime promise were left to evict.
func (s *Disk) Refused() int64 { return s.refused.Load() }

// Evicted reports how many blobs eviction has removed since start.
func (s *Disk) Evicted() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.idx.dropped
}
