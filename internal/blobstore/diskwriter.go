package blobstore

// Writing a blob to a disk store: small ones are held in memory and
// written to their final name (or appended to a segment) at commit; large
// ones stream through a file writer into a temporary file, or a spare,
// renamed into place at commit. The caller verifies the bytes (see
// verified.go): the writer counts them and commits only with its proof.

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
	"strconv"

	"github.com/gantry-build/gantry/internal/digest"
)

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
	if err := s.roomFor(d); err != nil {
		return nil, err
	}
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
		s.release(d, newEntry(d, nil, 0))
	} else {
		s.release(d, nil)
	}
}
