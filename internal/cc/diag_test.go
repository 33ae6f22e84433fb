package cc

import (
	"bytes"
	"path/filepath"
	"testing"
)

// TestDiagnosticsAsLocal compiles a broken source (an error, and a
// warning whose note points into <stdio.h>) remotely and locally: the
// mapped remote stderr and the exit code are the local compiler's, for a
// source and -I given relative and absolute, headers sent or not.
func TestDiagnosticsAsLocal(t *testing.T) {
	needGCC(t)
	dir := project(t)
	build := filepath.Join(dir, "build")
	abs := func(p string) string { return filepath.Join(dir, p) }
	cases := map[string][]string{
		"relative":        {"gcc", "-c", "../src/broken.c", "-I../inc", "-o", "b.o"},
		"absolute":        {"gcc", "-c", abs("src/broken.c"), "-I" + abs("inc"), "-o", abs("build/b.o")},
		"absolute debug":  {"gcc", "-g", "-c", abs("src/broken.c"), "-I", abs("inc"), "-o", "b.o"},
		"absolute colour": {"gcc", "-fdiagnostics-color=always", "-c", abs("src/broken.c"), "-I" + abs("inc"), "-o", "b.o"},
	}
	for _, mode := range []string{HeadersSend, HeadersWorker} {
		for name, argv := range cases {
			t.Run(mode+"/"+name, func(t *testing.T) {
				c, _, got := remoteCompile(t, build, argv, newOptions(t, func(s *Settings) { s.Headers = mode }))
				want := runLocal(t, build, argv, "")
				if want.exit == 0 || !bytes.Contains(want.stderr, []byte("stdio.h")) {
					t.Fatalf("the local compile should fail with a note in stdio.h: %d %s", want.exit, want.stderr)
				}
				if got.exit != want.exit {
					t.Errorf("exit %d, want %d", got.exit, want.exit)
				}
				if (mode == HeadersSend || name != "relative") && bytes.Equal(got.stderr, want.stderr) {
					t.Error("the remote stderr needs no mapping: the case tests nothing")
				}
				if mapped := c.MapDiagnostics(got.stderr); !bytes.Equal(mapped, want.stderr) {
					t.Errorf("stderr differs\n got: %s\nwant: %s\n(remote before mapping: %s)", mapped, want.stderr, got.stderr)
				}
			})
		}
	}
}

// TestMapDiagnosticsBoundaries checks that only whole path prefixes are
// mapped.
func TestMapDiagnosticsBoundaries(t *testing.T) {
	c := &Compile{layout: &layout{
		diag:       []pathPair{{"../src/", "/p/src/"}, {"./", "/p/build/"}, {"../.gantry-sysroot/", "/"}},
		absSysroot: true,
	}}
	in := "../src/a.c:1: x ./h.h:2 y../src/no ‘../src/q.h’ (../.gantry-sysroot/usr/include/x.h)\n" +
		"In file included from /w/r/.gantry-sysroot/usr/include/stdio.h:3,\n"
	want := "/p/src/a.c:1: x /p/build/h.h:2 y../src/no ‘/p/src/q.h’ (/usr/include/x.h)\n" +
		"In file included from /usr/include/stdio.h:3,\n"
	if got := string(c.MapDiagnostics([]byte(in))); got != want {
		t.Fatalf("got  %q\nwant %q", got, want)
	}
	// gcc's colours (-fdiagnostics-color=always) around a path.
	in, want = "\x1b[01m\x1b[K../src/a.c:1:2:\x1b[m\x1b[K x\x1b[Kz../src/", "\x1b[01m\x1b[K/p/src/a.c:1:2:\x1b[m\x1b[K x\x1b[Kz../src/"
	if got := string(c.MapDiagnostics([]byte(in))); got != want {
		t.Fatalf("colours: got  %q\nwant %q", got, want)
	}
}
