package batch

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestParseCompileCommands(t *testing.T) {
	data := `[
  {"directory": "/p/build", "file": "../src/a.c",
   "arguments": ["gcc", "-c", "../src/a.c", "-o", "a.o"], "output": "a.o"},
  {"directory": "sub", "file": "/p/src/b.c", "command": "cc -DX=\"a b\" -c /p/src/b.c"},
  {"directory": "/p", "file": "/p/src/b.c", "command": "cc -c /p/src/b.c", "extra": 1}
]`
	jobs, err := ParseCompileCommands([]byte(data), "compile_commands.json", "/base")
	if err != nil {
		t.Fatal(err)
	}
	want := []*Job{
		{Name: "a.o", Kind: Compile, Dir: "/p/build", Args: []string{"gcc", "-c", "../src/a.c", "-o", "a.o"},
			Inputs: []string{"../src/a.c"}, Outputs: []string{"a.o"}, Line: 2},
		{Name: "/p/src/b.c", Kind: Compile, Dir: "/base/sub", Args: []string{"cc", "-DX=a b", "-c", "/p/src/b.c"},
			Inputs: []string{"/p/src/b.c"}, Line: 4},
		{Name: "/p/src/b.c (2)", Kind: Compile, Dir: "/p", Args: []string{"cc", "-c", "/p/src/b.c"},
			Inputs: []string{"/p/src/b.c"}, Line: 5},
	}
	if !reflect.DeepEqual(jobs, want) {
		for i := range jobs {
			t.Errorf("job %d: %+v", i, *jobs[i])
		}
	}
	if _, err := New(jobs, allSteps, Limits{1, 1, 1, 1}, Options{}); err != nil {
		t.Fatalf("the parsed jobs are not valid for New: %v", err)
	}
}

func TestCompileCommandsErrors(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"a": 1}`, "cc.json:1:2: a compile_commands.json is a JSON array"},
		{"[\n {\"file\": \"a.c\", \"command\": \"cc\"}\n]", `cc.json:2:2: entry 1: no "directory"`},
		{"[\n {\"directory\": \"/\", \"command\": \"cc\"}]", `cc.json:2:2: entry 1: no "file"`},
		{"[{\"directory\": \"/\", \"file\": \"a\"},\n\n  {\"directory\": \"/\", \"file\": \"b\"}]", `cc.json:1:2: entry 1: neither "arguments" nor "command"`},
		{"[\n {\"directory\": \"/\", \"file\": \"a\", \"command\": \"cc 'x\"}]", `cc.json:2:2: entry 1: "command": a single quote is not closed (at byte 4)`},
		{"[\n {\"directory\": \"/\", \"file\": \"a\", \"arguments\": []}]", `cc.json:2:2: entry 1: "arguments" is empty`},
		{"[\n {\"directory\": \"/\", \"file\": \"a\",\n  \"arguments\": [1]}]", `cc.json:3:17: entry 1: field "arguments": found a JSON number where a string belongs`},
		{"[\n {\"directory\": \"/\", \"file\": 7}]", `cc.json:2:29: entry 1: field "file": found a JSON number where a string belongs`},
		{"[\n {\"directory\": \"/\",\n  \"file\" \"a\"}]", "cc.json:3:10: invalid JSON: invalid character '\"' after object key"},
		{"[\n {\"directory\": \"/\"", "cc.json:2:19: invalid JSON: the file ends in the middle"},
		{"[]\n[]", "cc.json:2:1: invalid JSON: invalid character '[' after top-level value"},
	} {
		_, err := ParseCompileCommands([]byte(tc.in), "cc.json", "/")
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%q:\n got %v\nwant %s", tc.in, err, tc.want)
		}
	}
}

const jobListYAML = `# a small project
jobs:
  - name: gen
    command: ./gen.sh "out file.h"
    inputs: [gen.sh]
    outputs: [out file.h]
    env: &env {LANG: C, A: "1"}
  - name: cc
    command: [gcc, -c, a.c]
    directory: src
    inputs: [a.c, ../out file.h]
    outputs: [a.o]
    output_dirs: [d]
    deps: [gen]
    platform: {OSFamily: linux, ISA: [x86-64, avx2]}
    env: *env
    timeout: 90s
    no_cache: true
    exclusive: true
`

func TestParseJobList(t *testing.T) {
	jobs, err := ParseJobList([]byte(jobListYAML), "jobs.yaml", "/p")
	if err != nil {
		t.Fatal(err)
	}
	want := []*Job{
		{Name: "gen", Kind: Command, Dir: "/p", Args: []string{"./gen.sh", "out file.h"},
			Inputs: []string{"gen.sh"}, Outputs: []string{"out file.h"}, Env: []string{"A=1", "LANG=C"}, Line: 3},
		{Name: "cc", Kind: Command, Dir: "/p/src", Args: []string{"gcc", "-c", "a.c"},
			Inputs: []string{"a.c", "../out file.h"}, Outputs: []string{"a.o"}, OutputDirs: []string{"d"},
			Deps: []string{"gen"}, Platform: []string{"ISA=avx2", "ISA=x86-64", "OSFamily=linux"},
			Env: []string{"A=1", "LANG=C"}, Timeout: 90 * time.Second, NoCache: true, Exclusive: true, Line: 8},
	}
	if !reflect.DeepEqual(jobs, want) {
		for i := range jobs {
			t.Errorf("job %d: %+v", i, *jobs[i])
		}
	}

	// The same list in JSON (with an escape YAML lacks) gives the same jobs.
	js := `{"jobs": [
	{"name": "gen", "command": "./gen.sh \"out file.h\"", "inputs": ["gen.sh"],
	 "outputs": ["out file.h"], "env": {"LANG": "C", "A": "1"}},
	{"name": "cc", "command": ["gcc", "-c", "a.c"], "directory": "src",
	 "inputs": ["a.c", "..\/out file.h"], "outputs": ["a.o"], "output_dirs": ["d"], "deps": ["gen"],
	 "platform": {"OSFamily": "linux", "ISA": ["x86-64", "avx2"]}, "env": {"LANG": "C", "A": "1"},
	 "timeout": "90s", "no_cache": true, "exclusive": true}
]}`
	jobs, err = ParseJobList([]byte(js), "jobs.json", "/p")
	if err != nil {
		t.Fatal(err)
	}
	want[0].Line, want[1].Line = 2, 4
	if !reflect.DeepEqual(jobs, want) {
		for i := range jobs {
			t.Errorf("JSON job %d: %+v", i, *jobs[i])
		}
	}
}

func TestJobListErrors(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"jobs:\n  - name: a\n    command: x\n    outptus: [a]\n", `j:4:5: unknown field "outptus" in the job at line 2; did you mean "outputs"?`},
		{"jobs:\n  - name: a\n    command: x\n    sources: [a]\n", `j:4:5: unknown field "sources" in the job at line 2; the fields are: name, command, directory, inputs,`},
		{"jobs:\n  - name: a\n", `j:2:5: job "a" has no "command"`},
		{"jobs:\n  - command: x\n", `j:2:5: the job has no "name"`},
		{"jobs:\n  - {name: a, command: x}\n  - {name: a, command: y}\n", `j:3:5: a second job is named "a" (the first is at line 2)`},
		{"jobs:\n  - name: a\n    command: x\n    deps: [b]\n", `j:4:12: job "a" depends on "b", which is not a job in this file`},
		{"jobs:\n- {name: a, command: x, deps: [c]}\n- {name: b, command: x, deps: [a]}\n- {name: c, command: x, deps: [b]}\n",
			"j:2: dependency cycle: a -> c -> b -> a"},
		{"jobs:\n  - name: a\n    name: b\n", `j:3:5: field "name" is given twice in the job at line 2 (also at line 2)`},
		{"jobs:\n  - name: a\n    command: \"x 'y\"\n", `j:3:14: "command": a single quote is not closed`},
		{"jobs:\n  - name: a\n    command: []\n", `j:3:14: "command" is empty`},
		{"jobs:\n  - name: a\n    command: x\n    timeout: soon\n", `j:4:14: "timeout" is "soon"`},
		{"jobs:\n  - name: a\n    command: x\n    exclusive: maybe\n", `j:4:16: "exclusive" should be true or false`},
		{"jobs:\n  - name: a\n    command: x\n    inputs: a.c\n", `j:4:13: "inputs" should be a list of strings`},
		{"jobs: [\n", "j:1: invalid YAML: did not find expected node content"},
		{"job: []\n", `j:1:1: unknown field "job" in the job list; did you mean "jobs"?`},
		{"- a\n", `j:1:1: a job list is a mapping with "jobs"`},
		{"", "j: the job list is empty"},
		{"{\"jobs\": [\n  {\"name\": \"a\", \"command\": \"x\", \"deps\": [\"zz\"]}]}", `j:2:42: job "a" depends on "zz"`},
		{"{\"jobs\": [\n  {\"name\": \"a\" \"command\": \"x\"}]}", `j:2:16: invalid JSON: invalid character '"' after object key:value pair`},
		{"{\"jobs\": []} x", "j:1:14: invalid JSON: invalid character 'x' after top-level value"},
	} {
		_, err := ParseJobList([]byte(tc.in), "j", "/")
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%q:\n got %v\nwant %s", tc.in, err, tc.want)
		}
	}
}

func TestParseFileDetectsFormat(t *testing.T) {
	dir := t.TempDir()
	cc := filepath.Join(dir, "compile_commands.json")
	os.WriteFile(cc, []byte(` [{"directory": "b", "file": "a.c", "command": "cc -c a.c"}]`), 0o644)
	jobs, err := ParseFile(cc)
	if err != nil || len(jobs) != 1 || jobs[0].Kind != Compile || jobs[0].Dir != filepath.Join(dir, "b") {
		t.Fatalf("%v %+v", err, jobs)
	}
	jl := filepath.Join(dir, "jobs.yaml")
	os.WriteFile(jl, []byte("jobs:\n- {name: a, command: x}\n"), 0o644)
	jobs, err = ParseFile(jl)
	if err != nil || len(jobs) != 1 || jobs[0].Kind != Command || jobs[0].Dir != dir {
		t.Fatalf("%v %+v", err, jobs)
	}
	if _, err := ParseFile(filepath.Join(dir, "nope")); err == nil || !strings.Contains(err.Error(), "cannot read the job file") {
		t.Fatal(err)
	}
}

func TestLineCounter(t *testing.T) {
	data := []byte("ab\ncd\n\nef")
	l := &lineCounter{data: data}
	for _, tc := range []struct {
		off       int64
		line, col int
	}{{0, 1, 1}, {4, 2, 2}, {7, 4, 1}, {1, 1, 2}, {9, 4, 3}, {99, 4, 3}, {6, 3, 1}} {
		if line, col := l.at(tc.off); line != tc.line || col != tc.col {
			t.Errorf("offset %d: %d:%d, want %d:%d", tc.off, line, col, tc.line, tc.col)
		}
	}
}
