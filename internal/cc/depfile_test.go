package cc

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestDepFileIdentical checks that the dependency file the launcher writes
// locally is byte for byte the one the compiler writes itself with the
// same -MD/-MMD/-MF/-MT/-MQ/-MP flags, and that those flags do not reach
// the remote command.
func TestDepFileIdentical(t *testing.T) {
	needGCC(t)
	dir := project(t)
	build := filepath.Join(dir, "build")
	abs := func(p string) string { return filepath.Join(dir, p) }
	cases := []struct {
		name    string
		argv    []string
		depFile string // where the compiler writes it, relative to build
	}{
		{"MD default name", []string{"gcc", "-c", "../src/a.c", "-I../inc", "-MD", "-o", "obj/a.o"}, "obj/a.d"},
		{"MD no -o", []string{"gcc", "-MD", "-c", "../src/a.c", "-I../inc"}, "a.d"},
		{"MMD", []string{"gcc", "-c", "../src/a.c", "-I../inc", "-MMD", "-o", "a.o"}, "a.d"},
		{"MD MF MT MP absolute", []string{"gcc", "-c", abs("src/a.c"), "-I" + abs("inc"), "-MD", "-MF", abs("build/deps.d"), "-MT", "custom$target", "-MP", "-o", abs("build/a.o")}, "deps.d"},
		{"MMD MQ joined", []string{"gcc", "-c", "../src/a.c", "-I../inc", "-MMD", "-MFx.d", "-MQ", "q$ target", "-MTt2", "-o", "a.o"}, "x.d"},
		{"CMake style", []string{"gcc", "-I" + abs("inc"), "-O2", "-MD", "-MT", "obj/a.o", "-MF", "obj/a.o.d", "-o", "obj/a.o", "-c", abs("src/a.c")}, "obj/a.o.d"},
		{"odd output name", []string{"gcc", "-c", "../src/a.c", "-I../inc", "-MD", "-o", "obj/a b$c.o"}, "obj/a b$c.d"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := newOptions(t, nil)
			c, spec, got := remoteCompile(t, build, tc.argv, o)
			if got.exit != 0 {
				t.Fatalf("remote compile failed: %s", got.stderr)
			}
			for _, a := range spec.Args {
				if a == "-MD" || a == "-MMD" || a == "-MF" || a == "-MT" || a == "-MQ" || a == "-MP" {
					t.Fatalf("remote args keep %s: %q", a, spec.Args)
				}
			}
			want := runLocal(t, build, tc.argv, c.Output)
			if want.exit != 0 {
				t.Fatalf("local compile failed: %s", want.stderr)
			}
			wantDep, err := os.ReadFile(filepath.Join(build, tc.depFile))
			if err != nil {
				t.Fatalf("the compiler wrote no %s: %v", tc.depFile, err)
			}
			os.Remove(filepath.Join(build, tc.depFile))
			if !bytes.Equal(got.object, want.object) {
				t.Errorf("objects differ")
			}
			if err := c.WriteDepFile(); err != nil {
				t.Fatal(err)
			}
			gotDep, err := os.ReadFile(filepath.Join(build, tc.depFile))
			if err != nil {
				t.Fatalf("WriteDepFile wrote no %s: %v", tc.depFile, err)
			}
			if !bytes.Equal(gotDep, wantDep) {
				t.Fatalf("dependency files differ\n got: %q\nwant: %q", gotDep, wantDep)
			}
		})
	}
}
