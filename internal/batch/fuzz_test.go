package batch

import (
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// quote is the inverse of SplitCommand for one word.
func quote(w string) string { return "'" + strings.ReplaceAll(w, "'", `'\''`) + "'" }

func FuzzSplitCommand(f *testing.F) {
	for _, tc := range splitCases {
		f.Add(tc.in)
	}
	f.Add(`a "b\`)
	f.Fuzz(func(t *testing.T, s string) {
		words, err := SplitCommand(s)
		if err != nil {
			return
		}
		var q []string
		for _, w := range words {
			q = append(q, quote(w))
		}
		again, err := SplitCommand(strings.Join(q, " "))
		if err != nil || !reflect.DeepEqual(again, words) {
			t.Fatalf("%q split as %q; quoted back and split again: %q, %v", s, words, again, err)
		}
	})
}

// checkParsed checks what the parsers promise of their jobs.
func checkParsed(t *testing.T, jobs []*Job) {
	t.Helper()
	if err := checkJobs(jobs); err != nil {
		t.Fatalf("parsed jobs fail the checks of New: %v", err)
	}
	for _, j := range jobs {
		if !filepath.IsAbs(j.Dir) || j.Line < 1 {
			t.Fatalf("job %q: dir %q line %d", j.Name, j.Dir, j.Line)
		}
	}
}

func FuzzParseCompileCommands(f *testing.F) {
	f.Add([]byte(`[{"directory": "/p", "file": "a.c", "arguments": ["cc", "-c", "a.c"], "output": "a.o"}]`))
	f.Add([]byte(`[{"directory": "b", "file": "a.c", "command": "cc -c 'a b.c'"}, {"directory": "b", "file": "a.c", "command": "cc"}]`))
	f.Add([]byte("[\n {\"directory\": \"/\",\n  \"file\" \"a\"}]"))
	f.Add([]byte(`[{"directory": "/", "file": 7}]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		jobs, err := ParseCompileCommands(data, "f", "/base")
		if err != nil {
			if _, ok := err.(*FileError); !ok {
				t.Fatalf("error %v is not a FileError", err)
			}
			return
		}
		checkParsed(t, jobs)
	})
}

func FuzzParseJobList(f *testing.F) {
	f.Add([]byte(jobListYAML))
	f.Add([]byte(`{"jobs": [{"name": "a", "command": ["x"], "deps": ["b"]}, {"name": "b", "command": "y"}]}`))
	f.Add([]byte("jobs:\n- {name: a, command: x, deps: [c]}\n- {name: c, command: x, deps: [a]}\n"))
	f.Add([]byte("jobs:\n  - &j {name: a, command: x}\n  - *j\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		jobs, err := ParseJobList(data, "f", "/base")
		if err != nil {
			if _, ok := err.(*FileError); !ok {
				t.Fatalf("error %v is not a FileError", err)
			}
			return
		}
		checkParsed(t, jobs)
	})
}
