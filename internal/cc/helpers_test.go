package cc

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gantry-build/gantry/internal/remote"
)

// needGCC skips a test without gcc, or fails it under CI=true, where the
// launcher's tests must not pass by skipping.
func needGCC(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("gcc"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("gcc is not installed; CI=true, so not skipping")
		}
		t.Skip("gcc is not installed")
	}
}

// writeTree creates files (path -> content) under dir.
func writeTree(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for p, content := range files {
		full := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// project is a small C project in nested directories, with a header
// found through -I, one next to the source and system headers.
func project(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "proj")
	writeTree(t, dir, map[string]string{
		"src/a.c": `#include <stdio.h>
#include <assert.h>
#include "local.h"
#include "h.h"
const char *file = __FILE__;
int f(int x) { assert(x > 0); printf("%s %d\n", __FILE__, H + LOCAL); return x + H; }
`,
		"src/local.h":     "#define LOCAL 2\nstatic const char *local_file = __FILE__;\n",
		"inc/h.h":         "#define H 3\n",
		"inc/force.h":     "#define FORCED 1\n",
		"src/s.S":         "#include \"h.h\"\n.globl x\n.data\nx: .long H\n",
		"src/b.cc":        "#include <string>\n#include <vector>\n#include \"h.h\"\nstd::string g(int n) { std::vector<int> v(n, H); return std::to_string(v.size()) + __FILE__; }\n",
		"build/.keep":     "",
		"build/obj/.keep": "",
		"src/broken.c":    "#include <stdio.h>\n#include \"h.h\"\nint g(void) { printf(1); return H }\n",
	})
	return dir
}

// newOptions are Options for tests: send mode, no caches on disk.
func newOptions(t *testing.T, mutate func(*Settings)) Options {
	t.Helper()
	s, err := SettingsFromEnv(func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	s.CacheDir = ""
	if mutate != nil {
		mutate(&s)
	}
	return Options{Settings: s, Env: os.Environ(), Identities: NewIdentities("")}
}

// result is what one compile produced.
type result struct {
	exit   int
	stderr []byte
	object []byte
}

// runLocal runs the compiler command line in cwd, reads the object and
// removes it (so that a later run cannot pass by reusing it).
func runLocal(t *testing.T, cwd string, argv []string, object string) result {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = cwd
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = io.Discard, &stderr
	r := result{exit: exitCode(t, cmd.Run()), stderr: stderr.Bytes()}
	if object != "" {
		if !filepath.IsAbs(object) {
			object = filepath.Join(cwd, object)
		}
		r.object, _ = os.ReadFile(object)
		os.Remove(object)
	}
	return r
}

func exitCode(t *testing.T, err error) int {
	t.Helper()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.ExitCode()
	default:
		t.Fatalf("running the compiler: %v", err)
		return -1
	}
}

// runMaterialised does what a worker does with spec, without a server:
// copies each input into a fresh directory (the input root), creates the
// outputs' parents, runs Args there in WorkingDir with Env only, and reads
// the object back.
func runMaterialised(t *testing.T, spec remote.Spec) result {
	t.Helper()
	return runMaterialisedEdited(t, spec, nil)
}

// runMaterialisedEdited is runMaterialised with contents replaced for
// some input paths (path -> content).
func runMaterialisedEdited(t *testing.T, spec remote.Spec, edit map[string]string) result {
	t.Helper()
	root := filepath.Join(t.TempDir(), "remote-root")
	for _, in := range spec.Inputs {
		if content, ok := edit[in.Path]; ok {
			writeTree(t, root, map[string]string{in.Path: content})
			continue
		}
		if in.Path == "" || filepath.IsAbs(in.Path) || strings.Contains("/"+in.Path+"/", "/../") {
			t.Fatalf("input path %q is not a clean relative path", in.Path)
		}
		data, err := os.ReadFile(in.Local)
		if err != nil {
			t.Fatalf("input %s: %v", in.Local, err)
		}
		writeTree(t, root, map[string]string{in.Path: string(data)})
	}
	wd := filepath.Join(root, filepath.FromSlash(spec.WorkingDir))
	for _, o := range spec.OutputFiles {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(wd, o)), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(wd, 0o755); err != nil {
		t.Fatal(err)
	}
	path, err := exec.LookPath(spec.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(path, spec.Args[1:]...)
	cmd.Dir, cmd.Env = wd, spec.Env
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = io.Discard, &stderr
	r := result{exit: exitCode(t, cmd.Run()), stderr: stderr.Bytes()}
	if len(spec.OutputFiles) != 1 {
		t.Fatalf("outputs %v, want one object", spec.OutputFiles)
	}
	r.object, _ = os.ReadFile(filepath.Join(wd, spec.OutputFiles[0]))
	return r
}

// remoteCompile parses argv in cwd, builds the Spec and runs it
// materialised.
func remoteCompile(t *testing.T, cwd string, argv []string, o Options) (*Compile, remote.Spec, result) {
	t.Helper()
	c, err := Parse(argv[0], argv[1:], cwd)
	if err != nil {
		t.Fatalf("Parse(%q): %v", argv, err)
	}
	spec, err := c.Spec(context.Background(), o)
	if err != nil {
		t.Fatalf("Spec(%q): %v", argv, err)
	}
	return c, spec, runMaterialised(t, spec)
}
