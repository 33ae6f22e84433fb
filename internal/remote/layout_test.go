package remote

import (
	"slices"
	"testing"
)

func TestLayout(t *testing.T) {
	for _, tc := range []struct {
		cwd   string
		paths []string
		root  string
		wd    string
	}{
		{"/p/src", nil, "/p/src", ""},
		{"/p/src", []string{"a.c", "sub/b.h"}, "/p/src", ""},
		{"/p/src", []string{"../include/x.h", "a.c"}, "/p", "src"},
		{"/p/src/deep", []string{"/p/src/deep/a.c", "/p/lib/y.h"}, "/p", "src/deep"},
		{"/p/src", []string{"/p/srcx/a.c"}, "/p", "src"}, // a sibling sharing a prefix is not inside
		{"/p/src", []string{"/other/a"}, "/", "p/src"},
		{"/p/src", []string{"."}, "/p/src", ""},
		{"/p/src", []string{".."}, "/p", "src"},
	} {
		root, wd := Layout(tc.cwd, tc.paths)
		if root != tc.root || wd != tc.wd {
			t.Errorf("Layout(%q, %q) = %q, %q; want %q, %q", tc.cwd, tc.paths, root, wd, tc.root, tc.wd)
		}
	}
}

func TestLocalSpec(t *testing.T) {
	spec, err := LocalSpec("/w/proj/src", []string{"cc", "-c", "a.c"}, []string{"LANG=C"},
		[]string{"a.c", "../include", "/w/proj/gen/x.h"}, []string{"out/a.o", "/w/proj/src/b.o"}, []string{"logs"})
	if err != nil {
		t.Fatal(err)
	}
	if spec.LocalRoot != "/w/proj" || spec.WorkingDir != "src" {
		t.Errorf("root %q, workdir %q; want /w/proj, src", spec.LocalRoot, spec.WorkingDir)
	}
	wantIn := []Input{{Local: "/w/proj/src/a.c", Path: "src/a.c"}, {Local: "/w/proj/include", Path: "include"}, {Local: "/w/proj/gen/x.h", Path: "gen/x.h"}}
	if !slices.Equal(spec.Inputs, wantIn) {
		t.Errorf("inputs %v; want %v", spec.Inputs, wantIn)
	}
	if !slices.Equal(spec.OutputFiles, []string{"out/a.o", "b.o"}) || !slices.Equal(spec.OutputDirs, []string{"logs"}) {
		t.Errorf("outputs %v, dirs %v", spec.OutputFiles, spec.OutputDirs)
	}
	if !slices.Equal(spec.Env, []string{"LANG=C", "PATH=" + DefaultPath}) {
		t.Errorf("env %v; want LANG=C and the default PATH", spec.Env)
	}
	spec, _ = LocalSpec("/w", nil, []string{"PATH=/opt/bin"}, nil, nil, nil)
	if !slices.Equal(spec.Env, []string{"PATH=/opt/bin"}) {
		t.Errorf("env %v; a PATH given must stay alone", spec.Env)
	}
}
