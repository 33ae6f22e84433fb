package asset

import (
	"bytes"
	"context"
	"fmt"
	"hash"
	"io"
	"os"

	"github.com/gantry-build/gantry/internal/blobstore"
	"github.com/gantry-build/gantry/internal/digest"
)

// memoryLimit is the largest content kept in memory on its way to the
// CAS; larger content goes through a temporary file.
const memoryLimit = 4 << 20

// spool holds content whose digest is not known until its end: the CAS
// needs the digest before the first byte (blobstore.Store.Create), so
// the bytes wait here, in memory or in a temporary file, hashed as they
// arrive.
type spool struct {
	dir  string
	fn   digest.Function
	h    hash.Hash
	n    int64
	mem  bytes.Buffer
	file *os.File
	// extra hashes the content too (checksum.sri verification).
	extra []hash.Hash
}

// newSpool starts a spool whose temporary file, if needed, is in dir
// ("": the system's).
func newSpool(dir string, fn digest.Function, extra ...hash.Hash) *spool {
	return &spool{dir: dir, fn: fn, h: digest.NewHasher(fn), extra: extra}
}

func (s *spool) Write(p []byte) (int, error) {
	s.h.Write(p)
	for _, h := range s.extra {
		h.Write(p)
	}
	s.n += int64(len(p))
	if s.file == nil && s.mem.Len()+len(p) <= memoryLimit {
		return s.mem.Write(p)
	}
	if s.file == nil {
		f, err := os.CreateTemp(s.dir, "gantry-asset-*")
		if err != nil {
			return 0, fmt.Errorf("spooling a download: %w; set remote_asset.temp_dir to a writable directory", err)
		}
		os.Remove(f.Name()) // unlinked: it goes away with the process
		s.file = f
		if _, err := f.Write(s.mem.Bytes()); err != nil {
			return 0, err
		}
		s.mem = bytes.Buffer{}
	}
	return s.file.Write(p)
}

// Digest is the digest of what was written.
func (s *spool) Digest() digest.Digest {
	return digest.Digest{Function: s.fn, Hash: digest.HexOf(s.h.Sum(nil)), Size: s.n}
}

// Store writes the content to cas under its digest.
func (s *spool) Store(ctx context.Context, cas blobstore.Store) (digest.Digest, error) {
	d := s.Digest()
	if d.IsEmpty() {
		return d, nil
	}
	if s.file == nil {
		return d, blobstore.Put(ctx, cas, d, s.mem.Bytes())
	}
	if has, err := blobstore.Has(ctx, cas, d); err != nil || has {
		return d, err
	}
	w, err := cas.Create(ctx, d)
	if err != nil {
		return d, err
	}
	defer w.Close()
	if _, err := io.Copy(w, io.NewSectionReader(s.file, 0, s.n)); err != nil {
		return d, err
	}
	return d, w.Commit()
}

// ReaderAt reads the content back (archives are read from it).
func (s *spool) ReaderAt() io.ReaderAt {
	if s.file == nil {
		return bytes.NewReader(s.mem.Bytes())
	}
	return s.file
}

// Size is the number of bytes written.
func (s *spool) Size() int64 { return s.n }

// Close removes the temporary file.
func (s *spool) Close() {
	if s.file != nil {
		s.file.Close()
	}
}
