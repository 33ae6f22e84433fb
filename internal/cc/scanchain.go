package cc

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path"
	"strings"
	"syscall"
)

// searchChain is the #include search path of one compile, as gcc builds
// it: the -iquote directories, then (from bracket on) -I, then -isystem,
// the compiler's default directories and -idirafter, without the
// directories that do not exist and without duplicates (by device and
// inode, the earlier kept, except that a -I or -iquote directory that is
// also a system directory gives way to the system one).
type searchChain struct {
	dirs    []string // as given (relative to the working directory or absolute)
	bracket int      // the index where #include <...> starts
	// missing are the candidate directories (absolute, clean) that do
	// not exist (or are not directories): creating one changes the chain.
	missing []string
}

// chainDir is a candidate directory with its identity.
type chainDir struct {
	name     string
	dev, ino uint64
}

// statDirs keeps the existing directories of names, with their identity,
// and adds the others to *missing (absolute, clean).
func statDirs(cwd string, names []string, missing *[]string) []chainDir {
	var out []chainDir
	for _, n := range names {
		p := n
		if !path.IsAbs(p) {
			p = cwd + "/" + p
		}
		st, err := os.Stat(p)
		if err != nil || !st.IsDir() {
			*missing = append(*missing, path.Clean(p))
			continue
		}
		d := chainDir{name: n}
		if s, ok := st.Sys().(*syscall.Stat_t); ok {
			d.dev, d.ino = uint64(s.Dev), s.Ino
		}
		out = append(out, d)
	}
	return out
}

// removeDuplicates is gcc's remove_duplicates (incpath.c): it drops from
// head the directories that are in system or earlier in head, and the
// last one when it is join's first.
func removeDuplicates(head, system []chainDir, join *chainDir) []chainDir {
	same := func(a, b chainDir) bool { return a.dev == b.dev && a.ino == b.ino }
	var out []chainDir
next:
	for i, d := range head {
		for _, s := range system {
			if same(d, s) {
				continue next
			}
		}
		for _, o := range out {
			if same(d, o) {
				continue next
			}
		}
		if i == len(head)-1 && join != nil && same(d, *join) {
			continue
		}
		out = append(out, d)
	}
	return out
}

// buildChain merges the user's directories and the compiler's defaults
// as gcc's merge_include_chains does.
func buildChain(cwd string, quote, bracket, isystem, defaults, after []string) searchChain {
	var missing []string
	system := removeDuplicates(statDirs(cwd, append(append(append([]string(nil), isystem...), defaults...), after...), &missing), nil, nil)
	var systemHead *chainDir
	if len(system) > 0 {
		systemHead = &system[0]
	}
	br := removeDuplicates(statDirs(cwd, bracket, &missing), system, systemHead)
	br = append(br, system...)
	var brHead *chainDir
	if len(br) > 0 {
		brHead = &br[0]
	}
	q := removeDuplicates(statDirs(cwd, quote, &missing), system, brHead)
	c := searchChain{bracket: len(q), missing: missing}
	for _, d := range append(q, br...) {
		c.dirs = append(c.dirs, d.name)
	}
	return c
}

// chainOf returns the search chain of a compile in cwd with these
// directories, and its id (see searchChain.id). A per-run Scanner builds
// each distinct chain once per run rather than statting its directories
// for every compile: a chain changes only when one of its directories
// that was missing is created, which the run announces with Forget (see
// forgetChains), or when anything may have changed (ForgetTree,
// ForgetAll). The directories that existed cannot go away or be replaced
// by what a run announces (it writes files and makes directories).
func (sc *Scanner) chainOf(cwd string, quote, bracket, isystem, defaults, after []string) (searchChain, string) {
	if !sc.perRun {
		c := buildChain(cwd, quote, bracket, isystem, defaults, after)
		return c, c.id(cwd)
	}
	key := chainKey(cwd, quote, bracket, isystem, defaults, after)
	sc.mu.Lock()
	e, ok := sc.chains[key]
	gen := sc.chainGen
	sc.mu.Unlock()
	if ok {
		return e.chain, e.id
	}
	c := buildChain(cwd, quote, bracket, isystem, defaults, after)
	e = cachedChain{chain: c, id: c.id(cwd)}
	sc.mu.Lock()
	sc.chainBuilds++
	if sc.chainGen == gen { // nothing was forgotten meanwhile
		sc.chains[key] = e
		for _, m := range c.missing {
			sc.chainMissing[m] = true
		}
	}
	sc.mu.Unlock()
	return e.chain, e.id
}

// cachedChain is a search chain a per-run Scanner remembers.
type cachedChain struct {
	chain searchChain
	id    string
}

// chainKey is the key of a chain among a run's: its directory lists, in
// order, each ended by a separator no path contains.
func chainKey(cwd string, lists ...[]string) string {
	n := len(cwd) + 1
	for _, l := range lists {
		for _, d := range l {
			n += len(d) + 1
		}
		n++
	}
	var b strings.Builder
	b.Grow(n)
	b.WriteString(cwd)
	b.WriteByte(0)
	for _, l := range lists {
		for _, d := range l {
			b.WriteString(d)
			b.WriteByte(0)
		}
		b.WriteByte(1)
	}
	return b.String()
}

// forgetChains drops the remembered chains if the directory clean (that
// the run made, or that leads to what it wrote) was missing from one of
// them; all means whatever was forgotten. sc.mu is held.
func (sc *Scanner) forgetChains(clean string, all bool) {
	if len(sc.chains) == 0 || !all && !sc.chainMissing[clean] {
		return
	}
	clear(sc.chains)
	clear(sc.chainMissing)
	sc.chainGen++
}

// probeSystemDirs runs `COMPILER FLAGS -x LANG -E -v /dev/null` in cwd and
// returns the default #include <...> directories it prints, and the
// nonexistent ones it ignored. flags are the compile's flags that can
// change them (--sysroot, -nostdinc, -m32, -target...), without the
// user's own directories.
func probeSystemDirs(ctx context.Context, compiler, cwd string, env, flags []string, lang string) (dirs, missing []string, err error) {
	args := append(append([]string(nil), flags...), "-x", lang, "-E", "-v", os.DevNull)
	cmd := exec.CommandContext(ctx, compiler, args...)
	// The search list's headings are translated in other locales.
	cmd.Dir, cmd.Env = cwd, append(append([]string(nil), env...), "LC_ALL=C")
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = io.Discard, &stderr
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			return nil, nil, ctx.Err()
		}
		return nil, nil, unscannable("finding the compiler's include directories (%s -E -v): %v: %s", compiler, err, firstLine(stderr.String()))
	}
	state := 0 // 1: in the quote list, 2: in the bracket list
	found := false
	sc := bufio.NewScanner(&stderr)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, `#include "..." search starts here:`):
			state = 1
		case strings.HasPrefix(line, "#include <...> search starts here:"):
			state, found = 2, true
		case strings.HasPrefix(line, "End of search list."):
			state = 0
		case strings.HasPrefix(line, `ignoring nonexistent directory "`):
			// gcc; clang says the same without the quotes.
			missing = append(missing, strings.TrimSuffix(strings.TrimPrefix(line, `ignoring nonexistent directory "`), `"`))
		case strings.HasPrefix(line, "ignoring nonexistent directory "):
			missing = append(missing, strings.TrimPrefix(line, "ignoring nonexistent directory "))
		case state != 0 && strings.HasPrefix(line, " "):
			if state == 1 {
				// Without the user's -iquote there is no quote list of
				// the compiler's own that the scanner would know of.
				return nil, nil, unscannable("the compiler has default #include \"...\" directories")
			}
			d := strings.TrimSpace(line)
			if strings.HasSuffix(d, "(framework directory)") {
				return nil, nil, unscannable("the compiler searches framework directories")
			}
			dirs = append(dirs, d)
		}
	}
	if !found {
		return nil, nil, unscannable("%s -E -v printed no include search list", compiler)
	}
	return dirs, missing, nil
}
