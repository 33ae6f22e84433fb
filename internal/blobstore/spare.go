package blobstore

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"

	"github.com/gantry-build/gantry/internal/digest"
)

// A full store evicts a blob for (about) every one it takes in. Instead of
// unlinking an evicted blob's file and creating a new one for the next
// upload, the store keeps the file under tmp as a spare and the next large
// upload of a similar size overwrites it, as databases recycle their log
// segments. Writing over pages a file already has skips what a new file
// costs: allocating page cache (expensive on virtual machines whose free
// memory goes back to the host), allocating disk blocks, and, for the old
// file, dropping its page cache and freeing its blocks. An upload's bytes
// still go through the same verification; a spare is only a place to
// write them.
//
// A file is recycled only if nothing can still read it: no Open of the
// blob was under way or open when it was evicted (readers), and it has
// no other name (a hard link made by someone else).

// spareShare: spares hold at most this fraction of the store's bound.
const spareShare = 8

// maxSpares bounds the number of spares.
const maxSpares = 2

// spare is an evicted blob's file, renamed into tmp.
type spare struct {
	name string
	size int64
}

// keepSpare tries to keep d's evicted file as a spare. It reports
// whether it dealt with the file (kept it, or found it gone); if not,
// the caller unlinks it.
func (s *Disk) keepSpare(d digest.Digest) bool {
	if !canRecycle || d.Size <= smallBlob || d.Size > s.spareMax || s.wantsDirect(d.Size) {
		// Not worth keeping: written to memory, too large, or (written
		// with O_DIRECT) not in the page cache.
		return false
	}
	name := filepath.Join(s.tmp, "s"+strconv.FormatUint(rand.Uint64(), 36))
	if err := os.Rename(s.path(d), name); err != nil {
		return false
	}
	info, err := os.Lstat(name)
	if err != nil || !info.Mode().IsRegular() || info.Size() != d.Size || linkCount(info) != 1 {
		os.Remove(name)
		return true
	}
	s.mu.Lock()
	s.spares = append(s.spares, spare{name: name, size: d.Size})
	s.spareBytes += d.Size
	var drop []string
	for len(s.spares) > maxSpares || s.spareBytes > s.spareMax {
		drop = append(drop, s.spares[0].name)
		s.spareBytes -= s.spares[0].size
		s.spares = s.spares[1:]
	}
	s.mu.Unlock()
	for _, n := range drop {
		os.Remove(n)
	}
	return true
}

// takeSpare takes a spare for a blob of the given size and opens it for
// writing from its start, returning it with its size. It takes the
// smallest spare at least that large, else the largest smaller one, but
// none less than half or more than twice the size: the surplus of a
// larger one is truncated when the blob is committed, and a smaller one
// grows.
func (s *Disk) takeSpare(size int64) (*os.File, int64, bool) {
	s.mu.Lock()
	best := -1
	for i, sp := range s.spares {
		if sp.size < size/2 || sp.size > 2*size {
			continue
		}
		if best < 0 {
			best = i
			continue
		}
		b := s.spares[best].size
		switch {
		case sp.size >= size && (b < size || sp.size < b):
			best = i
		case sp.size < size && b < size && sp.size > b:
			best = i
		}
	}
	if best < 0 {
		s.mu.Unlock()
		return nil, 0, false
	}
	sp := s.spares[best]
	s.spares = append(s.spares[:best], s.spares[best+1:]...)
	s.spareBytes -= sp.size
	s.mu.Unlock()
	f, err := os.OpenFile(sp.name, os.O_WRONLY, 0)
	if err != nil {
		os.Remove(sp.name)
		return nil, 0, false
	}
	s.mu.Lock()
	s.recycled++
	s.mu.Unlock()
	return f, sp.size, true
}
