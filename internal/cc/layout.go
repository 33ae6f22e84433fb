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
// dependencies.
func (c *Compile) plan(id *Identity, deps *depsResult, s Settings) (*layout, error) {
	listed := deps.Listed
	abs := func(p string) string {
		if filepath.IsAbs(p) {
			return filepath.Clean(p)
		}
		return filepath.Join(c.Cwd, p)
	}
	root := s.ProjectRoot
	if root == "" {
		root = c.Cwd
		for _, d := range listed {
			if a := abs(d); !id.system(a) {
				root = commonDir(root, filepath.Dir(a))
			}
		}
		for _, it := range c.items {
			if (it.source || it.spec.kind == kindPath || it.spec.kind == kindSysroot) && !filepath.IsAbs(it.value) {
				root = commonDir(root, abs(it.value))
			}
		}
		if root == "/" {
			return nil, local("the project root would be / (the working directory and the project's files have no other common directory); set GANTRY_CC_PROJECT_ROOT")
		}
	} else {
		if !under(c.Cwd, root) {
			return nil, local("the working directory %s is outside GANTRY_CC_PROJECT_ROOT=%s", c.Cwd, root)
		}
		for _, it := range c.items {
			if (it.source || it.spec.kind == kindPath || it.spec.kind == kindSysroot) && !filepath.IsAbs(it.value) && !under(abs(it.value), root) {
				return nil, local("%s is outside GANTRY_CC_PROJECT_ROOT=%s", it.value, root)
			}
		}
	}
	l := &layout{root: root, workdir: slashRel(root, c.Cwd)}
	if l.workdir == "." {
		l.workdir = ""
	}
	outAbs := abs(c.Output)
	if !under(outAbs, c.Cwd) || outAbs == c.Cwd {
		return nil, local("the object %s is outside the working directory", c.Output)
	}
	l.output = slashRel(c.Cwd, outAbs)
	// The worker creates the object's directory; the local compiler
	// would fail without it, and so must the launcher.
	for _, out := range []string{c.Output, c.depFile} {
		if out == "" {
			continue
		}
		if st, err := os.Stat(filepath.Dir(abs(out))); err != nil || !st.IsDir() {
			return nil, local("the directory of %s does not exist", out)
		}
	}

	send := s.Headers == HeadersSend
	seen := make(map[string]bool, len(listed))
	l.inputs = make([]remote.Input, 0, len(listed))
	for _, d := range listed {
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
			l.inputs = append(l.inputs, remote.Input{Local: a, Path: p, Info: deps.Infos[d]})
		}
	}

	rootRel := slashRel(c.Cwd, root)
	sysRel := filepath.ToSlash(filepath.Join(rootRel, SysrootDir))
	var maps []pathPair // rewritten prefix -> original prefix, for map flags
	mirrored := false
	addMap := func(from, to string) {
		for _, m := range maps {
			if m.from == from {
				return
			}
		}
		maps = append(maps, pathPair{from, to})
	}
	rewrite := func(orig string, isFile bool) string {
		if !filepath.IsAbs(orig) {
			return orig
		}
		a := filepath.Clean(orig)
		switch {
		case under(a, root):
			r := slashRel(c.Cwd, a)
			if isFile {
				if !strings.Contains(r, "/") {
					r = "./" + r // so that its directory has a prefix to map
				}
				addMap(r[:strings.LastIndexByte(r, '/')+1], filepath.Dir(a)+"/")
			} else {
				addMap(r+"/", a+"/")
			}
			return r
		case id.owns(a) || !send:
			return orig
		default:
			mirrored = true
			return sysRel + filepath.ToSlash(a)
		}
	}
	args := []string{c.Compiler}
	for _, it := range c.items {
		switch {
		case it.source:
			args = append(args, rewrite(it.value, true))
			continue
		case it.spec.kind == kindDepMD, it.spec.kind == kindDepMF, it.spec.kind == kindDepMT, it.spec.kind == kindDepMP:
			continue // the dependency file is written locally
		case it.spec.kind == kindOutput:
			args = append(args, "-o", l.output)
			continue
		}
		v := it.value
		switch it.spec.kind {
		case kindPath:
			isFile := strings.HasPrefix(it.raw[0], "-include") || strings.HasPrefix(it.raw[0], "-imacros")
			v = rewrite(v, isFile)
		case kindSysroot:
			v = rewrite(v, false)
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
	addSysroot := send && !c.userSysroot && !c.noStdInc
	if addSysroot {
		args = append(args, "--sysroot="+sysRel)
	}
	if mirrored || addSysroot {
		addMap(sysRel+"/", "/")
	}
	for _, m := range maps {
		args = append(args, mapFlags(m.from, m.to, c.userMaps)...)
	}
	l.diag = maps
	// gcc makes a --sysroot absolute, so headers found through ours (or
	// through the user's, mirrored) carry the worker's path.
	absSysroot := addSysroot || mirrored && c.userSysroot
	if c.debug || absSysroot {
		// The compiler records absolute paths the client cannot know: the
		// debug information's compilation directory and the headers under
		// the --sysroot it makes absolute. A shell on the worker finds the
		// input root's path and maps it back to the local one.
		wrapMaps := mapFlags(wrapperRoot, root, c.userMaps)
		if absSysroot {
			wrapMaps = append(wrapMaps, mapFlags(wrapperRoot+"/"+SysrootDir+"/", "/", c.userMaps)...)
			l.absSysroot = true
		}
		script := "r=$(cd " + shellQuote(rootRel) + " && pwd -P) || exit 1; unset PWD; exec \"$0\" \"$@\""
		for _, m := range wrapMaps {
			// Each flag holds the placeholder once, in its old prefix.
			before, after, _ := strings.Cut(m, wrapperRoot)
			script += " " + shellQuote(before) + "\"$r\"" + shellQuote(after)
		}
		args = append([]string{"sh", "-c", script}, args...)
	}
	l.args = args
	return l, nil
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
