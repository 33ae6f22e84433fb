package cc

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
)

// Scanner finds a compile's inputs without running the compiler's
// dependency listing: it follows the #include, #include_next and #import
// directives (and __has_include operands) from the source, in every
// conditional branch, resolving each name as gcc does. The result is a
// superset of the listing's (headers of dead branches that exist are
// sent too). It is safe for concurrent use; share one per process.
//
// It remembers, for the process, each file's directives (by path, size,
// mtime and inode: a changed file is read again) and the compiler's
// default include directories (by compiler identity, working directory
// and the flags that can change them). Name resolution is not cached
// across compiles, so a header generated between two compiles is seen.
type Scanner struct {
	mu      sync.Mutex
	parsed  map[string]parsedFile
	systems map[string]systemResult
}

type parsedFile struct {
	dirs []directive
	err  error
}

type systemResult struct {
	dirs []string
	err  error
}

// NewScanner returns a Scanner with empty caches.
func NewScanner() *Scanner {
	return &Scanner{parsed: map[string]parsedFile{}, systems: map[string]systemResult{}}
}

// maxIncludeDepth is gcc's limit of nested includes; a deeper chain of
// distinct paths ("a/../a/x.h" again and again) cannot be scanned.
const maxIncludeDepth = 200

// found says where a file was found, for #include_next: the index in
// the chain, or one of these.
const (
	foundBeside = -1 // in the includer's directory (or the working directory for -include): next searches the whole chain
	foundNoDir  = -2 // the source, or an absolute name: next is a plain include
)

// scan returns the compile's inputs as the listing names them (relative
// to the working directory or absolute), the source first. A *cannotScan
// error says to use the listing instead.
func (sc *Scanner) scan(ctx context.Context, c *Compile, id *Identity, env []string) ([]string, error) {
	lang := c.Lang
	if lang == "" {
		lang = sourceExts[path.Ext(c.Source)]
	}
	switch lang {
	case "c", "c++", "objective-c", "objective-c++", "assembler-with-cpp":
	default:
		return nil, unscannable("language %q", lang)
	}
	var quote, bracket, isystem, after, forced, probeFlags []string
	for _, it := range c.items {
		if it.source {
			continue
		}
		switch it.spec.kind {
		case kindCompile, kindOutput, kindDepMD, kindDepMF, kindDepMT, kindDepMP, kindMap, kindDebug, kindLang:
			continue
		case kindPath:
			v := it.value
			if v == "-" || strings.HasPrefix(v, "=") || strings.HasPrefix(v, "$SYSROOT") {
				return nil, unscannable("%s %s", it.spec.name, v)
			}
			switch it.spec.name {
			case "-I":
				bracket = append(bracket, v)
			case "-iquote":
				quote = append(quote, v)
			case "-isystem":
				isystem = append(isystem, v)
			case "-idirafter":
				after = append(after, v)
			case "-include", "-imacros":
				forced = append(forced, v)
			default:
				return nil, unscannable("flag %s", it.spec.name)
			}
			continue
		}
		switch {
		case it.spec.name == "-D", it.spec.name == "-U", it.spec.name == "-O", it.spec.name == "-W", it.spec.name == "-Wl,", it.spec.name == "-Wa,":
			continue // no say in the search path
		}
		probeFlags = append(probeFlags, it.raw...)
	}
	defaults, err := sc.systemDirs(ctx, c, id, env, probeFlags, lang)
	if err != nil {
		return nil, err
	}
	w := &walk{
		sc:      sc,
		cwd:     c.Cwd,
		chain:   buildChain(c.Cwd, quote, bracket, isystem, defaults, after),
		visited: map[visitKey]bool{},
		listed:  map[string]bool{},
		memo:    map[resolveKey]resolved{},
	}
	if err := w.file(c.Source, foundNoDir, 0); err != nil {
		return nil, err
	}
	// gcc reads <stdc-predef.h> before the source when it finds one.
	if r, err := w.resolve(directive{name: "stdc-predef.h", angle: true}, "", foundNoDir); err != nil {
		return nil, err
	} else if r.path != "" {
		if err := w.file(r.path, r.at, 1); err != nil {
			return nil, err
		}
	}
	for _, f := range forced {
		// -include and -imacros: the working directory, then the
		// #include "..." chain.
		r, err := w.resolveForced(f)
		if err != nil {
			return nil, err
		}
		if r.path == "" {
			return nil, unscannable("-include %s not found", f)
		}
		if err := w.file(r.path, r.at, 1); err != nil {
			return nil, err
		}
	}
	if err := w.walkPending(); err != nil {
		return nil, err
	}
	return w.order, nil
}

// systemDirs probes the compiler's default include directories once per
// identity, working directory, language and flags.
func (sc *Scanner) systemDirs(ctx context.Context, c *Compile, id *Identity, env, flags []string, lang string) ([]string, error) {
	key := strings.Join(append([]string{string(id.Salt), id.Path, c.Cwd, lang}, flags...), "\x00")
	sc.mu.Lock()
	r, ok := sc.systems[key]
	sc.mu.Unlock()
	if ok {
		return r.dirs, r.err
	}
	dirs, err := probeSystemDirs(ctx, id.Path, c.Cwd, env, flags, lang)
	if err != nil && ctx.Err() != nil {
		return nil, err // not remembered: the next compile probes again
	}
	sc.mu.Lock()
	sc.systems[key] = systemResult{dirs, err}
	sc.mu.Unlock()
	return dirs, err
}

// directives returns the parsed directives of the file at p (absolute,
// clean; open is how to open it), from the cache when the file is unchanged.
func (sc *Scanner) directives(p, open string, st os.FileInfo) ([]directive, error) {
	key := fileKey(p, st)
	sc.mu.Lock()
	f, ok := sc.parsed[key]
	sc.mu.Unlock()
	if ok {
		return f.dirs, f.err
	}
	data, err := os.ReadFile(open)
	if err != nil {
		return nil, unscannable("reading %s: %v", p, err)
	}
	dirs, err := scanDirectives(data)
	if err != nil {
		err = unscannable("%s: %v", p, err)
	}
	sc.mu.Lock()
	sc.parsed[key] = parsedFile{dirs, err}
	sc.mu.Unlock()
	return dirs, err
}

// walk is one compile's scan.
type walk struct {
	sc      *Scanner
	cwd     string
	chain   searchChain
	visited map[visitKey]bool
	listed  map[string]bool
	order   []string
	memo    map[resolveKey]resolved
	pending []pendingFile
}

type visitKey struct {
	abs string
	at  int
}

type resolveKey struct {
	dir   string // the includer's directory, for "name"
	start int
	name  string
	angle bool
}

// resolved is where a name was found: path as gcc names it ("" when
// nowhere) and how (an index in the chain, foundBeside or foundNoDir).
type resolved struct {
	path string
	at   int
}

type pendingFile struct {
	path  string
	at    int
	depth int
}

// abs is p made absolute and clean: the key of a file.
func (w *walk) abs(p string) string {
	if filepath.IsAbs(p) {
		return filepath.Clean(p)
	}
	return filepath.Join(w.cwd, p)
}

// open is p as the compiler opens it: relative to the working directory,
// not cleaned (the kernel resolves "dir/.." through symbolic links).
func (w *walk) open(p string) string {
	if filepath.IsAbs(p) {
		return p
	}
	return w.cwd + "/" + p
}

// file lists the file p (as gcc names it), found as at says, and queues
// its directives.
func (w *walk) file(p string, at, depth int) error {
	a := w.abs(p)
	k := visitKey{a, at}
	if w.visited[k] {
		return nil
	}
	w.visited[k] = true
	if depth > maxIncludeDepth {
		return unscannable("#include nested too deeply at %s", p)
	}
	if !w.listed[p] {
		w.listed[p] = true
		w.order = append(w.order, p)
	}
	w.pending = append(w.pending, pendingFile{p, at, depth})
	return nil
}

// walkPending follows the queued files' directives until none is left.
func (w *walk) walkPending() error {
	for len(w.pending) > 0 {
		f := w.pending[len(w.pending)-1]
		w.pending = w.pending[:len(w.pending)-1]
		st, err := os.Stat(w.open(f.path))
		if err != nil {
			return unscannable("%s: %v", f.path, err)
		}
		dirs, err := w.sc.directives(w.abs(f.path), w.open(f.path), st)
		if err != nil {
			return err
		}
		dir := f.path[:strings.LastIndexByte(f.path, '/')+1] // gcc's dir_name_of_file
		for _, d := range dirs {
			r, err := w.resolve(d, dir, f.at)
			if err != nil {
				return err
			}
			if r.path == "" {
				continue // missing: a dead branch, or the compiler reports it
			}
			if err := w.file(r.path, r.at, f.depth+1); err != nil {
				return err
			}
		}
	}
	return nil
}

// resolve finds the file a directive in a file of directory dir (found as
// at says) names, as gcc's search_path_head and find_file do.
func (w *walk) resolve(d directive, dir string, at int) (resolved, error) {
	if path.IsAbs(d.name) {
		ok, err := w.exists(d.name)
		if err != nil || !ok {
			return resolved{}, err
		}
		return resolved{d.name, foundNoDir}, nil
	}
	key := resolveKey{name: d.name, angle: d.angle}
	switch {
	case d.next && at != foundNoDir:
		key.start = at + 1
	case d.angle:
		key.start = w.chain.bracket
	default:
		key.dir, key.start = dir, foundBeside
	}
	if r, ok := w.memo[key]; ok {
		return r, nil
	}
	r, err := w.search(key)
	if err != nil {
		return resolved{}, err
	}
	w.memo[key] = r
	return r, nil
}

// resolveForced finds an -include or -imacros file.
func (w *walk) resolveForced(name string) (resolved, error) {
	if path.IsAbs(name) {
		return w.resolve(directive{name: name}, "", foundNoDir)
	}
	return w.search(resolveKey{name: name, start: foundBeside})
}

func (w *walk) search(k resolveKey) (resolved, error) {
	if k.start == foundBeside {
		p := k.dir + k.name
		ok, err := w.exists(p)
		if err != nil {
			return resolved{}, err
		}
		if ok {
			return resolved{p, foundBeside}, nil
		}
		k.start = 0
	}
	for i := k.start; i < len(w.chain.dirs); i++ {
		p := joinDir(w.chain.dirs[i], k.name)
		ok, err := w.exists(p)
		if err != nil {
			return resolved{}, err
		}
		if ok {
			return resolved{p, i}, nil
		}
	}
	return resolved{}, nil
}

// exists reports whether p is a file the compiler would open: missing
// files and directories are skipped (the search goes on); any other
// error (permission denied) stops the scan, as it stops the compiler.
func (w *walk) exists(p string) (bool, error) {
	st, err := os.Stat(w.open(p))
	switch {
	case err == nil:
		return !st.IsDir(), nil
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOTDIR):
		return false, nil
	default:
		return false, unscannable("%v", err)
	}
}

// joinDir is gcc's append_file_to_dir.
func joinDir(dir, name string) string {
	if dir == "" || strings.HasSuffix(dir, "/") {
		return dir + name
	}
	return dir + "/" + name
}
