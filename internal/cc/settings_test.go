package cc

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestSettingsFromEnv(t *testing.T) {
	env := func(kv ...string) func(string) string {
		m := map[string]string{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return func(k string) string { return m[k] }
	}
	s, err := SettingsFromEnv(env())
	if err != nil || s.Headers != HeadersSend || !s.Fallback || s.Verbose || s.RemotePath != DefaultRemotePath || s.CacheEntries != 20000 {
		t.Fatalf("defaults: %+v %v", s, err)
	}
	s, err = SettingsFromEnv(env("GANTRY_CC_HEADERS", "worker", "GANTRY_CC_FALLBACK", "false", "GANTRY_CC_VERBOSE", "1",
		"GANTRY_CACHE_DIR", "/c", "GANTRY_CC_PROJECT_ROOT", "/p/", "GANTRY_CC_PLATFORM", "OSFamily=linux,ISA=x86-64", "GANTRY_CC_CACHE_ENTRIES", "5"))
	if err != nil || s.Headers != HeadersWorker || s.Fallback || !s.Verbose || s.CacheDir != "/c/cc" || s.ProjectRoot != "/p" ||
		!reflect.DeepEqual(s.Platform, []string{"OSFamily=linux", "ISA=x86-64"}) || s.CacheEntries != 5 {
		t.Fatalf("set: %+v %v", s, err)
	}
	if !s.Scanner {
		t.Error("the include scanner is not on by default")
	}
	if s, err := SettingsFromEnv(env("GANTRY_CC_SCANNER", "off")); err != nil || s.Scanner {
		t.Errorf("GANTRY_CC_SCANNER=off: %v %v", s.Scanner, err)
	}
	if s, _ := SettingsFromEnv(env("GANTRY_CACHE_DIR", "off")); s.CacheDir != "" {
		t.Errorf("GANTRY_CACHE_DIR=off: %q", s.CacheDir)
	}
	for _, bad := range [][]string{
		{"GANTRY_CC_HEADERS", "all"}, {"GANTRY_CC_FALLBACK", "maybe"}, {"GANTRY_CC_VERBOSE", "2"},
		{"GANTRY_CC_PROJECT_ROOT", "rel"}, {"GANTRY_CACHE_DIR", "rel"}, {"GANTRY_CC_CACHE_ENTRIES", "-1"},
		{"GANTRY_CC_PLATFORM", "novalue"}, {"GANTRY_CC_SCANNER", "sometimes"},
	} {
		if _, err := SettingsFromEnv(env(bad...)); err == nil || !strings.Contains(err.Error(), bad[0]) {
			t.Errorf("%s=%s: error %v should name the variable", bad[0], bad[1], err)
		}
	}
}

// TestIdentity checks that gcc's identity is found, stable, cached on disk
// (a second process runs nothing) and changes with the binary.
func TestIdentity(t *testing.T) {
	needGCC(t)
	compiler, runs := countingCompiler(t)
	cache := t.TempDir()
	a, err := NewIdentities(cache).Get(context.Background(), compiler)
	if err != nil {
		t.Fatal(err)
	}
	if len(a.Salt) == 0 || len(a.InstallDirs) == 0 || len(a.SystemDirs) == 0 {
		t.Fatalf("identity %+v", a)
	}
	n := runs()
	b, err := NewIdentities(cache).Get(context.Background(), compiler)
	if err != nil || runs() != n || string(a.Salt) != string(b.Salt) {
		t.Fatalf("second process: %v, %d more runs, same salt %v", err, runs()-n, string(a.Salt) == string(b.Salt))
	}
	// Another binary (one more byte) is another compiler.
	f, _ := os.OpenFile(compiler, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString("# changed\n")
	f.Close()
	later := time.Now().Add(time.Minute)
	os.Chtimes(compiler, later, later)
	c, err := NewIdentities(cache).Get(context.Background(), compiler)
	if err != nil || string(c.Salt) == string(a.Salt) {
		t.Fatalf("changed binary: %v, same salt %v", err, string(c.Salt) == string(a.Salt))
	}
	if !a.owns(filepath.Join(a.InstallDirs[0], "include/stddef.h")) || a.owns("/usr/include/stdio.h") || !a.system("/usr/include/stdio.h") {
		t.Errorf("classification: install %v system %v", a.InstallDirs, a.SystemDirs)
	}
}

// TestSearchDirs reads the -v output of the --sysroot probe, gcc's and
// clang's forms.
func TestSearchDirs(t *testing.T) {
	out := `ignoring duplicate directory "/usr/include/x86_64-linux-gnu/c++/12"
ignoring nonexistent directory "` + probeSysroot + `/usr/local/include"
ignoring nonexistent directory "/usr/lib/gcc/x86_64-linux-gnu/12/include-fixed"
ignoring nonexistent directory "` + probeSysroot + `/usr/include"
#include "..." search starts here:
#include <...> search starts here:
 /usr/include/c++/12
 /usr/lib/gcc/x86_64-linux-gnu/12/../../../../include/c++/12/backward
 /usr/lib/llvm-16/lib/clang/16/include
 /System/Library/Frameworks (framework directory)
End of search list.
`
	own, moved := searchDirs([]byte(out))
	wantOwn := []string{"/usr/include/c++/12", "/usr/include/c++/12/backward", "/usr/lib/llvm-16/lib/clang/16/include", "/System/Library/Frameworks"}
	if !reflect.DeepEqual(own, wantOwn) || !reflect.DeepEqual(moved, []string{"/usr/local/include", "/usr/include"}) {
		t.Fatalf("own %q moved %q", own, moved)
	}
}
