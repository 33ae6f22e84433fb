package cc

import (
	"os"
	"sync"
)

// walkMaps are the lookup tables of one scan. They are kept in a pool
// between scans: a batch scans hundreds of compiles, and filling fresh
// maps for each (growing them, faulting in new memory) was an eighth of
// what the scans allocated. A cleared map keeps its room.
type walkMaps struct {
	visited map[visitKey]bool
	listed  map[string]bool
	memo    map[resolveKey]resolved
	stats   map[string]os.FileInfo
	checked map[string]*dirListing
}

var walkMapsPool = sync.Pool{New: func() any {
	return &walkMaps{
		visited: make(map[visitKey]bool, 64),
		listed:  make(map[string]bool, 64),
		memo:    make(map[resolveKey]resolved, 32),
		stats:   make(map[string]os.FileInfo, 64),
		checked: make(map[string]*dirListing, 16),
	}
}}

// maxPooledEntries bounds the maps put back: one huge scan should not
// make every later one clear (and hold) its tables.
const maxPooledEntries = 4096

func getWalkMaps() *walkMaps { return walkMapsPool.Get().(*walkMaps) }

// put clears m and returns it to the pool; nothing may use m after.
func (m *walkMaps) put() {
	if len(m.visited) > maxPooledEntries || len(m.memo) > maxPooledEntries || len(m.stats) > maxPooledEntries {
		return
	}
	clear(m.visited)
	clear(m.listed)
	clear(m.memo)
	clear(m.stats)
	clear(m.checked)
	walkMapsPool.Put(m)
}
