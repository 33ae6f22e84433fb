package cc

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// countingCompiler writes a compiler script that counts its runs in a
// file and runs gcc.
func countingCompiler(t *testing.T) (compiler string, runs func() int) {
	t.Helper()
	dir := t.TempDir()
	count := filepath.Join(dir, "count")
	compiler = filepath.Join(dir, "mygcc")
	script := "#!/bin/sh\necho x >> '" + count + "'\nexec gcc \"$@\"\n"
	if err := os.WriteFile(compiler, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return compiler, func() int {
		data, _ := os.ReadFile(count)
		return strings.Count(string(data), "x")
	}
}

// TestDirectModeCache checks that a second launcher process (a new
// Identities, the same cache directory) builds the same Spec without
// running the compiler at all, and that a changed header, or a corrupt
// entry, makes it list again.
func TestDirectModeCache(t *testing.T) {
	needGCC(t)
	dir := project(t)
	build := filepath.Join(dir, "build")
	compiler, runs := countingCompiler(t)
	cacheDir := t.TempDir()
	argv := []string{"-c", "../src/a.c", "-I../inc", "-MD", "-o", "a.o"}
	spec := func() (*Compile, []string) {
		t.Helper()
		o := newOptions(t, nil)
		o.Identities = NewIdentities(cacheDir) // a new process each time
		o.Deps = NewDepsCache(cacheDir, 1000)
		c, err := Parse(compiler, argv, build)
		if err != nil {
			t.Fatal(err)
		}
		s, err := c.Spec(context.Background(), o)
		if err != nil {
			t.Fatal(err)
		}
		var paths []string
		for _, in := range s.Inputs {
			paths = append(paths, in.Path)
		}
		return c, paths
	}
	c1, first := spec()
	n := runs()
	if n == 0 {
		t.Fatal("the first Spec ran no compiler")
	}
	c2, second := spec()
	if runs() != n {
		t.Fatalf("a cache hit ran the compiler %d more times", runs()-n)
	}
	if !reflect.DeepEqual(first, second) {
		t.Fatalf("inputs differ on a hit:\n%q\n%q", first, second)
	}
	_, d1 := c1.DepFile()
	_, d2 := c2.DepFile()
	if len(d1) == 0 || string(d1) != string(d2) {
		t.Fatalf("dependency file differs on a hit: %q vs %q", d1, d2)
	}

	// Touching a header without changing it is still a hit.
	h := filepath.Join(dir, "inc/h.h")
	later := time.Now().Add(time.Minute)
	if err := os.Chtimes(h, later, later); err != nil {
		t.Fatal(err)
	}
	spec()
	if runs() != n {
		t.Fatal("a touched, unchanged header missed the cache")
	}

	// The same size, another content: the content decides.
	writeTree(t, dir, map[string]string{"inc/h.h": "#define H 5\n"})
	spec()
	if runs() == n {
		t.Fatal("a header with new content of the same size hit the cache")
	}
	n = runs()

	// A header that now includes another one: the listing runs again and
	// the new header is an input.
	writeTree(t, dir, map[string]string{"inc/h.h": "#include \"extra.h\"\n#define H 4\n", "inc/extra.h": "\n"})
	_, third := spec()
	if runs() == n {
		t.Fatal("a changed header hit the cache")
	}
	if !contains(third, "inc/extra.h") {
		t.Fatalf("the new header is not an input: %q", third)
	}

	// A corrupt entry is a miss, not an error.
	n = runs()
	entries, _ := filepath.Glob(filepath.Join(cacheDir, "deps", "*", "*"))
	if len(entries) == 0 {
		t.Fatal("no cache entries on disk")
	}
	for _, e := range entries {
		os.WriteFile(e, []byte("{not json"), 0o644)
	}
	spec()
	if runs() == n {
		t.Fatal("a corrupt entry was used")
	}
}

// TestDepsCacheBound checks that a shard keeps at most its share.
func TestDepsCacheBound(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "a.c")
	writeTree(t, dir, map[string]string{"a.c": "int x;\n"})
	d := NewDepsCache(filepath.Join(dir, "cache"), 2*256) // two per shard
	for i, key := range []string{"aa01", "aa02", "aa03"} {
		if err := d.put(key, dir, &depsResult{Listed: []string{f}}); err != nil {
			t.Fatal(err)
		}
		// Distinct ages for the eviction order.
		old := time.Now().Add(time.Duration(i-10) * time.Minute)
		os.Chtimes(d.path(key), old, old)
	}
	if _, ok := d.get("aa01"); ok {
		t.Error("the oldest entry survived")
	}
	for _, key := range []string{"aa02", "aa03"} {
		if _, ok := d.get(key); !ok {
			t.Errorf("entry %s was evicted", key)
		}
	}
}

func contains(list []string, s string) bool {
	for _, l := range list {
		if l == s {
			return true
		}
	}
	return false
}

// BenchmarkSpecCached is the launcher's own cost per compile in a
// process that builds many (gantry batch): Parse and Spec on a
// direct-mode cache hit, with <stdio.h> and friends among the inputs.
func BenchmarkSpecCached(b *testing.B) {
	if _, err := exec.LookPath("gcc"); err != nil {
		b.Skip("gcc is not installed")
	}
	dir := b.TempDir()
	files := map[string]string{"inc/h.h": "#define H 3\n"}
	for i := 0; i < 10; i++ {
		files[fmt.Sprintf("src/f%d.c", i)] = fmt.Sprintf("#include <stdio.h>\n#include <stdlib.h>\n#include \"h.h\"\nint f%d(void) { return H + %d; }\n", i, i)
	}
	for p, content := range files {
		os.MkdirAll(filepath.Join(dir, filepath.Dir(p)), 0o755)
		os.WriteFile(filepath.Join(dir, p), []byte(content), 0o644)
	}
	build := filepath.Join(dir, "build")
	os.MkdirAll(build, 0o755)
	s, _ := SettingsFromEnv(func(string) string { return "" })
	o := Options{Settings: s, Env: os.Environ(), Identities: NewIdentities(""), Deps: NewDepsCache(b.TempDir(), 1000)}
	run := func(i int) {
		c, err := Parse("gcc", []string{"-O2", "-c", fmt.Sprintf("../src/f%d.c", i%10), "-I../inc", "-MD", "-o", fmt.Sprintf("f%d.o", i%10)}, build)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := c.Spec(context.Background(), o); err != nil {
			b.Fatal(err)
		}
	}
	for i := 0; i < 10; i++ {
		run(i) // fill the caches
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		run(i)
	}
}
