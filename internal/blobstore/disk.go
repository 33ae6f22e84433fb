package blobstore

import (
	"context"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"math/rand/v2"
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
	root     string
	tmp      string
	packDir  string
	maxBytes int64
	fsync    bool
	packMax  int64 // blobs up to this size are packed; 0: none
	segSize  int64
	dirs     sync.Map // prefix dirs known to exist
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

	// pmu serialises appends to the current segment and guards the list
	// of segments. Lock order: mu before pmu.
	pmu     sync.Mutex
	segs    []*segment // live segments, oldest first
	cur     *segment   // the segment taking appends; nil until the first
	nextSeg uint64
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
}

// NewDisk opens (creating if needed) a disk store rooted at dir.
func NewDisk(dir string, opts DiskOptions) (*Disk, error) {
	s := &Disk{
		root:      dir,
		tmp:       filepath.Join(dir, "tmp"),
		packDir:   filepath.Join(dir, "packs"),
		maxBytes:  opts.MaxBytes,
		fsync:     opts.Fsync,
		packMax:   opts.PackThreshold,
		segSize:   opts.SegmentSize,
		directMin: max(opts.DirectIOThreshold, 0),
		idx:       newBlobIndex(),
		removers:  make(chan struct{}, backgroundRemovals),
		spares:    newSpareFiles(filepath.Join(dir, "tmp"), max(opts.MaxBytes, 0)/spareShare),
		sealer:    newSealer(dir, filepath.Join(dir, "tmp"), opts.Fsync),
	}
	switch {
	case s.packMax == 0:
		s.packMax = defaultPackThreshold
	case s.packMax < 0:
		s.packMax = 0
	case s.packMax > smallBlob:
		s.packMax = smallBlob
	}
	if s.segSize <= 0 {
		s.segSize = defaultSegmentSize
	}
	if s.maxBytes > 0 {
		s.segSize = min(s.segSize, s.maxBytes/minSegmentsPerBound)
	}
	if err := os.RemoveAll(s.tmp); err != nil {
		return nil, fmt.Errorf("clearing %s: %w", s.tmp, err)
	}
	if err := os.MkdirAll(s.tmp, 0o755); err != nil {
		return nil, fmt.Errorf("creating blob store directory: %w", err)
	}
	if err := os.MkdirAll(s.packDir, 0o755); err != nil {
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

// load rebuilds the index from the files and segments on disk.
func (s *Disk) load() error {
	type found struct {
		d     digest.Digest
		mtime time.Time
		seg   *segment
		off   int64
	}
	var all []found
	// After a reboot, large files renamed since the last seal are hashed
	// (see seal.go).
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
			all = append(all, found{d: d, mtime: info.ModTime()})
			return nil
		})
		if err != nil {
			return fmt.Errorf("scanning blob store %s: %w", base, err)
		}
	}
	segs, recs, err := s.loadPacks()
	if err != nil {
		return err
	}
	s.segs = segs
	// A segment's blobs take its modification time; within it, later
	// records are newer (the sort below is stable).
	mtimes := make(map[*segment]time.Time, len(segs))
	for _, g := range segs {
		mtimes[g] = segmentMTime(g)
	}
	for i := len(recs) - 1; i >= 0; i-- {
		r := recs[i]
		all = append(all, found{r.d, mtimes[r.seg], r.seg, r.off})
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
		s.idx.addOldest(&entry{d: f.d, seg: f.seg, off: f.off})
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

func (s *Disk) path(d digest.Digest) string {
	return filepath.Join(s.root, digest.Name(d.Function), d.Hash[:2], d.Hash+"-"+strconv.FormatInt(d.Size, 10))
}

// FindMissing implements Store.
func (s *Disk) FindMissing(_ context.Context, ds []digest.Digest) ([]digest.Digest, error) {
	missing := make([]digest.Digest, 0, len(ds)/4)
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, d := range ds {
		if e, ok := s.idx.get(d); ok {
			s.idx.use(e)
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
			return s.readPacked(e, g, off, offset)
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

// backgroundRemovals bounds the evictions unlinked in the background at
// once; beyond it, the caller unlinks them itself.
const backgroundRemovals = 2

// removeSoon is remove for evictions a new blob caused: their files are
// unlinked in the background, so that the upload that filled the store
// does not wait for the removal of older blobs (unlinking a large file
// drops its page cache and frees its blocks, tens of milliseconds for
// hundreds of MiB). The evicted digests stay busy until their files are
// gone, so a new copy of one waits and is not unlinked by mistake. When
// backgroundRemovals are already under way the caller removes its own,
// which keeps a store under a storm of evictions from piling them up.
func (s *Disk) removeSoon(ev evictions) {
	if len(ev.files) == 0 {
		s.remove(ev)
		return
	}
	select {
	case s.removers <- struct{}{}:
		s.removing.Add(1)
		go func() {
			defer s.removing.Done()
			s.removeFiles(ev, true)
			<-s.removers
		}()
	default:
		s.removeFiles(ev, false)
	}
}

// removeFiles is remove, running removeHook first.
func (s *Disk) removeFiles(ev evictions, background bool) {
	if s.removeHook != nil {
		s.removeHook(background)
	}
	s.remove(ev)
}

// settle waits for the evictions being removed in the background.
func (s *Disk) settle() { s.removing.Wait() }

// releaseLocked is release with s.mu held; the caller must pass what it
// returns to remove once it has released the lock.
func (s *Disk) releaseLocked(d digest.Digest, e *entry) evictions {
	var ev evictions
	if e != nil {
		s.idx.add(e)
		ev = s.evictLocked()
	}
	s.idx.idle(d)
	return ev
}

// evictions is what evictLocked took out of the index: blob files to
// unlink or recycle, and segments whose store reference to drop.
type evictions struct {
	files []evictedFile
	segs  []*segment
}

// evictedFile is an evicted blob with a file of its own. reuse: nobody
// had it open when it was evicted, so the file may become a spare.
type evictedFile struct {
	d     digest.Digest
	reuse bool
}

// evictLocked drops least recently used blobs from the index until the
// store fits its bound. Blobs with their own file go one by one, and are
// marked busy until remove unlinks their files once the caller has
// released the lock. When the least recently used blob is packed, the
// oldest segment goes as a whole, its recently used blobs copied forward
// first (see evictSegmentLocked).
func (s *Disk) evictLocked() evictions {
	var ev evictions
	for s.maxBytes > 0 && s.idx.total > s.maxBytes && s.idx.len() > 1 {
		tail := s.idx.oldest()
		if tail.seg != nil {
			s.evictSegmentLocked(tail, &ev)
			continue
		}
		d := tail.d
		s.idx.evict(tail)
		s.idx.markBusy(d)
		ev.files = append(ev.files, evictedFile{d: d, reuse: tail.readers == 0})
	}
	return ev
}

// remove unlinks (or keeps as spares) evicted blobs' files and drops
// evicted segments, outside the lock. Open readers keep their file:
// unlinking only drops the name, and a file with readers is not recycled.
func (s *Disk) remove(ev evictions) {
	for _, g := range ev.segs {
		g.unref()
	}
	for _, f := range ev.files {
		d := f.d
		if !f.reuse || !s.keepSpare(d) {
			os.Remove(s.path(d))
		}
		s.mu.Lock()
		s.idx.idle(d)
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
func (s *Disk) Create(ctx context.Context, d digest.Digest) (Writer, error) {
	tw, err := s.CreateTrusted(ctx, d)
	if err != nil {
		return nil, err
	}
	return NewChecked(d, tw), nil
}

// CreateTrusted implements Trusting.
func (s *Disk) CreateTrusted(_ context.Context, d digest.Digest) (TrustedWriter, error) {
	w := &diskWriter{s: s, v: verifier{want: d}}
	if d.Size <= s.packMax && !d.IsEmpty() {
		// Room for the record header before the data: the record is
		// written from this buffer.
		w.hdr = int(recordHeaderLen(d))
		w.buf = make([]byte, w.hdr, recordLen(d))
		return w, nil
	}
	if d.Size <= smallBlob {
		w.buf = make([]byte, 0, d.Size)
		return w, nil
	}
	if !s.wantsDirect(d.Size) {
		// Overwrite an evicted blob's file if one fits: see spare.go.
		if f, size, ok := s.spares.take(d.Size); ok {
			w.f, w.trim, w.reused = f, size > d.Size, true
			w.fw = newFileWriter(f, false)
			return w, nil
		}
	}
	f, direct, err := s.createTemp(d.Size)
	if err != nil {
		return nil, fmt.Errorf("creating temporary blob file: %w", err)
	}
	w.f = f
	w.fw = newFileWriter(f, direct)
	return w, nil
}

// createTemp creates a temporary file for a blob of the given size, opened
// with O_DIRECT when the blob is at least directMin bytes and the file
// system supports it.
func (s *Disk) createTemp(size int64) (f *os.File, direct bool, err error) {
	if s.wantsDirect(size) {
		for range 10 {
			name := filepath.Join(s.tmp, "w"+strconv.FormatUint(rand.Uint64(), 36))
			f, ok, err := openDirect(name)
			if errors.Is(err, fs.ErrExist) {
				continue
			}
			if err != nil {
				return nil, false, err
			}
			if !ok {
				// Not supported here; remember, and stop trying.
				s.noDirect.Store(true)
				break
			}
			return f, true, nil
		}
	}
	f, err = os.CreateTemp(s.tmp, "w")
	return f, false, err
}

// wantsDirect reports whether a blob of the given size is written with
// O_DIRECT.
func (s *Disk) wantsDirect(size int64) bool {
	return s.directMin > 0 && size >= s.directMin && !s.noDirect.Load()
}

// diskWriter writes one blob its caller verifies: into buf if it is
// small, else through fw into the temporary file f.
type diskWriter struct {
	s      *Disk
	v      verifier // counts the bytes; hashes none
	buf    []byte
	hdr    int // bytes reserved for a record header at the start of buf
	f      *os.File
	fw     *fileWriter
	trim   bool // f is a spare longer than the blob: truncate it
	reused bool // f is a spare
	done   bool // committed or closed
}

func (w *diskWriter) Write(p []byte) (int, error) {
	if err := w.writeHashing(p, nil); err != nil {
		return 0, err
	}
	return len(p), nil
}

// writeHashing implements hashingWriter: a large blob's bytes are hashed
// while the file writer's goroutine writes the previous ones.
func (w *diskWriter) writeHashing(p []byte, h hash.Hash) error {
	err := errWriterDone
	if !w.done {
		err = w.v.count(p)
	}
	if err != nil {
		if h != nil {
			h.Write(p) // hashingWriter's promise
		}
		return err
	}
	if w.f != nil {
		var hw io.Writer
		if h != nil {
			hw = h
		}
		if err := w.fw.write(p, hw); err != nil {
			return fmt.Errorf("writing blob %s: %w", w.v.want, err)
		}
		return nil
	}
	if h != nil {
		h.Write(p)
	}
	w.buf = append(w.buf, p...)
	return nil
}

func (w *diskWriter) Written() int64 { return w.v.n }

func (w *diskWriter) CommitVerified(p Proof) error {
	if w.done {
		return errWriterDone
	}
	if err := p.Vouches(w.v.want, w.v.n); err != nil {
		return err
	}
	d := w.v.want
	if w.f == nil {
		w.done = true
		var err error
		if w.hdr > 0 {
			err = w.s.writePacked(d, w.buf)
		} else {
			err = w.s.writeSmall(d, w.buf)
		}
		w.buf = nil
		return err
	}
	if err := w.fw.finish(); err != nil {
		return fmt.Errorf("writing blob %s: %w", d, err)
	}
	if w.trim {
		if err := w.f.Truncate(d.Size); err != nil {
			return fmt.Errorf("writing blob %s: %w", d, err)
		}
	}
	if w.s.fsync {
		if err := w.f.Sync(); err != nil {
			return fmt.Errorf("flushing blob %s: %w", d, err)
		}
	}
	w.s.sealer.committingLarge(w.reused)
	if w.reused {
		// Its ctime must be after the note above, whatever the file
		// system does on rename (see seal.go); a chmod sets it.
		if err := w.f.Chmod(0o600); err != nil {
			return fmt.Errorf("writing blob %s: %w", d, err)
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
	w.fw.finish()
	w.f.Close()
	return os.Remove(w.f.Name())
}

// writeSmall writes verified data to d's final name and indexes it.
func (s *Disk) writeSmall(d digest.Digest, data []byte) (err error) {
	if d.IsEmpty() || !s.claim(d) {
		return nil
	}
	stored := false
	defer func() { s.releaseFile(d, stored) }()
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
	return syncDirOf(path)
}

// renameIn moves a verified temporary file to d's final name and indexes
// it.
func (s *Disk) renameIn(d digest.Digest, tmpName string) error {
	if d.IsEmpty() || !s.claim(d) {
		return os.Remove(tmpName)
	}
	stored := false
	defer func() { s.releaseFile(d, stored) }()
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

// releaseFile ends a claim on d, indexing it as a file if stored.
func (s *Disk) releaseFile(d digest.Digest, stored bool) {
	if stored {
		s.release(d, &entry{d: d})
	} else {
		s.release(d, nil)
	}
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

// Evicted reports how many blobs eviction has removed since start.
func (s *Disk) Evicted() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.idx.dropped
}
