package cc

import (
	"os"
	"path/filepath"
	"strings"

	"github.com/gantry-build/gantry/internal/remote"
)

// layout is the remote form of a compile: the input root, the rewritten
// command and how to read its paths back.
type layout struct {
	root    string // local absolute directory of the input root
	workdir string // the working directory relative to root ("" for root)
	args    []string
	inputs  []remote.Input
	output  string // the object, relative to the working directory
	// diag maps path prefixes of the remote compiler's messages back to
	// what the local compiler would print, longest first when applied.
	diag []pathPair
	// absSysroot: the remote compiler names mirrored headers by the
	// absolute path of the remote sysroot, which only the worker knows.
	absSysroot bool
}

type pathPair struct{ from, to string }

// wrapperRoot stands for the remote input root's absolute path in map
// flags until the wrapper script puts "$r" there.
const wrapperRoot = "\x00"

// plan lays the compile out for remote execution from its listed
// dependencies: the input root, the object's place in it, the inputs,
// the arguments with their paths rewritten and, where the compiler
// records absolute paths, the wrapper that maps them back.
func (c *Compile) plan(id *Identity, deps *depsResult, s Settings) (*layout, error) {
	root, err := c.projectRoot(id, deps.Listed, s.ProjectRoot)
	if err != nil {
		return nil, err
	}
	l := &layout{root: root, workdir: slashRel(root, c.Cwd)}
	if l.workdir == "." {
		l.workdir = ""
	}
	if l.output, err = c.objectPath(); err != nil {
		return nil, err
	}
	send := s.Headers == HeadersSend
	l.inputs = inputsIn(root, id, deps, send, c.absPath)
	rootRel := slashRel(c.Cwd, root)
	rw := &rewriter{cwd: c.Cwd, root: root, id: id, send: send, sysRel: filepath.ToSlash(filepath.Join(rootRel, SysrootDir))}
	args := c.remoteArgs(rw, l.output)
	addSysroot := send && !c.userSysroot && !c.noStdInc
	if addSysroot {
		args = append(args, "--sysroot="+rw.sysRel)
	}
	if rw.mirrored || addSysroot {
		rw.addMap(rw.sysRel+"/", "/")
	}
	for _, m := range rw.maps {
		args = append(args, mapFlags(m.from, m.to, c.userMaps)...)
	}
	l.diag = rw.maps
	// gcc makes a --sysroot absolute, so headers found through ours (or
	// through the user's, mirrored) carry the worker's path.
	l.absSysroot = addSysroot || rw.mirrored && c.userSysroot
	if c.debug || l.absSysroot {
		args = append(wrapperCommand(rootRel, root, l.absSysroot, c.userMaps), args...)
	}
	l.args = args
	return l, nil
}

// projectRoot is the input root: the project root the user set (which
// must hold the working directory and the compile's relative paths), or
// the deepest directory holding the working directory, every listed
// header that is not the compiler's and every relative path of the
// command line.
func (c *Compile) projectRoot(id *Identity, listed []string, set string) (string, error) {
	if set != "" {
		if !under(c.Cwd, set) {
			return "", local("the working directory %s is outside GANTRY_CC_PROJECT_ROOT=%s", c.Cwd, set)
		}
		for _, it := range c.items {
			if it.relativePath() && !under(c.absPath(it.value), set) {
				return "", local("%s is outside GANTRY_CC_PROJECT_ROOT=%s", it.value, set)
			}
		}
		return set, nil
	}
	root := c.Cwd
	for _, d := range listed {
		if a := c.absPath(d); !id.system(a) {
			root = commonDir(root, filepath.Dir(a))
		}
	}
	for _, it := range c.items {
		if it.relativePath() {
			root = commonDir(root, c.absPath(it.value))
		}
	}
	if root == "/" {
		return "", local("the project root would be / (the working directory and the project's files have no other common directory); set GANTRY_CC_PROJECT_ROOT")
	}
	return root, nil
}

// relativePath reports whether the item is a source, path or sysroot
// given relative to the working directory: the input root must hold it.
func (it argItem) relativePath() bool {
	return (it.source || it.spec.kind == kindPath || it.spec.kind == kindSysroot) && !filepath.IsAbs(it.value)
}

// objectPath is the object relative to the working directory, which
// must hold it. The worker creates the object's directory; the local
// compiler would fail without it (or the dependency file's), and so must
// the launcher.
func (c *Compile) objectPath() (string, error) {
	outAbs := c.absPath(c.Output)
	if !under(outAbs, c.Cwd) || outAbs == c.Cwd {
		return "", local("the object %s is outside the working directory", c.Output)
	}
	for _, out := range []string{c.Output, c.depFile} {
		if out == "" {
			continue
		}
		if st, err := os.Stat(filepath.Dir(c.absPath(out))); err != nil || !st.IsDir() {
			return "", local("the directory of %s does not exist", out)
		}
	}
	return slashRel(c.Cwd, outAbs), nil
}

// inputsIn places the listed dependencies in the input root: those under
// root at their relative path, the others (system headers) mirrored
// under SysrootDir when headers are sent, except the compiler's own.
// abs makes a listed path absolute.
func inputsIn(root string, id *Identity, deps *depsResult, send bool, abs func(string) string) []remote.Input {
	seen := make(map[string]bool, len(deps.Listed))
	inputs := make([]remote.Input, 0, len(deps.Listed))
	for _, d := range deps.Listed {
		a := abs(d)
		var p string
		switch {
		case under(a, root):
			p = slashRel(root, a)
		case id.owns(a) || !send:
			continue
		default:
			p = SysrootDir + filepath.ToSlash(a)
		}
		if !seen[p] {
			seen[p] = true
			inputs = append(inputs, remote.Input{Local: a, Path: p, Info: deps.Infos[d]})
		}
	}
	return inputs
}

// rewriter turns the absolute paths of a command line into the remote
// ones: under the input root relative to the working directory, others
// (not the compiler's) into the mirrored sysroot when headers are sent.
// It remembers each rewritten prefix and the original it stands for
// (maps, for the map flags and the diagnostics) and whether it mirrored
// a path.
type rewriter struct {
	cwd, root string
	id        *Identity
	send      bool
	// sysRel is the mirrored sysroot relative to the working directory.
	sysRel   string
	maps     []pathPair
	mirrored bool
}

// addMap remembers that the remote prefix from stands for to; the first
// mapping of a prefix wins.
func (rw *rewriter) addMap(from, to string) {
	for _, m := range rw.maps {
		if m.from == from {
			return
		}
	}
	rw.maps = append(rw.maps, pathPair{from, to})
}

// rewrite is orig (a file, or a directory) as the remote compiler must
// see it; relative paths stay as they are.
func (rw *rewriter) rewrite(orig string, isFile bool) string {
	if !filepath.IsAbs(orig) {
		return orig
	}
	a := filepath.Clean(orig)
	switch {
	case under(a, rw.root):
		r := slashRel(rw.cwd, a)
		if isFile {
			if !strings.Contains(r, "/") {
				r = "./" + r // so that its directory has a prefix to map
			}
			rw.addMap(r[:strings.LastIndexByte(r, '/')+1], filepath.Dir(a)+"/")
		} else {
			rw.addMap(r+"/", a+"/")
		}
		return r
	case rw.id.owns(a) || !rw.send:
		return orig
	default:
		rw.mirrored = true
		return rw.sysRel + filepath.ToSlash(a)
	}
}

// remoteArgs is the compiler and its arguments as the worker runs them:
// paths rewritten by rw, the object at output, the dependency-file flags
// left out (the dependency file is written locally).
func (c *Compile) remoteArgs(rw *rewriter, output string) []string {
	args := []string{c.Compiler}
	for _, it := range c.items {
		switch {
		case it.source:
			args = append(args, rw.rewrite(it.value, true))
			continue
		case it.spec.kind == kindDepMD, it.spec.kind == kindDepMF, it.spec.kind == kindDepMT, it.spec.kind == kindDepMP:
			continue
		case it.spec.kind == kindOutput:
			args = append(args, "-o", output)
			continue
		}
		v := it.value
		switch it.spec.kind {
		case kindPath:
			isFile := strings.HasPrefix(it.raw[0], "-include") || strings.HasPrefix(it.raw[0], "-imacros")
			v = rw.rewrite(v, isFile)
		case kindSysroot:
			v = rw.rewrite(v, false)
		}
		switch {
		case v == it.value:
			args = append(args, it.raw...)
		case it.joinedPrefix != "":
			args = append(args, it.joinedPrefix+v)
		default:
			args = append(args, it.raw[0], v)
		}
	}
	return args
}

// wrapperCommand is the shell prefix for a compile whose compiler records
// absolute paths the client cannot know: the debug information's
// compilation directory and, with absSysroot, the headers under the
// --sysroot it makes absolute. The shell finds the input root's path on
// the worker (rootRel from the working directory) and maps it back to
// the local root.
func wrapperCommand(rootRel, root string, absSysroot bool, userMaps []prefixMap) []string {
	wrapMaps := mapFlags(wrapperRoot, root, userMaps)
	if absSysroot {
		wrapMaps = append(wrapMaps, mapFlags(wrapperRoot+"/"+SysrootDir+"/", "/", userMaps)...)
	}
	script := "r=$(cd " + shellQuote(rootRel) + " && pwd -P) || exit 1; unset PWD; exec \"$0\" \"$@\""
	for _, m := range wrapMaps {
		// Each flag holds the placeholder once, in its old prefix.
		before, after, _ := strings.Cut(m, wrapperRoot)
		script += " " + shellQuote(before) + "\"$r\"" + shellQuote(after)
	}
	return []string{"sh", "-c", script}
}

// commonDir is the deepest directory containing both a and b (clean,
// absolute paths).
func commonDir(a, b string) string {
	for !under(b, a) {
		a = filepath.Dir(a)
	}
	return a
}

// slashRel is target relative to base, slash-separated; both are clean
// absolute paths.
func slashRel(base, target string) string {
	r, err := filepath.Rel(base, target)
	if err != nil {
		return filepath.ToSlash(target) // not reached for absolute paths
	}
	return filepath.ToSlash(r)
}

// shellQuote quotes s for sh in single quotes; a quote inside is closed,
// escaped and reopened.
func shellQuote(s string) string {
	if s == "" {
		return ""
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
