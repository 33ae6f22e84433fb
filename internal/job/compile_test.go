package job

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/gantry-build/gantry/internal/cc"
)

// localCompile runs argv in dir and returns its exit code and stderr.
func localCompile(t *testing.T, dir string, argv ...string) (int, []byte) {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, stderr.Bytes()
	case errors.As(err, &ee):
		return ee.ExitCode(), stderr.Bytes()
	}
	t.Fatal(err)
	return 0, nil
}

// remoteCompile makes a Compile of argv in dir and runs it on a server.
func remoteCompile(t *testing.T, run func(*Compile) CompileResult, dir string, argv ...string) CompileResult {
	t.Helper()
	c, err := cc.Parse(argv[0], argv[1:], dir)
	if err != nil {
		t.Fatal(err)
	}
	settings, err := cc.SettingsFromEnv(func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	settings.CacheDir = ""
	j, err := NewCompile(testCtx(t), c, CompileOptions(settings, os.Environ(), false))
	if err != nil {
		t.Fatal(err)
	}
	return run(j)
}

// TestCompileRun: a remote compile leaves the object and the dependency
// file a local compile leaves, byte for byte, and comes from the cache the
// second time; a broken source fails with the local compiler's exit code
// and messages, its paths mapped back.
func TestCompileRun(t *testing.T) {
	needGCC(t)
	client := newClient(t)
	run := func(j *Compile) CompileResult {
		t.Helper()
		r, err := j.Run(testCtx(t), client, nil)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{
		"src/a.c":      "#include <stdio.h>\n#include \"h.h\"\nint f(void) { printf(\"%s %d\\n\", __FILE__, H); return H; }\n",
		"src/broken.c": "#include <stdio.h>\n#include \"h.h\"\nint g(void) { printf(1); return H }\n",
		"inc/h.h":      "#define H 3\n",
		"build/.keep":  "",
	})
	build := filepath.Join(dir, "build")
	argv := []string{"gcc", "-c", "../src/a.c", "-I../inc", "-MD", "-MF", "a.d", "-o", "a.o"}
	if code, stderr := localCompile(t, build, argv...); code != 0 {
		t.Fatalf("local compile: exit %d: %s", code, stderr)
	}
	wantObj, _ := os.ReadFile(filepath.Join(build, "a.o"))
	wantDep, _ := os.ReadFile(filepath.Join(build, "a.d"))
	for i, cached := range []bool{false, true} {
		os.Remove(filepath.Join(build, "a.o"))
		os.Remove(filepath.Join(build, "a.d"))
		r := remoteCompile(t, run, build, argv...)
		if r.Code != 0 || r.DepFileErr != nil {
			t.Fatalf("run %d: exit %d, dependency file %v: %s", i, r.Code, r.DepFileErr, r.Stderr)
		}
		if r.Info.CacheHit() != cached {
			t.Errorf("run %d: cache hit %v, want %v", i, r.Info.CacheHit(), cached)
		}
		if got, _ := os.ReadFile(filepath.Join(build, "a.o")); len(got) == 0 || !bytes.Equal(got, wantObj) {
			t.Errorf("run %d: the object differs from the local compile's (%d against %d bytes)", i, len(got), len(wantObj))
		}
		if got, _ := os.ReadFile(filepath.Join(build, "a.d")); !bytes.Equal(got, wantDep) {
			t.Errorf("run %d: the dependency file differs:\n got %q\nwant %q", i, got, wantDep)
		}
	}

	broken := []string{"gcc", "-c", filepath.Join(dir, "src/broken.c"), "-I../inc", "-o", "b.o"}
	wantCode, wantErr := localCompile(t, build, broken...)
	r := remoteCompile(t, run, build, broken...)
	if r.Code != wantCode || wantCode == 0 {
		t.Errorf("broken source: exit %d, want %d", r.Code, wantCode)
	}
	if !bytes.Equal(r.Stderr, wantErr) {
		t.Errorf("broken source: messages differ\n got: %s\nwant: %s", r.Stderr, wantErr)
	}
}
