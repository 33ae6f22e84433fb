package cc

import (
	"fmt"
	"strings"
	"testing"
)

// The rewriter turns a command line's absolute paths into the remote
// ones and remembers the prefixes it mapped.
func TestRewriter(t *testing.T) {
	id := &Identity{InstallDirs: []string{"/usr/lib/gcc"}, SystemDirs: []string{"/usr/include"}}
	newRW := func(send bool) *rewriter {
		return &rewriter{cwd: "/p/src", root: "/p", id: id, send: send, sysRel: "../" + SysrootDir}
	}
	for _, tc := range []struct {
		name, orig string
		isFile     bool
		send       bool
		want       string
		maps       string
		mirrored   bool
	}{
		{"relative stays", "inc/a.h", true, true, "inc/a.h", "[]", false},
		{"file under the root", "/p/inc/a.h", true, true, "../inc/a.h", "[{../inc/ /p/inc/}]", false},
		{"file in the working directory", "/p/src/a.c", true, true, "./a.c", "[{./ /p/src/}]", false},
		{"directory under the root", "/p/inc", false, true, "../inc", "[{../inc/ /p/inc/}]", false},
		{"the compiler's own", "/usr/lib/gcc/x/include", false, true, "/usr/lib/gcc/x/include", "[]", false},
		{"system header mirrored", "/usr/include/stdio.h", true, true, "../" + SysrootDir + "/usr/include/stdio.h", "[]", true},
		{"system header left to the worker", "/usr/include/stdio.h", true, false, "/usr/include/stdio.h", "[]", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rw := newRW(tc.send)
			got := rw.rewrite(tc.orig, tc.isFile)
			if got != tc.want || fmt.Sprint(rw.maps) != tc.maps || rw.mirrored != tc.mirrored {
				t.Errorf("rewrite(%q) = %q, maps %v, mirrored %v; want %q, %s, %v", tc.orig, got, rw.maps, rw.mirrored, tc.want, tc.maps, tc.mirrored)
			}
		})
	}
	rw := newRW(true)
	rw.addMap("a/", "/x/a/")
	rw.addMap("a/", "/y/a/")
	if fmt.Sprint(rw.maps) != "[{a/ /x/a/}]" {
		t.Errorf("the first mapping of a prefix must win: %v", rw.maps)
	}
}

// inputsIn places each listed dependency once: under the root at its
// relative path, a system header mirrored when headers are sent, the
// compiler's own never.
func TestInputsIn(t *testing.T) {
	id := &Identity{InstallDirs: []string{"/usr/lib/gcc"}}
	deps := &depsResult{Listed: []string{"a.c", "/p/inc/a.h", "../inc/a.h", "/usr/include/stdio.h", "/usr/lib/gcc/x/stddef.h"}}
	abs := func(p string) string {
		if strings.HasPrefix(p, "/") {
			return p
		}
		return map[string]string{"a.c": "/p/src/a.c", "../inc/a.h": "/p/inc/a.h"}[p]
	}
	paths := func(send bool) string {
		var ps []string
		for _, in := range inputsIn("/p", id, deps, send, abs) {
			ps = append(ps, in.Local+"="+in.Path)
		}
		return strings.Join(ps, " ")
	}
	if got, want := paths(true), "/p/src/a.c=src/a.c /p/inc/a.h=inc/a.h /usr/include/stdio.h="+SysrootDir+"/usr/include/stdio.h"; got != want {
		t.Errorf("sending headers:\n got %s\nwant %s", got, want)
	}
	if got, want := paths(false), "/p/src/a.c=src/a.c /p/inc/a.h=inc/a.h"; got != want {
		t.Errorf("headers left to the workers:\n got %s\nwant %s", got, want)
	}
}
