package blobstore

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync"

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

// spare is an evicted blob's file, renamed into the spares' directory.
type spare struct {
	name string
	size int64
}

// spareFiles holds the spares of one store: at most maxSpares files and
// max bytes, oldest first. It is safe for concurrent use.
type spareFiles struct {
	dir string // where spares are kept: the store's tmp
	max int64  // bound on their bytes; 0: none are kept

	mu       sync.Mutex
	list     []spare
	bytes    int64
	recycled int64 // files taken for uploads
}

func newSpareFiles(dir string, max int64) *spareFiles {
	return &spareFiles{dir: dir, max: max}
}

// keep tries to keep path's file, an evicted blob of size bytes, as a
// spare, renaming it into dir. It reports whether it dealt with the file
// (kept it, or found it gone or shared); if not, the caller unlinks it.
func (sp *spareFiles) keep(path string, size int64) bool {
	if size > sp.max {
		return false
	}
	name := filepath.Join(sp.dir, "s"+strconv.FormatUint(rand.Uint64(), 36))
	if err := os.Rename(path, name); err != nil {
		return false
	}
	info, err := os.Lstat(name)
	if err != nil || !info.Mode().IsRegular() || info.Size() != size || linkCount(info) != 1 {
		os.Remove(name)
		return true
	}
	sp.mu.Lock()
	sp.list = append(sp.list, spare{name: name, size: size})
	sp.bytes += size
	var drop []string
	for len(sp.list) > maxSpares || sp.bytes > sp.max {
		drop = append(drop, sp.list[0].name)
		sp.bytes -= sp.list[0].size
		sp.list = sp.list[1:]
	}
	sp.mu.Unlock()
	for _, n := range drop {
		os.Remove(n)
	}
	return true
}

// take takes a spare for a blob of the given size and opens it for
// writing from its start, returning it with its size. It takes the
// smallest spare at least that large, else the largest smaller one, but
// none less than half or more than twice the size: the surplus of a
// larger one is truncated when the blob is committed, and a smaller one
// grows.
func (sp *spareFiles) take(size int64) (*os.File, int64, bool) {
	sp.mu.Lock()
	best := -1
	for i, c := range sp.list {
		if c.size < size/2 || c.size > 2*size {
			continue
		}
		if best < 0 {
			best = i
			continue
		}
		b := sp.list[best].size
		switch {
		case c.size >= size && (b < size || c.size < b):
			best = i
		case c.size < size && b < size && c.size > b:
			best = i
		}
	}
	if best < 0 {
		sp.mu.Unlock()
		return nil, 0, false
	}
	c := sp.list[best]
	sp.list = append(sp.list[:best], sp.list[best+1:]...)
	sp.bytes -= c.size
	sp.mu.Unlock()
	f, err := os.OpenFile(c.name, os.O_WRONLY, 0)
	if err != nil {
		os.Remove(c.name)
		return nil, 0, false
	}
	sp.mu.Lock()
	sp.recycled++
	sp.mu.Unlock()
	return f, c.size, true
}

// stats reports the bytes held in spares and how many were taken.
func (sp *spareFiles) stats() (bytes, recycled int64) {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	return sp.bytes, sp.recycled
}

// held returns the spares held, oldest first.
func (sp *spareFiles) held() []spare {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	return append([]spare(nil), sp.list...)
}

// keepSpare tries to keep d's evicted file as a spare (see keep).
func (s *Disk) keepSpare(d digest.Digest) bool {
	if !canRecycle || d.Size <= smallBlob || s.wantsDirect(d.Size) {
		// Not worth keeping: written to memory, or (written with
		// O_DIRECT) not in the page cache.
		return false
	}
	return s.spares.keep(s.path(d), d.Size)
}
