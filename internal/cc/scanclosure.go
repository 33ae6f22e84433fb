package cc

import (
	"os"
	"strconv"
	"strings"
)

// A closure is everything one header brings into a compile: the files
// its directives name, theirs, and so on, each as the compiler names it.
// The scanner follows every conditional branch, so a header's closure
// depends only on the header, how it was found (for #include_next) and
// the search chain, not on the source that includes it. A per-run
// Scanner remembers the closure of each header a source includes
// directly, so the compiles of a batch that share headers (all of them,
// usually: the project's and the system's) walk each header once per
// run instead of once per compile.
//
// A closure holds while the files it was made from are unchanged, which
// a per-run Scanner assumes except for what the run announces (Forget):
// a written file whose name can appear in a directive drops them all.
type closure struct {
	entries []closureEntry
}

// closureEntry is one file of a closure: listed (and walked, if not
// only) as path, found as at says, with its metadata (nil: not a file
// the walk looked at).
type closureEntry struct {
	path      string
	abs, open string // w.abs and w.open of path (the chain fixes the working directory)
	at        int
	only      bool
	info      os.FileInfo
}

type closureKey struct {
	chain string
	path  string
	at    int
}

// id identifies the chain for closures: the working directory, the
// directories as given and where #include <...> starts.
func (c searchChain) id(cwd string) string {
	return cwd + "\x00" + strconv.Itoa(c.bracket) + "\x00" + strings.Join(c.dirs, "\x00")
}

// dropClosures forgets every closure; sc.mu is held.
func (sc *Scanner) dropClosures() {
	if len(sc.closures) > 0 {
		clear(sc.closures)
	}
	sc.closureGen++
}

// merge lists the closure of the header p (found as at says, included by
// the source) into the walk, computing and remembering it first if
// needed.
func (w *walk) merge(p string, at int) error {
	key := closureKey{chain: w.chainID, path: p, at: at}
	w.sc.mu.Lock()
	c, gen := w.sc.closures[key], w.sc.closureGen
	w.sc.mu.Unlock()
	if c == nil {
		var err error
		if c, err = w.closureOf(p, at); err != nil {
			return err
		}
		w.sc.mu.Lock()
		if w.sc.closureGen == gen { // nothing was forgotten meanwhile
			w.sc.closures[key] = c
		}
		w.sc.mu.Unlock()
	}
	for _, e := range c.entries {
		if !e.only {
			k := visitKey{e.abs, e.at}
			if w.visited[k] && e.path != p {
				continue // reached already, with what it brings
			}
			w.visited[k] = true
		}
		w.list(e.path)
		if e.info != nil {
			if _, ok := w.stats[e.open]; !ok {
				w.stats[e.open] = e.info
			}
		}
	}
	return nil
}

// closureOf walks the header p alone, sharing this compile's lookups.
func (w *walk) closureOf(p string, at int) (*closure, error) {
	own := getWalkMaps() // only its visited and listed are used
	defer own.put()
	sub := &walk{
		sc:      w.sc,
		cwd:     w.cwd,
		chain:   w.chain,
		chainID: w.chainID,
		sub:     true,
		visited: own.visited,
		listed:  own.listed,
		memo:    w.memo,
		stats:   w.stats,
		checked: w.checked,
	}
	if err := sub.file(p, at, 1); err != nil {
		return nil, err
	}
	if err := sub.walkPending(); err != nil {
		return nil, err
	}
	c := &closure{entries: sub.trail}
	for i := range c.entries {
		e := &c.entries[i]
		e.abs, e.open = sub.abs(e.path), sub.open(e.path)
		e.info = sub.stats[e.open]
	}
	return c, nil
}
