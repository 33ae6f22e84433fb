package remote

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync"
	"syscall"

	"github.com/gantry-build/gantry/internal/digest"
	"github.com/gantry-build/gantry/internal/fileio"
)

// fileKey identifies one version of a local file well enough to reuse its
// digest: a file rewritten in place changes its mtime (and usually size),
// a file replaced by rename changes its inode.
type fileKey struct {
	path      string
	size      int64
	mtimeNano int64
	ctimeNano int64
	dev, ino  uint64
}

// fileCache remembers the digests of local files by fileKey. Entries are
// never evicted: a Client lives for one command or one batch, and the
// files it reads are bounded by the actions it runs.
type fileCache struct {
	mu sync.Mutex
	m  map[fileKey]digest.Digest
}

func newFileCache() *fileCache { return &fileCache{m: make(map[fileKey]digest.Digest)} }

// keyOf is the cache key of path with file info fi.
func keyOf(path string, fi os.FileInfo) fileKey {
	k := fileKey{path: path, size: fi.Size(), mtimeNano: fi.ModTime().UnixNano()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		k.dev, k.ino = uint64(st.Dev), st.Ino
		k.ctimeNano = st.Ctim.Sec*1e9 + st.Ctim.Nsec
	}
	return k
}

// digestOf returns the digest of the regular file at path, whose info is
// fi, and whether it had to read the file. When it reads the file and keep
// is true, it reads it whole and returns its bytes too (nil otherwise):
// they are exactly the bytes hashed, so an upload can send them instead of
// reading the file a second time.
func (fc *fileCache) digestOf(fn digest.Function, path string, fi os.FileInfo, keep bool) (digest.Digest, []byte, bool, error) {
	k := keyOf(path, fi)
	fc.mu.Lock()
	d, ok := fc.m[k]
	fc.mu.Unlock()
	if ok {
		return d, nil, false, nil
	}
	var data []byte
	var err error
	if keep {
		if data, err = readHashed(path); err == nil {
			d = digest.Compute(fn, data)
		}
	} else {
		d, err = hashFile(fn, path, fi.Size())
	}
	if err != nil {
		return digest.Digest{}, nil, true, err
	}
	if d.Size != fi.Size() {
		return digest.Digest{}, nil, true, fmt.Errorf("input %s changed while it was being read (size %d, then %d bytes); run again once nothing writes it", path, fi.Size(), d.Size)
	}
	fc.mu.Lock()
	fc.m[k] = d
	fc.mu.Unlock()
	return d, data, true, nil
}

// readHashed reads the whole file at path, to be hashed.
func readHashed(path string) ([]byte, error) {
	data, err := fileio.ReadFile(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) {
			return nil, err
		}
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	return data, nil
}

// hashFile computes the digest of the file at path, which is expected to
// hold size bytes.
func hashFile(fn digest.Function, path string, size int64) (digest.Digest, error) {
	h := digest.NewHasher(fn)
	n, err := fileio.HashFile(path, h, size)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) {
			return digest.Digest{}, err
		}
		return digest.Digest{}, fmt.Errorf("reading %s: %w", path, err)
	}
	return digest.Digest{Function: fn, Hash: digest.HexOf(h.Sum(nil)), Size: n}, nil
}
