package cc

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"
)

// depCacheVersion changes when the entry format or key changes.
const depCacheVersion = 1

// DepsCache is the direct-mode dependency cache (as ccache's direct mode):
// it remembers a compile's dependency listing under a key made of the
// compiler's identity, the arguments, the working directory and the
// source's content, with each listed file's size, mtime and digest. A hit
// (every file unchanged) needs no local compiler process at all.
//
// Entries are files under dir, in 256 shards; each shard holds at most
// maxEntries/256 entries (at least 1), the least recently used removed
// first. Writes are atomic; an unreadable or corrupt entry is a miss.
type DepsCache struct {
	dir      string
	perShard int
	// sums remembers the digests this process computed, by file version,
	// so that a header every compile lists is hashed once per process.
	sums sync.Map // sumKey -> string
}

// sumKey identifies a version of a file: a file rewritten in place keeps
// its inode but changes its ctime.
type sumKey struct {
	path         string
	size         int64
	mtime, ctime int64
	ino          uint64
}

// sha256Of is fileSHA256 of p (whose stat is st), from the memo when this
// process hashed the same version before.
func (d *DepsCache) sha256Of(p string, st os.FileInfo) (string, error) {
	k := sumKey{path: p, size: st.Size(), mtime: st.ModTime().UnixNano()}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		k.ctime, k.ino = sys.Ctim.Nano(), sys.Ino
	}
	if v, ok := d.sums.Load(k); ok {
		return v.(string), nil
	}
	sum, err := fileSHA256(p)
	if err != nil {
		return "", err
	}
	d.sums.Store(k, sum)
	return sum, nil
}

// NewDepsCache returns a cache in dir holding about maxEntries entries.
func NewDepsCache(dir string, maxEntries int) *DepsCache {
	per := maxEntries / 256
	if per < 1 {
		per = 1
	}
	return &DepsCache{dir: dir, perShard: per}
}

// depsEntry is one cached listing.
type depsEntry struct {
	Version int
	Listed  []string
	DepFile []byte
	Files   []fileStamp
}

// fileStamp is one dependency's version when it was listed.
type fileStamp struct {
	Path   string // absolute
	Size   int64
	Mtime  int64 // nanoseconds
	SHA256 string
}

// depsKey is the cache key of c, or "" when the source cannot be read (the
// listing will say why).
func (c *Compile) depsKey(id *Identity, env []string) string {
	src := c.Source
	if !filepath.IsAbs(src) {
		src = filepath.Join(c.Cwd, src)
	}
	sum, err := fileSHA256(src)
	if err != nil {
		return ""
	}
	h := sha256.New()
	fmt.Fprintf(h, "gantry-cc-deps %d\x00%x\x00%s\x00%s\x00%s\x00", depCacheVersion, id.Salt, id.Path, c.Cwd, sum)
	for _, a := range c.Args {
		fmt.Fprintf(h, "%d:%s", len(a), a)
	}
	h.Write([]byte{0})
	// The variables that change what the preprocessor reads.
	for _, e := range env {
		for _, name := range depsEnv {
			if strings.HasPrefix(e, name+"=") {
				fmt.Fprintf(h, "%d:%s", len(e), e)
			}
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}

// depsEnv are the environment variables the preprocessor reads.
var depsEnv = []string{"CPATH", "C_INCLUDE_PATH", "CPLUS_INCLUDE_PATH", "OBJC_INCLUDE_PATH", "GCC_EXEC_PREFIX", "COMPILER_PATH", "SOURCE_DATE_EPOCH"}

func (d *DepsCache) path(key string) string {
	return filepath.Join(d.dir, "deps", key[:2], key)
}

// get returns the entry for key when every file it lists is unchanged.
func (d *DepsCache) get(key string) (*depsResult, bool) {
	if d == nil || key == "" {
		return nil, false
	}
	p := d.path(key)
	data, err := os.ReadFile(p)
	if err != nil {
		return nil, false
	}
	var e depsEntry
	if json.Unmarshal(data, &e) != nil || e.Version != depCacheVersion || len(e.Listed) == 0 {
		return nil, false
	}
	for _, f := range e.Files {
		st, err := os.Stat(f.Path)
		if err != nil || st.Size() != f.Size {
			return nil, false
		}
		if st.ModTime().UnixNano() != f.Mtime {
			// Touched, maybe not changed: the content decides.
			if sum, err := d.sha256Of(f.Path, st); err != nil || sum != f.SHA256 {
				return nil, false
			}
		}
	}
	// Mark it used for the least-recently-used eviction.
	now := time.Now()
	_ = os.Chtimes(p, now, now)
	return &depsResult{Listed: e.Listed, DepFile: e.DepFile}, true
}

// put stores res under key with the current version of each file.
func (d *DepsCache) put(key string, cwd string, res *depsResult) error {
	if d == nil || key == "" {
		return nil
	}
	e := depsEntry{Version: depCacheVersion, Listed: res.Listed, DepFile: res.DepFile}
	seen := map[string]bool{}
	for _, l := range res.Listed {
		p := l
		if !filepath.IsAbs(p) {
			p = filepath.Join(cwd, p)
		}
		p = filepath.Clean(p)
		if seen[p] {
			continue
		}
		seen[p] = true
		st, err := os.Stat(p)
		if err != nil {
			return err
		}
		sum, err := d.sha256Of(p, st)
		if err != nil {
			return err
		}
		e.Files = append(e.Files, fileStamp{Path: p, Size: st.Size(), Mtime: st.ModTime().UnixNano(), SHA256: sum})
	}
	data, err := json.Marshal(e)
	if err != nil {
		return err
	}
	p := d.path(key)
	if err := writeFileAtomic(p, data); err != nil {
		return err
	}
	return d.evict(filepath.Dir(p))
}

// evict keeps a shard within its share of the bound.
func (d *DepsCache) evict(shard string) error {
	ents, err := os.ReadDir(shard)
	if err != nil || len(ents) <= d.perShard {
		return err
	}
	type aged struct {
		name string
		mod  int64
	}
	var files []aged
	for _, e := range ents {
		if info, err := e.Info(); err == nil && !e.IsDir() {
			files = append(files, aged{e.Name(), info.ModTime().UnixNano()})
		}
	}
	sort.Slice(files, func(i, j int) bool { return files[i].mod < files[j].mod })
	for i := 0; i < len(files)-d.perShard; i++ {
		os.Remove(filepath.Join(shard, files[i].name))
	}
	return nil
}

func fileSHA256(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
