package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// gantryCC runs `gantry cc args...` in-process in dir and returns its exit
// code (as main would exit), stdout and stderr.
func gantryCC(t *testing.T, dir string, args ...string) (int, string, string) {
	t.Helper()
	return gantryIn(t, dir, append([]string{"cc"}, args...)...)
}

// localCC runs the compiler in dir and returns its exit code and stderr.
func localCC(t *testing.T, dir string, argv ...string) (int, string) {
	t.Helper()
	c := exec.Command(argv[0], argv[1:]...)
	c.Dir = dir
	var stderr bytes.Buffer
	c.Stderr = &stderr
	err := c.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, stderr.String()
	case errors.As(err, &ee):
		return ee.ExitCode(), stderr.String()
	}
	t.Fatal(err)
	return 0, ""
}

func needCC(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("gcc"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("gcc is not installed; CI=true, so not skipping")
		}
		t.Skip("gcc is not installed")
	}
}

// ccProject is a small C project: a source in src/, a header in inc/,
// and build/ to compile in.
func ccProject(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{
		"src/a.c":      "#include <stdio.h>\n#include \"h.h\"\nint f(void) { printf(\"%s %d\\n\", __FILE__, H); return H; }\n",
		"src/broken.c": "#include <stdio.h>\n#include \"h.h\"\nint g(void) { printf(1); return H }\n",
		"inc/h.h":      "#define H 3\n",
		"build/.keep":  "",
	})
	return dir
}

// TestCCRemote compiles through a server: the object and the dependency
// file are byte-identical to a local compile's, and the second compile is
// a cache hit.
func TestCCRemote(t *testing.T) {
	needCC(t)
	addr := startExecServer(t)
	dir := ccProject(t)
	build := filepath.Join(dir, "build")
	t.Setenv("GANTRY_SERVER", addr)
	t.Setenv("GANTRY_CACHE_DIR", t.TempDir())
	t.Setenv("GANTRY_CC_VERBOSE", "true")
	t.Setenv("GANTRY_CC_FALLBACK", "false") // a remote failure must fail the test
	argv := []string{"gcc", "-c", filepath.Join(dir, "src/a.c"), "-I" + filepath.Join(dir, "inc"), "-MD", "-MF", "deps/a.d", "-o", "obj/a.o"}
	os.MkdirAll(filepath.Join(build, "obj"), 0o755)
	os.MkdirAll(filepath.Join(build, "deps"), 0o755)

	if code, _ := localCC(t, build, argv...); code != 0 {
		t.Fatal("local compile failed")
	}
	wantObj, _ := os.ReadFile(filepath.Join(build, "obj/a.o"))
	wantDep, _ := os.ReadFile(filepath.Join(build, "deps/a.d"))
	for i, how := range []string{"executed", "cache hit"} {
		os.Remove(filepath.Join(build, "obj/a.o"))
		os.Remove(filepath.Join(build, "deps/a.d"))
		code, _, stderr := gantryCC(t, build, argv...)
		if code != 0 {
			t.Fatalf("run %d: exit %d: %s", i, code, stderr)
		}
		if !strings.Contains(stderr, "gantry cc: "+how) {
			t.Errorf("run %d: -v says %q, want %q", i, stderr, how)
		}
		gotObj, _ := os.ReadFile(filepath.Join(build, "obj/a.o"))
		gotDep, _ := os.ReadFile(filepath.Join(build, "deps/a.d"))
		if len(gotObj) == 0 || !bytes.Equal(gotObj, wantObj) {
			t.Errorf("run %d: object differs from the local compile's (%d vs %d bytes)", i, len(gotObj), len(wantObj))
		}
		if !bytes.Equal(gotDep, wantDep) {
			t.Errorf("run %d: dependency file differs:\n got %q\nwant %q", i, gotDep, wantDep)
		}
	}
}

// TestCCCompileError: a broken source fails remotely with the local
// compiler's message and exit code, and is not compiled again locally.
func TestCCCompileError(t *testing.T) {
	needCC(t)
	addr := startExecServer(t)
	dir := ccProject(t)
	build := filepath.Join(dir, "build")
	t.Setenv("GANTRY_SERVER", addr)
	t.Setenv("GANTRY_CACHE_DIR", t.TempDir())
	t.Setenv("GANTRY_CC_FALLBACK", "false")
	for _, src := range []string{"../src/broken.c", filepath.Join(dir, "src/broken.c")} {
		argv := []string{"gcc", "-c", src, "-I" + filepath.Join(dir, "inc"), "-o", "b.o"}
		wantCode, wantErr := localCC(t, build, argv...)
		code, _, stderr := gantryCC(t, build, argv...)
		if code != wantCode || wantCode == 0 {
			t.Errorf("%s: exit %d, want %d", src, code, wantCode)
		}
		if stderr != wantErr {
			t.Errorf("%s: stderr differs\n got: %s\nwant: %s", src, stderr, wantErr)
		}
	}
}

// TestCCFallback: with the server unreachable the compile runs locally
// (and says so); with GANTRY_CC_FALLBACK=false it fails with exit 125 and
// says what to do.
func TestCCFallback(t *testing.T) {
	needCC(t)
	dir := ccProject(t)
	build := filepath.Join(dir, "build")
	t.Setenv("GANTRY_SERVER", "127.0.0.1:1")
	t.Setenv("GANTRY_CACHE_DIR", t.TempDir())
	argv := []string{"gcc", "-c", "../src/a.c", "-I../inc", "-o", "a.o"}
	code, _, stderr := gantryCC(t, build, argv...)
	if code != 0 || !strings.Contains(stderr, "compiling locally") {
		t.Fatalf("fallback: exit %d, stderr %q", code, stderr)
	}
	if _, err := os.Stat(filepath.Join(build, "a.o")); err != nil {
		t.Fatalf("fallback wrote no object: %v", err)
	}
	os.Remove(filepath.Join(build, "a.o"))
	t.Setenv("GANTRY_CC_FALLBACK", "false")
	code, _, stderr = gantryCC(t, build, argv...)
	if code != exitOwnFailure || !strings.Contains(stderr, "cannot reach Gantry at 127.0.0.1:1") {
		t.Fatalf("no fallback: exit %d, stderr %q", code, stderr)
	}
	if _, err := os.Stat(filepath.Join(build, "a.o")); err == nil {
		t.Fatal("compiled locally although GANTRY_CC_FALLBACK=false")
	}
}

// TestCCLocal: an invocation that is not a plain compile runs locally
// and unchanged, without a server, and -v says why.
func TestCCLocal(t *testing.T) {
	needCC(t)
	dir := ccProject(t)
	t.Setenv("GANTRY_SERVER", "127.0.0.1:1")
	t.Setenv("GANTRY_CC_FALLBACK", "false")
	t.Setenv("GANTRY_CC_VERBOSE", "true")
	code, stdout, stderr := gantryCC(t, filepath.Join(dir, "build"), "gcc", "-E", "-I../inc", "../src/a.c")
	if code != 0 || !strings.Contains(stdout, "int f(void)") {
		t.Fatalf("exit %d, stdout %.200q, stderr %q", code, stdout, stderr)
	}
	if !strings.Contains(stderr, "gantry cc: local: flag -E") {
		t.Errorf("-v does not say why: %q", stderr)
	}
}
