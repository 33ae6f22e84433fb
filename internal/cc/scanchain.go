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
}

// chainDir is a candidate directory with its identity.
type chainDir struct {
	name     string
	dev, ino uint64
}

// statDirs keeps the existing directories of names, with their identity.
func statDirs(cwd string, names []string) []chainDir {
	var out []chainDir
	for _, n := range names {
		p := n
		if !path.IsAbs(p) {
			p = cwd + "/" + p
		}
		st, err := os.Stat(p)
		if err != nil || !st.IsDir() {
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
	system := removeDuplicates(statDirs(cwd, append(append(append([]string(nil), isystem...), defaults...), after...)), nil, nil)
	var systemHead *chainDir
	if len(system) > 0 {
		systemHead = &system[0]
	}
	br := removeDuplicates(statDirs(cwd, bracket), system, systemHead)
	br = append(br, system...)
	var brHead *chainDir
	if len(br) > 0 {
		brHead = &br[0]
	}
	q := removeDuplicates(statDirs(cwd, quote), system, brHead)
	c := searchChain{bracket: len(q)}
	for _, d := range append(q, br...) {
		c.dirs = append(c.dirs, d.name)
	}
	return c
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
