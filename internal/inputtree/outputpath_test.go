package inputtree

import (
	"errors"
	"path"
	"strings"
	"testing"
)

func TestOutputLocation(t *testing.T) {
	tests := []struct {
		field   OutputField
		wd, p   string
		want    string // the location, when accepted
		problem string // a substring of the refusal, when refused
	}{
		// BuildStream 2's action: the working directory and the install
		// directory three levels up.
		{field: OutputDirectories, wd: "buildstream/proj/elem", p: ".", want: "buildstream/proj/elem"},
		{field: OutputDirectories, wd: "buildstream/proj/elem", p: "../../../buildstream-install", want: "buildstream-install"},
		{field: OutputDirectories, wd: "buildstream/proj/elem", p: "../../..", want: ""},
		{field: OutputDirectories, wd: "a/b/c", p: "", want: "a/b/c"},
		{field: OutputPaths, wd: "a/b/c", p: ".", want: "a/b/c"},
		{field: OutputPaths, wd: "a/b/c", p: "", want: "a/b/c"},
		{field: OutputPaths, wd: "", p: ".", want: ""},
		{field: OutputPaths, wd: "", p: "a/./b/../c", want: "a/c"},
		{field: OutputFiles, wd: "a/b/c", p: "../../../install/bin", want: "install/bin"},
		{field: OutputFiles, wd: "", p: "out/x.o", want: "out/x.o"},
		{field: OutputFiles, wd: "w", p: "x/../y", want: "w/y"},
		{field: OutputPaths, wd: "a/./b", p: "c", want: "a/b/c"},

		{field: OutputDirectories, wd: "a/b/c", p: "../../../../x", problem: `leads outside the input root (from the working directory "a/b/c" it climbs to "../x")`},
		{field: OutputPaths, wd: "", p: "..", problem: "leads outside the input root (from the input root"},
		{field: OutputFiles, wd: "w", p: "../../x", problem: "leads outside the input root"},
		{field: OutputDirectories, wd: "a", p: "../..", problem: "leads outside the input root"},
		{field: OutputFiles, wd: "a/b/c", p: ".", problem: `ends in "."`},
		{field: OutputFiles, wd: "a/b/c", p: "x/..", problem: `ends in ".."`},
		{field: OutputFiles, wd: "a", p: "", problem: "is empty"},
		{field: OutputPaths, wd: "", p: "/etc/passwd", problem: "absolute"},
		{field: OutputDirectories, wd: "", p: "gen/", problem: "trailing slash"},
		{field: OutputFiles, wd: "", p: "out//a.o", problem: "empty segment"},
		{field: OutputPaths, wd: "", p: "a\x00b", problem: "NUL"},
		{field: OutputPaths, wd: "..", p: "x", problem: `working_directory ".." leads outside the input root`},
		{field: OutputPaths, wd: "/tmp", p: "x", problem: "working_directory \"/tmp\" is absolute"},
		{field: OutputPaths, wd: "a/", p: "x", problem: "trailing slash"},
	}
	for _, tt := range tests {
		got, err := OutputLocation(tt.field, tt.wd, tt.p)
		switch {
		case tt.problem == "" && err != nil:
			t.Errorf("%s %q in %q: %v, want %q", tt.field, tt.p, tt.wd, err, tt.want)
		case tt.problem == "" && got != tt.want:
			t.Errorf("%s %q in %q = %q, want %q", tt.field, tt.p, tt.wd, got, tt.want)
		case tt.problem != "" && (err == nil || !strings.Contains(err.Error(), tt.problem)):
			t.Errorf("%s %q in %q = %q, %v; want a refusal containing %q", tt.field, tt.p, tt.wd, got, err, tt.problem)
		case tt.problem != "":
			var pe *PathError
			if !errors.As(err, &pe) {
				t.Errorf("%s %q in %q: %T, want *PathError", tt.field, tt.p, tt.wd, err)
			}
		}
	}
}

// TestOutputLocationMessageNamesFieldAndPath: the refusal Execute and
// the worker both show says which field, which path, and what to do.
func TestOutputLocationMessageNamesFieldAndPath(t *testing.T) {
	_, err := OutputLocation(OutputDirectories, "a/b/c", "../../../../x")
	want := `output_directories "../../../../x" leads outside the input root (from the working directory "a/b/c" it climbs to "../x"); output paths are relative to the working directory and must stay inside the input root`
	if err == nil || err.Error() != want {
		t.Errorf("got %v\nwant %s", err, want)
	}
}

func FuzzOutputLocation(f *testing.F) {
	for _, s := range [][2]string{
		{"buildstream/proj/elem", "../../../buildstream-install"}, {"a/b/c", "."}, {"", ""},
		{"a", "../../x"}, {"", "/abs"}, {"w", "a//b"}, {"x/", "y"}, {"a/./b", "../.."},
	} {
		for field := range 3 {
			f.Add(field, s[0], s[1])
		}
	}
	f.Fuzz(func(t *testing.T, field int, wd, p string) {
		fd := OutputField(uint(field) % 3)
		loc, err := OutputLocation(fd, wd, p)
		if err != nil {
			var pe *PathError
			if !errors.As(err, &pe) {
				t.Fatalf("%T %v, want *PathError", err, err)
			}
			return
		}
		// Accepted: the location is clean, relative and inside the root,
		// and it is where the kernel would find p from wd (no symlinks).
		if loc != "" && (path.Clean(loc) != loc || path.IsAbs(loc) || loc == ".." || strings.HasPrefix(loc, "../")) {
			t.Fatalf("%s %q in %q accepted at %q, which is not a clean path inside the root", fd, p, wd, loc)
		}
		if want := path.Join(wd, p); want != loc && !(want == "." && loc == "") {
			t.Fatalf("%s %q in %q at %q, want %q", fd, p, wd, loc, want)
		}
		for _, s := range []string{wd, p} {
			if strings.HasPrefix(s, "/") || strings.HasSuffix(s, "/") || strings.Contains(s, "//") || strings.ContainsRune(s, 0) {
				t.Fatalf("%s %q in %q accepted though %q breaks the spec's form", fd, p, wd, s)
			}
		}
		if last := p[strings.LastIndexByte(p, '/')+1:]; fd == OutputFiles && (last == "" || last == "." || last == "..") {
			t.Fatalf("output file %q in %q accepted, though it does not end with a name", p, wd)
		}
		if _, err := WorkingDirectory(wd); err != nil {
			t.Fatalf("%q accepted in working directory %q, which WorkingDirectory refuses: %v", p, wd, err)
		}
	})
}
