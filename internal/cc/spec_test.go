package cc

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
)

// TestSpecObjectsIdentical compiles the same source locally and from the
// Spec in another directory, and compares the objects byte for byte: with
// relative and absolute paths, -I dirs, -include, debug information, and
// the system headers sent or left to the worker.
func TestSpecObjectsIdentical(t *testing.T) {
	needGCC(t)
	dir := project(t)
	build := filepath.Join(dir, "build")
	abs := func(p string) string { return filepath.Join(dir, p) }
	cases := []struct {
		name string
		argv []string
	}{
		{"relative", []string{"gcc", "-c", "../src/a.c", "-I../inc", "-O2", "-o", "a.o"}},
		{"absolute", []string{"gcc", "-c", abs("src/a.c"), "-I" + abs("inc"), "-O2", "-o", abs("build/a.o")}},
		{"absolute separate -I and -include", []string{"gcc", "-c", abs("src/a.c"), "-I", abs("inc"), "-include", abs("inc/force.h"), "-o", "obj/a.o"}},
		{"default output", []string{"gcc", "-c", abs("src/a.c"), "-iquote", abs("inc"), "-Wall"}},
		{"debug relative", []string{"gcc", "-g", "-c", "../src/a.c", "-I../inc", "-o", "a.o"}},
		{"debug absolute", []string{"gcc", "-g", "-O1", "-c", abs("src/a.c"), "-I" + abs("inc"), "-o", "a.o"}},
		{"user prefix map", []string{"gcc", "-g", "-c", abs("src/a.c"), "-I" + abs("inc"), "-ffile-prefix-map=" + dir + "=.", "-o", "a.o"}},
	}
	for _, mode := range []string{HeadersSend, HeadersWorker} {
		for _, tc := range cases {
			t.Run(mode+"/"+tc.name, func(t *testing.T) {
				o := newOptions(t, func(s *Settings) { s.Headers = mode })
				c, spec, got := remoteCompile(t, build, tc.argv, o)
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
					if strings.HasPrefix(in.Local, "/usr/lib/gcc/") {
						t.Errorf("the compiler's own header %s was sent", in.Local)
					}
				}
				if sentSystem != (mode == HeadersSend) {
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
