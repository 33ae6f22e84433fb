package remote

import (
	"fmt"
	"hash/maphash"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/gantry-build/gantry/internal/digest"
)

// subtreeCache remembers, for the life of a Client, the input subtrees
// Prepare built under the top-level directories of input roots, by the
// exact inputs that went into them, so that the next action with the same
// inputs there takes the finished subtree (its Directory messages encoded
// and hashed) instead of building it again. The compiles of a batch share
// most of their inputs a top-level directory at a time (every system
// header under the sysroot mirror, a module's headers under include/):
// building those subtrees for every compile was most of Prepare.
//
// A subtree is remembered the second time its inputs are seen (a compile's
// own source directory, seen once, is not), and at most maxSubtrees are.
// A cached subtree is never modified: an action that would add to it (its
// working directory is there) builds its own.
type subtreeCache struct {
	seed maphash.Seed
	mu   sync.Mutex
	seen map[uint64]bool
	m    map[uint64]*subtree
}

// Bounds of a subtreeCache: a batch of thousands of compiles has a few
// subtrees worth keeping (tens of KiB each).
const (
	maxSubtrees     = 512
	maxSeenSubtrees = 1 << 16
)

func newSubtreeCache() *subtreeCache {
	return &subtreeCache{seed: maphash.MakeSeed(), seen: map[uint64]bool{}, m: map[uint64]*subtree{}}
}

// subtree is a finished input subtree and what it was built from.
type subtree struct {
	ids        []groupInput
	node       *dirNode // stored (d set); shared, never modified
	blobs      []subtreeBlob
	files      int
	inputBytes int64
}

// subtreeBlob is one blob of a subtree: a Directory message (data) or a
// file (path).
type subtreeBlob struct {
	d   digest.Digest
	src source
}

// groupInput identifies one input of a group: where it goes and which
// version of which local file it is.
type groupInput struct {
	path string // as given, slash-separated
	key  fileKey
}

// inputGroup is an action's inputs under one top-level directory: those
// of inputs whose top-level element (tops) is name. They are looked at in
// place: copying them out was a seventh of what a cold batch allocated.
type inputGroup struct {
	name   string
	inputs []Input
	tops   []string
	// cacheable: the working directory is not under name (Prepare makes
	// its directories itself).
	cacheable bool
}

// each calls fn with every input of g, in order.
func (g *inputGroup) each(fn func(in Input) bool) {
	for i, in := range g.inputs {
		if g.tops[i] == g.name && !fn(in) {
			return
		}
	}
}

func (g *inputGroup) id(in Input) groupInput {
	return groupInput{path: in.Path, key: keyOf(in.Local, in.Info)}
}

// hash is the group's cache key, in input order.
func (g *inputGroup) hash(seed maphash.Seed) uint64 {
	h := maphash.String(seed, g.name)
	g.each(func(in Input) bool {
		h = h*0x100000001b3 ^ maphash.Comparable(seed, g.id(in))
		return true
	})
	return h
}

// ids lists the group's inputs for a cache entry.
func (g *inputGroup) ids() []groupInput {
	var ids []groupInput
	g.each(func(in Input) bool {
		ids = append(ids, g.id(in))
		return true
	})
	return ids
}

// get returns the cached subtree of g, if any.
func (sc *subtreeCache) get(h uint64, g *inputGroup) *subtree {
	sc.mu.Lock()
	st := sc.m[h]
	sc.mu.Unlock()
	if st == nil {
		return nil
	}
	i, same := 0, true
	g.each(func(in Input) bool {
		same = i < len(st.ids) && st.ids[i] == g.id(in)
		i++
		return same
	})
	if !same || i != len(st.ids) {
		return nil // another group with the same hash
	}
	return st
}

// sawAgain records that a group with key h was built and reports whether
// one was built before (so it is worth remembering now).
func (sc *subtreeCache) sawAgain(h uint64) bool {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if sc.seen[h] {
		return len(sc.m) < maxSubtrees
	}
	if len(sc.seen) < maxSeenSubtrees {
		sc.seen[h] = true
	}
	return false
}

func (sc *subtreeCache) put(h uint64, st *subtree) {
	sc.mu.Lock()
	if len(sc.m) < maxSubtrees {
		sc.m[h] = st
	}
	sc.mu.Unlock()
}

// groupInputs finds the groups of inputs, regular files with known
// metadata, by the top-level directory of their (clean) path; the others
// (files at the root, invalid paths) are returned as rest, in order. wdTop
// is the first element of the working directory ("" at the root).
func groupInputs(inputs []Input, wdTop string) (groups []*inputGroup, rest []Input) {
	tops := make([]string, len(inputs))
	for i, in := range inputs {
		p, err := cleanRel("input path", filepath.ToSlash(in.Path), true)
		top, _, nested := strings.Cut(p, "/")
		if err != nil || !nested {
			rest = append(rest, in)
			continue
		}
		tops[i] = top
		known := false
		for _, g := range groups {
			known = known || g.name == top
		}
		if !known {
			groups = append(groups, &inputGroup{name: top, inputs: inputs, tops: tops, cacheable: top != wdTop})
		}
	}
	return groups, rest
}

// groupable reports whether every input is a regular file whose metadata
// the caller gave: a directory input adds whatever it holds, anywhere.
func groupable(inputs []Input) bool {
	for _, in := range inputs {
		if in.Info == nil || !in.Info.Mode().IsRegular() {
			return false
		}
	}
	return true
}

// addInputs adds inputs to the tree, taking the subtrees of top-level
// directories from the Client's cache where it can. It returns the groups
// it built that are worth caching once the tree is stored (see remember).
func (b *treeBuilder) addInputs(inputs []Input, wd string) ([]builtGroup, error) {
	sc := b.c.subtrees
	if sc == nil || !groupable(inputs) {
		for _, in := range inputs {
			if err := b.add(in); err != nil {
				return nil, err
			}
		}
		return nil, nil
	}
	wdTop, _, _ := strings.Cut(wd, "/")
	groups, rest := groupInputs(inputs, wdTop)
	for _, in := range rest {
		if err := b.add(in); err != nil {
			return nil, err
		}
	}
	var built []builtGroup
	for _, g := range groups {
		var h uint64
		if g.cacheable {
			h = g.hash(sc.seed)
			if st := sc.get(h, g); st != nil {
				if err := b.graft(g, st); err != nil {
					return nil, err
				}
				continue
			}
		}
		var err error
		g.each(func(in Input) bool {
			err = b.add(in)
			return err == nil
		})
		if err != nil {
			return nil, err
		}
		if g.cacheable && sc.sawAgain(h) {
			built = append(built, builtGroup{g, h})
		}
	}
	return built, nil
}

// builtGroup is a group built by this action, to be cached under hash.
type builtGroup struct {
	g    *inputGroup
	hash uint64
}

// graft puts the cached subtree st at the top-level directory of g.
func (b *treeBuilder) graft(g *inputGroup, st *subtree) error {
	i, ok := b.root.findDir(g.name)
	if ok || b.root.hasFile(g.name) {
		// Only a file at the root can be there (a group holds every
		// input under its name, and the working directory's is not
		// cached).
		first := ""
		g.each(func(in Input) bool { first = in.Path; return false })
		return fmt.Errorf("input path %s needs %s to be a directory, but another input puts a file there", first, g.name)
	}
	b.root.dirs = slices.Insert(b.root.dirs, i, namedDir{g.name, st.node})
	for _, bl := range st.blobs {
		if _, ok := b.a.blobs[bl.d]; !ok {
			b.a.blobs[bl.d] = bl.src
		}
	}
	b.a.stats.Files += st.files
	b.a.stats.InputBytes += st.inputBytes
	return nil
}

// remember caches the subtrees of the groups built, once the tree is
// stored (every Directory digest known).
func (b *treeBuilder) remember(built []builtGroup) {
	for _, bg := range built {
		i, ok := b.root.findDir(bg.g.name)
		if !ok {
			continue
		}
		st := &subtree{ids: bg.g.ids(), node: b.root.dirs[i].node}
		st.collect(b.a, st.node)
		b.c.subtrees.put(bg.hash, st)
	}
}

// collect records the blobs of the stored subtree under n.
func (st *subtree) collect(a *Action, n *dirNode) {
	st.blobs = append(st.blobs, subtreeBlob{n.d, source{data: a.blobs[n.d].data}})
	for _, f := range n.files {
		st.files++
		st.inputBytes += f.e.d.Size
		if !f.e.d.IsEmpty() {
			st.blobs = append(st.blobs, subtreeBlob{f.e.d, source{path: f.e.local}})
		}
	}
	for _, d := range n.dirs {
		st.collect(a, d.node)
	}
}
