package remote

import "testing"

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
