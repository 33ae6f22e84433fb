package worker

import (
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"github.com/gantry-build/gantry/internal/worker/execroot"
)

// rootPool hands out exec root directories under one directory. Roots
// left empty by earlier actions are reused, so that an action does not
// pay for creating one (expensive on some file systems), nor for reading
// again what Recycle kept in it.
type rootPool struct {
	dir string
	log *slog.Logger

	mu    sync.Mutex
	empty []execroot.Recycled
	next  int
}

func newRootPool(dir string, log *slog.Logger) *rootPool {
	return &rootPool{dir: dir, log: log}
}

// take returns an empty exec root directory (not yet created when new).
func (p *rootPool) take() execroot.Recycled {
	p.mu.Lock()
	defer p.mu.Unlock()
	if n := len(p.empty); n > 0 {
		rec := p.empty[n-1]
		p.empty = p.empty[:n-1]
		return rec
	}
	p.next++
	return execroot.Recycled{Dir: filepath.Join(p.dir, strconv.Itoa(p.next))}
}

// give empties an exec root for reuse, or removes it if that fails.
func (p *rootPool) give(root *execroot.Root) {
	rec, err := root.Recycle()
	if err != nil {
		p.log.Warn("exec root not reusable", "dir", root.Dir, "err", err)
		os.RemoveAll(root.Dir)
		return
	}
	p.mu.Lock()
	p.empty = append(p.empty, rec)
	p.mu.Unlock()
}
