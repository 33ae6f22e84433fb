package cc

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gantry-build/gantry/internal/remote"
)

// TestSpecObjectsIdentical compiles the same source locally and from the
// Spec in another directory, and compares the objects byte for byte: with
// relative and absolute paths, -I dirs, -include, debug information, and
// the system headers sent or left to the worker.
func TestSpecObjectsIdentical(t *testing.T) {
	needGCC(t)
	dir := project(t)
	build := filepath.Join(dir, "build")
	cases := identicalCases(t, dir)
	for _, mode := range []string{HeadersSend, HeadersWorker, HeadersSend + "+scanner", HeadersWorker + "+scanner"} {
		for _, tc := range cases {
			t.Run(mode+"/"+tc.name, func(t *testing.T) {
				headers, scanner := strings.CutSuffix(mode, "+scanner")
				o := newOptions(t, func(s *Settings) { s.Headers = headers })
				if scanner {
					o = scanOptions(t, func(s *Settings) { s.Headers = headers })
				}
				c, spec, got := remoteCompile(t, build, tc.argv, o)
				if c.Scanned() != scanner {
					t.Errorf("Scanned() = %v", c.Scanned())
				}
				want := runLocal(t, build, tc.argv, c.Output)
				if want.exit != 0 || len(want.object) == 0 {
					t.Fatalf("local compile failed (%d): %s", want.exit, want.stderr)
				}
				if got.exit != 0 {
					t.Fatalf("remote compile failed (%d): %s\nargs %q", got.exit, got.stderr, spec.Args)
				}
				if !bytes.Equal(got.object, want.object) {
					t.Fatalf("objects differ (%d vs %d bytes)\nremote args %q", len(got.object), len(want.object), spec.Args)
				}
				sentSystem := false
				for _, in := range spec.Inputs {
					if strings.HasPrefix(in.Path, SysrootDir+"/") {
						sentSystem = true
					}
					if strings.HasPrefix(in.Local, "/usr/lib/gcc/") || strings.HasPrefix(in.Local, "/usr/include/c++/") {
						t.Errorf("the compiler's own header %s was sent", in.Local)
					}
				}
				if sentSystem != (headers == HeadersSend) {
					t.Errorf("mode %s: system headers sent = %v", mode, sentSystem)
				}
				if spec.LocalRoot != dir || spec.WorkingDir != "build" {
					t.Errorf("root %q workdir %q, want %q and build", spec.LocalRoot, spec.WorkingDir, dir)
				}
				if len(spec.Salt) == 0 {
					t.Error("no salt")
				}
			})
		}
	}
}

// identicalCases are the compiles of TestSpecObjectsIdentical, in the
// project's build directory.
func identicalCases(t *testing.T, dir string) []struct {
	name string
	argv []string
} {
	abs := func(p string) string { return filepath.Join(dir, p) }
	return []struct {
		name string
		argv []string
	}{
		{"relative", []string{"gcc", "-c", "../src/a.c", "-I../inc", "-O2", "-o", "a.o"}},
		{"absolute", []string{"gcc", "-c", abs("src/a.c"), "-I" + abs("inc"), "-O2", "-o", abs("build/a.o")}},
		{"absolute separate -I and -include", []string{"gcc", "-c", abs("src/a.c"), "-I", abs("inc"), "-include", abs("inc/force.h"), "-o", "obj/a.o"}},
		{"default output", []string{"gcc", "-c", abs("src/a.c"), "-iquote", abs("inc"), "-Wall"}},
		{"debug relative", []string{"gcc", "-g", "-c", "../src/a.c", "-I../inc", "-o", "a.o"}},
		{"debug absolute", []string{"gcc", "-g", "-O1", "-c", abs("src/a.c"), "-I" + abs("inc"), "-o", "a.o"}},
		{"assembler with cpp", []string{"gcc", "-c", abs("src/s.S"), "-I" + abs("inc"), "-o", "s.o"}},
		{"assembler with cpp debug", []string{"gcc", "-g", "-c", "../src/s.S", "-I../inc", "-o", "s.o"}},
		{"c++", []string{"g++", "-O2", "-c", abs("src/b.cc"), "-I" + abs("inc"), "-o", "b.o"}},
		{"c++ debug", []string{"g++", "-g", "-std=c++17", "-c", "../src/b.cc", "-I../inc", "-o", "b.o"}},
		{"user sysroot", []string{"gcc", "-g", "--sysroot=/", "-c", "../src/a.c", "-I../inc", "-o", "a.o"}},
		{"nostdinc", []string{"gcc", "-g", "-nostdinc", "-isystem", gccInclude(t), "-isystem", "/usr/include/x86_64-linux-gnu", "-isystem", "/usr/include", "-c", abs("src/a.c"), "-I../inc", "-o", "a.o"}},
		{"user prefix map", []string{"gcc", "-g", "-c", abs("src/a.c"), "-I" + abs("inc"), "-ffile-prefix-map=" + dir + "=.", "-o", "a.o"}},
	}
}

// TestSpecUsesSysrootMirror checks that in send mode <stdio.h> is read
// from the input root's mirror, not from the machine's /usr/include: a
// mirror copy that fails makes the compile fail.
func TestSpecUsesSysrootMirror(t *testing.T) {
	needGCC(t)
	dir := project(t)
	c, err := Parse("gcc", []string{"-c", "../src/a.c", "-I../inc", "-o", "a.o"}, filepath.Join(dir, "build"))
	if err != nil {
		t.Fatal(err)
	}
	spec, err := c.Spec(context.Background(), newOptions(t, nil))
	if err != nil {
		t.Fatal(err)
	}
	mirror := ""
	for _, in := range spec.Inputs {
		if strings.HasSuffix(in.Path, "/stdio.h") && strings.HasPrefix(in.Path, SysrootDir+"/") {
			mirror = in.Path
		}
	}
	if mirror == "" {
		t.Fatalf("stdio.h is not mirrored: %v", spec.Inputs)
	}
	got := runMaterialisedEdited(t, spec, map[string]string{mirror: "#error from the mirror\n"})
	if got.exit == 0 || !strings.Contains(string(got.stderr), "from the mirror") {
		t.Fatalf("the compile did not read the mirror's stdio.h: exit %d, %s", got.exit, got.stderr)
	}
}

// TestSpecLayoutRules checks the input-root decisions that make a compile
// run locally, and a forced project root.
func TestSpecLayoutRules(t *testing.T) {
	needGCC(t)
	dir := project(t)
	build := filepath.Join(dir, "build")
	o := newOptions(t, nil)
	spec := func(o Options, cwd string, args ...string) (remote.Spec, error) {
		c, err := Parse("gcc", args, cwd)
		if err != nil {
			return remote.Spec{}, err
		}
		return c.Spec(context.Background(), o)
	}
	// The object outside the working directory.
	if _, err := spec(o, build, "-c", "../src/a.c", "-I../inc", "-o", "../a.o"); !isLocalWith(err, "outside the working directory") {
		t.Errorf("object outside the working directory: %v", err)
	}
	// A missing object or dependency-file directory: the compiler says so.
	if _, err := spec(o, build, "-c", "../src/a.c", "-I../inc", "-o", "nodir/a.o"); !isLocalWith(err, "directory of nodir/a.o does not exist") {
		t.Errorf("missing object directory: %v", err)
	}
	if _, err := spec(o, build, "-c", "../src/a.c", "-I../inc", "-MD", "-MF", "nodir/a.d"); !isLocalWith(err, "directory of nodir/a.d does not exist") {
		t.Errorf("missing dependency-file directory: %v", err)
	}
	// A variable that changes what the preprocessor reads.
	oc := o
	oc.Env = append(append([]string(nil), o.Env...), "CPATH=/x")
	if _, err := spec(oc, build, "-c", "../src/a.c", "-I../inc"); !isLocalWith(err, "CPATH is set") {
		t.Errorf("CPATH: %v", err)
	}
	// A failing dependency listing (missing header): local, where the
	// compiler reports it itself.
	if _, err := spec(o, build, "-c", "../src/a.c"); !isLocalWith(err, "dependency listing failed") {
		t.Errorf("missing header: %v", err)
	}
	// A project spread over / (a header in another top directory).
	if _, err := os.Stat("/etc/passwd"); err == nil {
		if _, err := spec(o, build, "-c", "../src/a.c", "-I../inc", "-include", "/etc/passwd"); !isLocalWith(err, "project root would be /") {
			t.Errorf("root /: %v", err)
		}
	}
	// A forced root: the working directory's parent; a header outside
	// it is mirrored like a system header.
	of := newOptions(t, func(s *Settings) { s.ProjectRoot = build })
	s, err := spec(of, build, "-c", filepath.Join(dir, "src/a.c"), "-I../inc", "-o", "a.o")
	if !isLocalWith(err, "outside GANTRY_CC_PROJECT_ROOT") {
		t.Errorf("relative -I outside the forced root: %v %v", s.Args, err)
	}
	s, err = spec(of, build, "-c", filepath.Join(dir, "src/a.c"), "-I"+filepath.Join(dir, "inc"), "-o", "a.o")
	if err != nil {
		t.Fatal(err)
	}
	if s.LocalRoot != build || s.WorkingDir != "" {
		t.Errorf("forced root: %q %q", s.LocalRoot, s.WorkingDir)
	}
	want := SysrootDir + filepath.ToSlash(filepath.Join(dir, "inc/h.h"))
	found := false
	for _, in := range s.Inputs {
		found = found || in.Path == want
	}
	if !found {
		t.Errorf("the header outside the forced root is not mirrored at %s: %v", want, s.Inputs)
	}
	if got := runMaterialised(t, s); got.exit != 0 {
		t.Errorf("forced root compile failed: %s", got.stderr)
	}
}

func isLocalWith(err error, reason string) bool {
	r, ok := IsLocal(err)
	return ok && strings.Contains(r, reason)
}

// gccInclude is gcc's own include directory.
func gccInclude(t *testing.T) string {
	out, err := exec.Command("gcc", "-print-file-name=include").Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(out))
}

// TestSpecOddProjectPath: a project whose path has a space, a quote and a
// dollar still compiles byte-identically, with debug information (the
// worker-side wrapper quotes the local root) and a dependency file.
func TestSpecOddProjectPath(t *testing.T) {
	needGCC(t)
	base := project(t)
	dir := filepath.Join(filepath.Dir(base), "my pro'j $x")
	if err := os.Rename(base, dir); err != nil {
		t.Fatal(err)
	}
	build := filepath.Join(dir, "build")
	argv := []string{"gcc", "-g", "-c", filepath.Join(dir, "src/a.c"), "-I" + filepath.Join(dir, "inc"), "-MD", "-o", "a.o"}
	c, spec, got := remoteCompile(t, build, argv, newOptions(t, nil))
	if got.exit != 0 {
		t.Fatalf("remote compile failed: %s\nargs %q", got.stderr, spec.Args)
	}
	want := runLocal(t, build, argv, c.Output)
	wantDep, _ := os.ReadFile(filepath.Join(build, "a.d"))
	os.Remove(filepath.Join(build, "a.d"))
	if want.exit != 0 || !bytes.Equal(got.object, want.object) {
		t.Fatalf("objects differ (local exit %d)", want.exit)
	}
	if err := c.WriteDepFile(); err != nil {
		t.Fatal(err)
	}
	if gotDep, _ := os.ReadFile(filepath.Join(build, "a.d")); !bytes.Equal(gotDep, wantDep) || len(wantDep) == 0 {
		t.Fatalf("dependency files differ:\n got %q\nwant %q", gotDep, wantDep)
	}
}
