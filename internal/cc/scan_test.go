package cc

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gantry-build/gantry/internal/testutil/cproject"
)

// scanOptions are newOptions with the include scanner on.
func scanOptions(t *testing.T, mutate func(*Settings)) Options {
	t.Helper()
	o := newOptions(t, mutate) // Settings.Scanner is on by default
	o.Scanner = NewScanner("", false)
	return o
}

// scanAndList returns what the scanner and the compiler's listing find
// for argv in cwd.
func scanAndList(t *testing.T, sc *Scanner, cwd string, argv []string) (scanned, listed []string) {
	t.Helper()
	c, err := Parse(argv[0], argv[1:], cwd)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	id, err := NewIdentities("").Get(ctx, c.Compiler)
	if err != nil {
		t.Fatal(err)
	}
	scanned, err = listedOf(sc.scan(ctx, c, id, os.Environ()))
	if err != nil {
		t.Fatalf("scan %q: %v", argv, err)
	}
	deps, err := c.listDeps(ctx, os.Environ())
	if err != nil {
		t.Fatalf("listing %q: %v", argv, err)
	}
	return scanned, deps.Listed
}

// checkSuperset fails unless scanned holds every file of listed (as
// absolute clean paths), and, for the files under project, exactly the
// listed ones named the same way, besides allowed. It returns the scanned
// files the listing does not have.
func checkSuperset(t *testing.T, cwd, project string, scanned, listed []string, allowed ...string) (extra []string) {
	t.Helper()
	abs := func(p string) string {
		if filepath.IsAbs(p) {
			return filepath.Clean(p)
		}
		return filepath.Join(cwd, p)
	}
	have := map[string]bool{}
	for _, s := range scanned {
		have[abs(s)] = true
	}
	want := map[string]bool{}
	for _, l := range listed {
		want[abs(l)] = true
		if !have[abs(l)] {
			t.Errorf("the scanner missed %s", l)
		}
	}
	for _, s := range scanned {
		if !want[abs(s)] {
			extra = append(extra, s)
		}
	}
	own := func(list []string) []string {
		var out []string
	next:
		for _, p := range list {
			for _, a := range allowed {
				if p == a {
					continue next
				}
			}
			if under(abs(p), project) {
				out = append(out, p)
			}
		}
		sort.Strings(out)
		return out
	}
	if g, w := own(scanned), own(listed); strings.Join(g, " ") != strings.Join(w, " ") {
		t.Errorf("the project's files differ:\nscanned %q\n listed %q", g, w)
	}
	if len(scanned) == 0 || len(listed) == 0 || scanned[0] != listed[0] {
		t.Errorf("the source is not first: scanned %q, listed %q", scanned, listed)
	}
	return extra
}

// TestScanGeneratedProject: for the generated project's compiles, the
// scanner finds a superset of gcc -M's files, exactly its files of the
// project, and the objects from the scanner's Spec are byte-identical.
func TestScanGeneratedProject(t *testing.T) {
	needGCC(t)
	p, err := cproject.Generate(filepath.Join(t.TempDir(), "proj"), cproject.Options{Modules: 3, FilesPerModule: 4, HeadersPerModule: 3, Work: 1})
	if err != nil {
		t.Fatal(err)
	}
	sc := NewScanner("", false)
	want := map[string]string{}
	for _, src := range p.Sources {
		argv := cproject.CompileArgs("gcc", src)
		scanned, listed := scanAndList(t, sc, p.Dir, argv)
		checkSuperset(t, p.Dir, p.Dir, scanned, listed)
		want[src] = strings.Join(scanned, " ")
	}
	// Concurrent scans sharing the caches (as gantry batch's jobs do)
	// find the same; a per-run Scanner (which reuses what each header
	// brings in) finds the same files, perhaps in another order.
	id, err := NewIdentities("").Get(context.Background(), "gcc")
	if err != nil {
		t.Fatal(err)
	}
	files := func(listed []string) string {
		var abs []string
		for _, l := range listed {
			if !filepath.IsAbs(l) {
				l = filepath.Join(p.Dir, l)
			}
			abs = append(abs, filepath.Clean(l))
		}
		return strings.Join(slices.Compact(slices.Sorted(slices.Values(abs))), " ")
	}
	for _, perRun := range []bool{false, true} {
		shared := NewScanner("", perRun)
		var wg sync.WaitGroup
		errs := make(chan string, 4*len(p.Sources))
		for g := 0; g < 4; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for _, src := range p.Sources {
					argv := cproject.CompileArgs("gcc", src)
					c, err := Parse(argv[0], argv[1:], p.Dir)
					if err != nil {
						errs <- err.Error()
						continue
					}
					got, err := listedOf(shared.scan(context.Background(), c, id, os.Environ()))
					switch {
					case err != nil:
						errs <- fmt.Sprintf("%s: concurrent scan (per run %v): %v", src, perRun, err)
					case perRun && (got[0] != src || files(got) != files(strings.Fields(want[src]))):
						errs <- fmt.Sprintf("%s: per-run scan %q, want the files of %q", src, got, want[src])
					case !perRun && strings.Join(got, " ") != want[src]:
						errs <- fmt.Sprintf("%s: concurrent scan %q", src, got)
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for e := range errs {
			t.Error(e)
		}
		if perRun && len(shared.closures) == 0 {
			t.Error("the per-run Scanner remembered no closure")
		}
	}
	// Byte-identical objects for a few of them.
	o := scanOptions(t, nil)
	for _, src := range []string{p.Sources[0], p.Sources[len(p.Sources)-1]} {
		argv := cproject.CompileArgs("gcc", src)
		if err := os.MkdirAll(filepath.Join(p.Dir, filepath.Dir(cproject.ObjectOf(src))), 0o755); err != nil {
			t.Fatal(err)
		}
		c, spec, got := remoteCompile(t, p.Dir, argv, o)
		if !c.Scanned() {
			t.Fatalf("%s: not scanned", src)
		}
		want := runLocal(t, p.Dir, argv, c.Output)
		if want.exit != 0 || got.exit != 0 || string(got.object) != string(want.object) {
			t.Fatalf("%s: objects differ (local exit %d, remote exit %d: %s)\nargs %q", src, want.exit, got.exit, got.stderr, spec.Args)
		}
	}
}

// TestScanSpecCases runs the cases of TestSpecObjectsIdentical through the
// scanner: a superset of the listing, and the same objects (checked there
// with the scanner on).
func TestScanSpecCases(t *testing.T) {
	needGCC(t)
	dir := project(t)
	build := filepath.Join(dir, "build")
	sc := NewScanner("", false)
	for _, tc := range identicalCases(t, dir) {
		t.Run(tc.name, func(t *testing.T) {
			scanned, listed := scanAndList(t, sc, build, tc.argv)
			checkSuperset(t, build, dir, scanned, listed)
		})
	}
}

// TestScanResolution builds a tree where each rule of gcc's search
// decides which of several same-named headers is read, and compares the
// scanner with gcc -M exactly (every file named the same way).
func TestScanResolution(t *testing.T) {
	needGCC(t)
	dir := filepath.Join(t.TempDir(), "res")
	writeTree(t, dir, map[string]string{
		// include_next from a -I directory continues after it: q/limits.h
		// -> i2/limits.h -> the system's <limits.h>.
		"src/main.c": `#include "near.h"
#include <limits.h>
#include <order.h>
#include "quoted.h"
#include "self.h"
#include "cycle_a.h"
#if 0
#include "missing_in_dead_branch.h"
#include <also/missing.h>
#endif
#if __has_include(<hasinc.h>)
#endif
#if __has_include("nothere.h")
#endif
/* #include "commented.h" */
const char *s = "#include \"instring.h\"";
int main(void) { return 0; }
`,
		"src/near.h":         "/* found beside the source before -iquote's */\n",
		"q/near.h":           "#error not this one\n",
		"q/quoted.h":         "#include \"sub/deep.h\"\n",
		"q/sub/deep.h":       "#include \"../../i1/plain.h\"\n",
		"i1/plain.h":         "\n",
		"i1/limits.h":        "#include_next <limits.h>\n",
		"i2/limits.h":        "#include_next <limits.h>\n",
		"i2/order.h":         "#include_next <order.h>\n",
		"sys/order.h":        "#include_next <order.h>\n",
		"after/order.h":      "\n",
		"after/hasinc.h":     "\n",
		"src/self.h":         "#pragma once\n#include \"self.h\"\n",
		"src/cycle_a.h":      "#ifndef A\n#define A\n#include \"cycle_b.h\"\n#endif\n",
		"src/cycle_b.h":      "#ifndef B\n#define B\n#include \"cycle_a.h\"\n#include \"self.h\"\n#endif\n",
		"src/commented.h":    "#error not included\n",
		"src/instring.h":     "#error not included\n",
		"src/unused/plain.h": "\n",
	})
	argv := []string{"gcc", "-iquote", "../q", "-I../i1", "-I", "../i2", "-isystem", "../sys", "-idirafter", "../after", "-c", "main.c"}
	src := filepath.Join(dir, "src")
	scanned, listed := scanAndList(t, NewScanner("", false), src, argv)
	// gcc does not list a header __has_include only tests; the scanner
	// sends it (the test's answer must be the same remotely).
	checkSuperset(t, src, dir, scanned, listed, "../after/hasinc.h")
	for _, want := range []string{"near.h", "../q/quoted.h", "../q/sub/deep.h", "../q/sub/../../i1/plain.h", "../i1/limits.h", "../i2/limits.h",
		"../i2/order.h", "../sys/order.h", "../after/order.h", "../after/hasinc.h", "self.h", "cycle_a.h", "cycle_b.h"} {
		found := false
		for _, s := range scanned {
			found = found || s == want
		}
		if !found {
			t.Errorf("%s not scanned as %q: %q", want, want, scanned)
		}
	}
	// The compile itself must succeed, or gcc -M's list proves little.
	if r := runLocal(t, src, argv, "main.o"); r.exit != 0 {
		t.Fatalf("local compile: %s", r.stderr)
	}
}

// TestScanFallsBack: a computed include makes Spec use the listing (and
// still succeed); -MD always uses the listing; GANTRY_CC_SCANNER=off too.
func TestScanFallsBack(t *testing.T) {
	needGCC(t)
	dir := project(t)
	writeTree(t, dir, map[string]string{
		"src/computed.c": "#define HDR \"local.h\"\n#include HDR\nint y = LOCAL;\n",
	})
	build := filepath.Join(dir, "build")
	for _, tc := range []struct {
		name    string
		argv    []string
		off     bool
		scanned bool
	}{
		{"scanned", []string{"gcc", "-c", "../src/a.c", "-I../inc", "-o", "a.o"}, false, true},
		{"computed include", []string{"gcc", "-c", "../src/computed.c", "-o", "c.o"}, false, false},
		{"-MD", []string{"gcc", "-c", "../src/a.c", "-I../inc", "-MD", "-o", "a.o"}, false, false},
		{"off", []string{"gcc", "-c", "../src/a.c", "-I../inc", "-o", "a.o"}, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := scanOptions(t, func(s *Settings) { s.Scanner = !tc.off })
			c, spec, got := remoteCompile(t, build, tc.argv, o)
			if c.Scanned() != tc.scanned {
				t.Errorf("Scanned() = %v, want %v", c.Scanned(), tc.scanned)
			}
			want := runLocal(t, build, tc.argv, c.Output)
			if got.exit != 0 || want.exit != 0 || string(got.object) != string(want.object) {
				t.Fatalf("objects differ (remote exit %d: %s)\nargs %q", got.exit, got.stderr, spec.Args)
			}
		})
	}
}

// TestScanRelist: Relist rebuilds the Spec from the listing; it reports a
// file the scanned Spec lacked (simulated by dropping one), and nothing
// when the scan had everything.
func TestScanRelist(t *testing.T) {
	needGCC(t)
	dir := project(t)
	build := filepath.Join(dir, "build")
	o := scanOptions(t, nil)
	c, err := Parse("gcc", []string{"-c", "../src/a.c", "-I../inc", "-o", "a.o"}, build)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := c.Spec(ctx, o); err != nil || !c.Scanned() {
		t.Fatalf("Spec: %v, scanned %v", err, c.Scanned())
	}
	spec, missed, err := c.Relist(ctx, o)
	if err != nil || missed || c.Scanned() {
		t.Fatalf("Relist after a complete scan: missed %v, scanned %v, %v", missed, c.Scanned(), err)
	}
	if got := runMaterialised(t, spec); got.exit != 0 {
		t.Fatalf("relisted compile: %s", got.stderr)
	}
	// A scan that lacked ../inc/h.h.
	if _, err := c.Spec(ctx, o); err != nil {
		t.Fatal(err)
	}
	var kept []string
	for _, p := range c.deps.Listed {
		if !strings.HasSuffix(p, "/h.h") {
			kept = append(kept, p)
		}
	}
	if len(kept) == len(c.deps.Listed) {
		t.Fatalf("h.h not scanned: %q", c.deps.Listed)
	}
	c.deps.Listed = kept
	if _, missed, err := c.Relist(ctx, o); err != nil || !missed {
		t.Fatalf("Relist after a scan without h.h: missed %v, %v", missed, err)
	}
}

// BenchmarkScanProject scans every source of the generated project
// (cproject.DefaultOptions) with one Scanner, as gantry batch does; the
// time per op is per source. BenchmarkListProject runs the compiler's
// dependency listing (gcc -M) on the same sources, for comparison.
func BenchmarkScanProject(b *testing.B) {
	benchProject(b, false, func(ctx context.Context, sc *Scanner, c *Compile, id *Identity) error {
		_, err := sc.scan(ctx, c, id, os.Environ())
		return err
	})
}

// BenchmarkScanProjectPerRun is gantry batch's case: one Scanner for the
// run, which remembers what each header brings in.
func BenchmarkScanProjectPerRun(b *testing.B) {
	benchProject(b, true, func(ctx context.Context, sc *Scanner, c *Compile, id *Identity) error {
		_, err := sc.scan(ctx, c, id, os.Environ())
		return err
	})
}

func BenchmarkListProject(b *testing.B) {
	benchProject(b, false, func(ctx context.Context, _ *Scanner, c *Compile, _ *Identity) error {
		_, err := c.listDeps(ctx, os.Environ())
		return err
	})
}

func benchProject(b *testing.B, perRun bool, find func(context.Context, *Scanner, *Compile, *Identity) error) {
	if _, err := os.Stat("/usr/bin/gcc"); err != nil {
		b.Skip("gcc is not installed")
	}
	p, err := cproject.Generate(filepath.Join(b.TempDir(), "proj"), cproject.DefaultOptions)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	var compiles []*Compile
	for _, src := range p.Sources {
		argv := cproject.CompileArgs("gcc", src)
		c, err := Parse(argv[0], argv[1:], p.Dir)
		if err != nil {
			b.Fatal(err)
		}
		compiles = append(compiles, c)
	}
	id, err := NewIdentities("").Get(ctx, "gcc")
	if err != nil {
		b.Fatal(err)
	}
	sc := NewScanner("", perRun)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := find(ctx, sc, compiles[i%len(compiles)], id); err != nil {
			b.Fatal(err)
		}
	}
}

// TestScanChain checks gcc's merging of the search path against gcc's own
// (-v): missing directories dropped, a directory named twice (or through
// a symbolic link) kept at its first place, a -I or -iquote directory that
// is also a system directory searched at the system one's place, the last
// -iquote directory dropped when it is the first -I one.
func TestScanChain(t *testing.T) {
	needGCC(t)
	dir := t.TempDir()
	for _, d := range []string{"q", "i1", "i2", "sys", "after"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("i1", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	quote := []string{"q", "sys", "i1"}
	bracket := []string{"i1", "missing", "link", "i2", "sys", "/usr/include"}
	isystem, after := []string{"sys"}, []string{"after", "q"}
	var args []string
	for _, l := range []struct {
		flag string
		dirs []string
	}{{"-iquote", quote}, {"-I", bracket}, {"-isystem", isystem}, {"-idirafter", after}} {
		for _, d := range l.dirs {
			args = append(args, l.flag, d)
		}
	}
	cmd := exec.Command("gcc", append(args, "-E", "-v", "-x", "c", os.DevNull)...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("gcc -v: %v: %s", err, out)
	}
	var gccQuote, gccBracket []string
	var list *[]string
	for _, line := range strings.Split(string(out), "\n") {
		switch {
		case strings.HasPrefix(line, `#include "..."`):
			list = &gccQuote
		case strings.HasPrefix(line, "#include <...>"):
			list = &gccBracket
		case strings.HasPrefix(line, "End of search list."):
			list = nil
		case list != nil && strings.HasPrefix(line, " "):
			*list = append(*list, strings.TrimSpace(line))
		}
	}
	defaults, _, err := probeSystemDirs(context.Background(), "gcc", dir, os.Environ(), nil, "c")
	if err != nil {
		t.Fatal(err)
	}
	c := buildChain(dir, quote, bracket, isystem, defaults, after)
	if got, want := strings.Join(c.dirs, " "), strings.Join(append(gccQuote, gccBracket...), " "); got != want || c.bracket != len(gccQuote) {
		t.Fatalf("chain %q (bracket from %d)\ngcc's %q (bracket from %d)", got, c.bracket, want, len(gccQuote))
	}
}

// TestScanPredef: gcc reads <stdc-predef.h> before the source; the scan
// lists it even when the source includes nothing.
func TestScanPredef(t *testing.T) {
	needGCC(t)
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{"empty.c": "int x;\n"})
	scanned, listed := scanAndList(t, NewScanner("", false), dir, []string{"gcc", "-c", "empty.c"})
	checkSuperset(t, dir, dir, scanned, listed)
}

// TestScanSeesNewHeader: a header created between two compiles of one
// process (by an earlier job) shadows the one found before, as it does
// for the compiler.
func TestScanSeesNewHeader(t *testing.T) {
	needGCC(t)
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{"a.c": "#include \"gen.h\"\n", "b/gen.h": "\n", "a/.keep": ""})
	sc := NewScanner("", false)
	argv := []string{"gcc", "-Ia", "-Ib", "-c", "a.c"}
	scanned, _ := scanAndList(t, sc, dir, argv)
	if !slicesContain(scanned, "b/gen.h") {
		t.Fatalf("first scan: %q", scanned)
	}
	writeTree(t, dir, map[string]string{"a/gen.h": "\n"})
	// Whatever the file system's timestamp granularity, the directory
	// has changed.
	later := time.Now().Add(time.Hour)
	if err := os.Chtimes(filepath.Join(dir, "a"), later, later); err != nil {
		t.Fatal(err)
	}
	scanned, listed := scanAndList(t, sc, dir, argv)
	checkSuperset(t, dir, dir, scanned, listed)
	if !slicesContain(scanned, "a/gen.h") || slicesContain(scanned, "b/gen.h") {
		t.Fatalf("second scan: %q", scanned)
	}
}

// TestScanPerRun: a per-run Scanner (gantry batch) looks at each file and
// directory once per run; a header the run writes (Forget) or a local
// command may have written (ForgetAll) is seen, and the scan's metadata of
// every listed file is handed on (Infos) so that nobody stats it again.
func TestScanPerRun(t *testing.T) {
	needGCC(t)
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{"a.c": "#include \"gen.h\"\n#include \"other.h\"\n", "b/gen.h": "\n", "b/other.h": "// other\n", "a/.keep": ""})
	sc := NewScanner("", true)
	argv := []string{"gcc", "-Ia", "-Ib", "-c", "a.c"}
	scan := func() *depsResult {
		t.Helper()
		c, err := Parse(argv[0], argv[1:], dir)
		if err != nil {
			t.Fatal(err)
		}
		id, err := NewIdentities("").Get(context.Background(), c.Compiler)
		if err != nil {
			t.Fatal(err)
		}
		r, err := sc.scan(context.Background(), c, id, os.Environ())
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	first := scan()
	if !slicesContain(first.Listed, "b/gen.h") {
		t.Fatalf("first scan: %q", first.Listed)
	}
	for _, p := range first.Listed {
		info := first.Infos[p]
		st, err := os.Stat(filepath.Join(dir, p))
		if filepath.IsAbs(p) {
			st, err = os.Stat(p)
		}
		if err != nil || info == nil || info.Size() != st.Size() || !info.ModTime().Equal(st.ModTime()) {
			t.Errorf("Infos[%s] = %v, want os.Stat's %v (%v)", p, info, st, err)
		}
	}

	writeTree(t, dir, map[string]string{"a/gen.h": "\n"})
	later := time.Now().Add(time.Hour)
	if err := os.Chtimes(filepath.Join(dir, "a"), later, later); err != nil {
		t.Fatal(err)
	}
	if got := scan().Listed; !slicesContain(got, "b/gen.h") {
		t.Fatalf("a per-run scan looked again without being told: %q", got)
	}
	sc.Forget(filepath.Join(dir, "a/gen.h"))
	if got := scan().Listed; !slicesContain(got, "a/gen.h") || slicesContain(got, "b/gen.h") {
		t.Fatalf("after Forget: %q", got)
	}

	// A removed header is not seen as long as nobody says so; ForgetAll
	// says everything may have changed.
	if err := os.Remove(filepath.Join(dir, "a/gen.h")); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(filepath.Join(dir, "a"), later.Add(time.Hour), later.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if got := scan().Listed; !slicesContain(got, "a/gen.h") {
		t.Fatalf("a per-run scan looked again without being told: %q", got)
	}
	sc.ForgetAll()
	if got := scan().Listed; slicesContain(got, "a/gen.h") || !slicesContain(got, "b/gen.h") {
		t.Fatalf("after ForgetAll: %q", got)
	}

	// An output directory: what is under it is looked at again.
	writeTree(t, dir, map[string]string{"a/gen.h": "\n"})
	sc.ForgetTree(filepath.Join(dir, "a"))
	if got := scan().Listed; !slicesContain(got, "a/gen.h") {
		t.Fatalf("after ForgetTree: %q", got)
	}
	os.Remove(filepath.Join(dir, "a/gen.h"))
	sc.ForgetTree(filepath.Join(dir, "a"))
	if got := scan().Listed; slicesContain(got, "a/gen.h") {
		t.Fatalf("after ForgetTree of a removal: %q", got)
	}
}

func slicesContain(list []string, s string) bool {
	for _, l := range list {
		if l == s {
			return true
		}
	}
	return false
}

// TestScanPragmaDependency: the file a #pragma GCC dependency names is
// sent (the compile fails without it, and gcc's listing does not name
// it), but not read for directives.
func TestScanPragmaDependency(t *testing.T) {
	needGCC(t)
	dir := project(t)
	writeTree(t, dir, map[string]string{
		"src/p.c":       "#pragma GCC dependency \"grammar.y\"\n#include \"h.h\"\nint p = H;\n",
		"src/grammar.y": "#include \"not_a_header.h\"\n%%\n",
	})
	build := filepath.Join(dir, "build")
	argv := []string{"gcc", "-c", "../src/p.c", "-I../inc", "-o", "p.o"}
	c, spec, got := remoteCompile(t, build, argv, scanOptions(t, nil))
	if !c.Scanned() {
		t.Fatal("not scanned")
	}
	want := runLocal(t, build, argv, c.Output)
	if got.exit != 0 || want.exit != 0 || string(got.object) != string(want.object) {
		t.Fatalf("objects differ (remote exit %d: %s)\nargs %q", got.exit, got.stderr, spec.Args)
	}
}

// TestScanProbeOnDisk: a second launcher process (a new Scanner, the same
// cache directory) scans without running the compiler; a directory the
// compiler ignored as missing that now exists makes it probe again.
func TestScanProbeOnDisk(t *testing.T) {
	needGCC(t)
	compiler, runs := countingCompiler(t)
	cache := t.TempDir()
	dir := t.TempDir()
	sysroot := filepath.Join(dir, "sysroot")
	writeTree(t, dir, map[string]string{"a.c": "#include \"a.h\"\n", "a.h": "\n", "sysroot/.keep": ""})
	ids := NewIdentities(cache)
	scan := func() []string {
		t.Helper()
		c, err := Parse(compiler, []string{"--sysroot=" + sysroot, "-c", "a.c"}, dir)
		if err != nil {
			t.Fatal(err)
		}
		id, err := ids.Get(context.Background(), compiler)
		if err != nil {
			t.Fatal(err)
		}
		got, err := listedOf(NewScanner(cache, false).scan(context.Background(), c, id, os.Environ()))
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	first := scan()
	n := runs()
	if second := scan(); runs() != n || strings.Join(second, " ") != strings.Join(first, " ") {
		t.Fatalf("second process: %d compiler runs (want %d), %q vs %q", runs(), n, second, first)
	}
	// gcc ignores <sysroot>/usr/include while it does not exist.
	writeTree(t, sysroot, map[string]string{"usr/include/stdc-predef.h": "\n"})
	got := scan()
	if runs() != n+1 {
		t.Fatalf("after creating an ignored directory: %d compiler runs, want %d", runs(), n+1)
	}
	if !slicesContain(got, filepath.Join(sysroot, "usr/include/stdc-predef.h")) {
		t.Errorf("the new directory's header is not scanned: %q", got)
	}
}

// TestScanMissingHeader: a header missing in a live branch is skipped by
// the scan; the remote compile then fails with the local compiler's
// message (paths mapped back) and exit code, and Relist, whose listing
// fails too, says to run locally.
func TestScanMissingHeader(t *testing.T) {
	needGCC(t)
	dir := project(t)
	build := filepath.Join(dir, "build")
	for _, src := range []string{"../src/a.c", filepath.Join(dir, "src/a.c")} {
		argv := []string{"gcc", "-c", src, "-o", "a.o"} // no -I../inc: h.h is missing
		o := scanOptions(t, nil)
		c, _, got := remoteCompile(t, build, argv, o)
		if !c.Scanned() {
			t.Fatal("not scanned")
		}
		want := runLocal(t, build, argv, c.Output)
		if want.exit == 0 || got.exit != want.exit || string(c.MapDiagnostics(got.stderr)) != string(want.stderr) {
			t.Errorf("%s: remote exit %d, stderr %q\nlocal exit %d, stderr %q", src, got.exit, c.MapDiagnostics(got.stderr), want.exit, want.stderr)
		}
		if _, _, err := c.Relist(context.Background(), o); !isLocalWith(err, "dependency listing failed") {
			t.Errorf("Relist: %v", err)
		}
	}
}

// listedOf is a scan's list of inputs.
func listedOf(r *depsResult, err error) ([]string, error) {
	if err != nil {
		return nil, err
	}
	return r.Listed, nil
}

// perRunScanner returns a per-run Scanner and a function that scans a
// source of dir compiled with flags into out/, returning the inputs it
// lists.
func perRunScanner(t *testing.T, dir string, flags ...string) (*Scanner, func(src string) []string) {
	t.Helper()
	sc := NewScanner("", true)
	id, err := NewIdentities("").Get(context.Background(), "gcc")
	if err != nil {
		t.Fatal(err)
	}
	return sc, func(src string) []string {
		t.Helper()
		args := append(append([]string(nil), flags...), "-c", src, "-o", "out/"+src+".o")
		c, err := Parse("gcc", args, dir)
		if err != nil {
			t.Fatal(err)
		}
		got, err := listedOf(sc.scan(context.Background(), c, id, os.Environ()))
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
}

// TestScanPerRunClosures: a per-run Scanner reuses what a header brings
// in across compiles; a file the run writes drops that only when its name
// can appear in a directive, so a header generated mid-run deep below an
// included header is seen, and an object file costs nothing.
func TestScanPerRunClosures(t *testing.T) {
	needGCC(t)
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{
		"a.c":         "#include \"top.h\"\n",
		"b.c":         "#include \"top.h\"\n",
		"inc/top.h":   "#include \"mid.h\"\n",
		"inc/mid.h":   "#if 0\n#include <gen/deep.h>\n#endif\n",
		"out/.keep":   "",
		"inc/gen/.ke": "",
	})
	sc, scan := perRunScanner(t, dir, "-Iinc")
	if got := scan("a.c"); !slicesContain(got, "inc/mid.h") || slicesContain(got, "inc/gen/deep.h") {
		t.Fatalf("a.c: %q", got)
	}
	if len(sc.closures) == 0 {
		t.Fatal("no closure remembered for top.h")
	}
	writeTree(t, dir, map[string]string{"out/a.c.o": "object"})
	sc.Forget(filepath.Join(dir, "out/a.c.o"))
	if len(sc.closures) == 0 {
		t.Error("forgetting an object file dropped the closures")
	}
	writeTree(t, dir, map[string]string{"inc/gen/deep.h": "#include \"deeper.h\"\n", "inc/gen/deeper.h": "\n"})
	sc.Forget(filepath.Join(dir, "inc/gen/deep.h"))
	sc.Forget(filepath.Join(dir, "inc/gen/deeper.h"))
	if got := scan("b.c"); !slicesContain(got, "inc/gen/deep.h") || !slicesContain(got, "inc/gen/deeper.h") {
		t.Fatalf("b.c after deep.h was written and forgotten: %q", got)
	}
}

// TestScanPerRunChain: a per-run Scanner builds a search chain (statting
// its directories) once for every compile with the same directories; a
// directory of the chain that was missing and that the run creates
// (Forget) is searched from then on, and ForgetAll builds anew.
func TestScanPerRunChain(t *testing.T) {
	needGCC(t)
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{
		"a.c":     "#include \"h.h\"\n",
		"b.c":     "#include \"h.h\"\n",
		"inc/h.h": "\n",
		"out/.k":  "",
	})
	sc, scan := perRunScanner(t, dir, "-Igen", "-Iinc")
	if got := scan("a.c"); !slicesContain(got, "inc/h.h") {
		t.Fatalf("a.c: %q", got)
	}
	writeTree(t, dir, map[string]string{"out/a.c.o": "object"})
	sc.Forget(filepath.Join(dir, "out/a.c.o"))
	if got := scan("b.c"); !slicesContain(got, "inc/h.h") {
		t.Fatalf("b.c: %q", got)
	}
	if sc.chainBuilds != 1 {
		t.Errorf("two compiles with the same directories built the chain %d times, want once", sc.chainBuilds)
	}

	// gen appears; until the run says so, the chain is as it was.
	writeTree(t, dir, map[string]string{"gen/h.h": "\n"})
	if got := scan("b.c"); slicesContain(got, "gen/h.h") || sc.chainBuilds != 1 {
		t.Fatalf("a per-run scan looked again without being told: %q (%d builds)", got, sc.chainBuilds)
	}
	sc.Forget(filepath.Join(dir, "gen/h.h"))
	if got := scan("b.c"); !slicesContain(got, "gen/h.h") || slicesContain(got, "inc/h.h") {
		t.Fatalf("after gen/h.h was written and forgotten: %q", got)
	}
	if sc.chainBuilds != 2 {
		t.Errorf("%d chain builds after Forget, want 2", sc.chainBuilds)
	}
	sc.ForgetAll()
	scan("a.c")
	if sc.chainBuilds != 3 {
		t.Errorf("%d chain builds after ForgetAll, want 3", sc.chainBuilds)
	}
}

// searchFlagsOf sorts a command line's flags into the search path's
// parts, the forced includes and the flags the compiler is probed with;
// a path the scanner cannot follow gives up on scanning.
func TestSearchFlagsOf(t *testing.T) {
	c, err := Parse("gcc", []string{"-c", "a.c", "-Iinc", "-iquote", "q", "-isystem", "s", "-idirafter", "d", "-include", "f.h", "-DX=1", "-O2", "-std=c11", "-o", "a.o"}, "/p")
	if err != nil {
		t.Fatal(err)
	}
	sf, err := searchFlagsOf(c)
	if err != nil {
		t.Fatal(err)
	}
	got := fmt.Sprint(sf.bracket, sf.quote, sf.isystem, sf.after, sf.forced, sf.probe)
	if want := "[inc] [q] [s] [d] [f.h] [-std=c11]"; got != want {
		t.Errorf("got %s, want %s", got, want)
	}
	for _, args := range [][]string{{"-c", "a.c", "-I=inc"}, {"-c", "a.c", "-I$SYSROOT/inc"}} {
		c, err := Parse("gcc", args, "/p")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := searchFlagsOf(c); err == nil {
			t.Errorf("%q: scanned, want the listing", args)
		}
	}
	if lang, err := scanLanguage(&Compile{Source: "a.cc"}); err != nil || lang != "c++" {
		t.Errorf("a.cc: %q %v", lang, err)
	}
	if _, err := scanLanguage(&Compile{Source: "a.i"}); err == nil {
		t.Error("preprocessed source: scanned, want the listing")
	}
}
