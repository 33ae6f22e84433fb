package execroot

import "github.com/gantry-build/gantry/internal/inputtree"

// Bounds on an input tree, so that a hostile tree cannot make the worker
// spend unbounded time or disk. A Directory can be shared by many parents,
// so a tree of a few kilobytes of messages can describe billions of paths
// ("fan-out bomb"); the count is taken over the expanded tree, as it would
// be laid out on disk.
var (
	// MaxDepth bounds how deeply directories nest (the bound Execute
	// and the Remote Asset unpacker apply too).
	MaxDepth = inputtree.MaxDepth
	// MaxEntries bounds the files, directories and symlinks of the
	// expanded tree.
	MaxEntries int64 = 4 << 20
)

// checkSize rejects a tree deeper than MaxDepth or with more than
// MaxEntries entries once shared subdirectories are expanded. It visits
// each distinct Directory once (memoized), so it is linear in the number
// of distinct messages, not in the size of the expansion.
func (b *builder) checkSize(root *dirInfo) error {
	type size struct {
		entries int64
		depth   int
	}
	memo := map[*dirInfo]size{}
	var visit func(di *dirInfo) size
	visit = func(di *dirInfo) size {
		if s, ok := memo[di]; ok {
			return s
		}
		s := size{entries: int64(len(di.files) + len(di.dirs) + len(di.links))}
		for _, sd := range di.dirs {
			child := b.dirs[sd.d]
			if child == nil {
				continue
			}
			c := visit(child)
			s.entries = min(s.entries+c.entries, MaxEntries+1) // saturate: no overflow
			s.depth = max(s.depth, c.depth+1)
		}
		memo[di] = s
		return s
	}
	s := visit(root)
	switch {
	case s.depth > MaxDepth:
		return invalidf("", "the input tree nests directories %d deep, more than this worker's limit of %d; flatten the inputs", s.depth, MaxDepth)
	case s.entries > MaxEntries:
		return invalidf("", "the input tree expands to more than %d files, directories and symlinks (counting every place a shared subdirectory appears); this worker's limit is %d, split the action's inputs", MaxEntries, MaxEntries)
	}
	return nil
}
