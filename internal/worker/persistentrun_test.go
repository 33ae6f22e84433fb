package worker

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestSplitWorkerArgs(t *testing.T) {
	for _, tc := range []struct {
		args           []string
		startup, files []string
	}{
		{[]string{"java", "-jar", "b.jar", "@p"}, []string{"java", "-jar", "b.jar"}, []string{"p"}},
		{[]string{"tool", "@a", "-x", "--flagfile=b"}, []string{"tool", "-x"}, []string{"a", "b"}},
		{[]string{"tool", "@a", "-x"}, nil, nil},  // the last argument is no request file
		{[]string{"tool", "@@literal"}, nil, nil}, // an escaped @
		{[]string{"@p"}, nil, nil},                // no tool
	} {
		startup, files := splitWorkerArgs(tc.args)
		if !reflect.DeepEqual(startup, tc.startup) || !reflect.DeepEqual(files, tc.files) {
			t.Errorf("splitWorkerArgs(%q) = %q, %q; want %q, %q", tc.args, startup, files, tc.startup, tc.files)
		}
	}
}

func TestReadRequestFileExpandsNestedFiles(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "outer"), []byte("-d\nout\n@inner\nA.java\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "inner"), []byte("-cp\nlib.jar\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "loop"), []byte("@loop\n"), 0o644)
	got, err := readRequestFile(dir, "outer", 0)
	if want := []string{"-d", "out", "-cp", "lib.jar", "A.java"}; err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("got %q, %v; want %q", got, err, want)
	}
	if _, err := readRequestFile(dir, "loop", 0); err == nil || !strings.Contains(err.Error(), "nest more than") {
		t.Fatalf("a request file naming itself: %v", err)
	}
}
