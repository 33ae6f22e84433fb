package batch

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// jobFields are the fields of a job in a Gantry job list, in the order
// the error messages list them.
var jobFields = []string{"name", "command", "directory", "inputs", "outputs", "output_dirs",
	"deps", "platform", "env", "timeout", "no_cache", "exclusive"}

// ParseJobList reads a Gantry job list, YAML or JSON:
//
//	jobs:
//	  - name: gen                 # unique; deps refer to it (required)
//	    command: ./gen.sh out.h   # a list of words, or a string split as the shell does (required)
//	    directory: src            # where it runs; relative to base; default base
//	    inputs: [gen.sh]          # files and directories read, relative to directory
//	    outputs: [out.h]          # files written
//	    output_dirs: []           # directories written
//	    deps: []                  # jobs that must succeed first
//	    platform: {OSFamily: linux}  # a value may be a list for a repeated property
//	    env: {LANG: C}
//	    timeout: 5m               # a Go duration
//	    no_cache: false
//	    exclusive: false          # runs alone on its execute (or local) tokens
//
// name is the file's name for error messages, which give the line and
// column of the problem; base is the directory relative directories are
// taken from (the file's own).
func ParseJobList(data []byte, name, base string) ([]*Job, error) {
	p := &listParser{file: name, base: base}
	var root *yaml.Node
	if t := bytes.TrimLeft(data, " \t\r\n\ufeff"); len(t) > 0 && t[0] == '{' {
		// JSON is read by encoding/json, whose escapes (\/ for one) YAML
		// lacks; the tree is built as yaml.Nodes for one checker.
		n, err := jsonTree(data, name)
		if err != nil {
			return nil, err
		}
		root = n
	} else {
		var doc yaml.Node
		if err := yaml.Unmarshal(data, &doc); err != nil {
			return nil, yamlError(name, err)
		}
		if len(doc.Content) == 0 {
			return nil, &FileError{File: name, Msg: "the job list is empty; it should be a mapping with \"jobs\""}
		}
		root = doc.Content[0]
	}
	return p.parse(root)
}

type listParser struct {
	file, base string
}

func (p *listParser) errf(n *yaml.Node, format string, a ...any) error {
	return &FileError{File: p.file, Line: n.Line, Col: n.Column, Msg: fmt.Sprintf(format, a...)}
}

func (p *listParser) parse(root *yaml.Node) ([]*Job, error) {
	root = deref(root)
	if root.Kind != yaml.MappingNode {
		return nil, p.errf(root, "a job list is a mapping with \"jobs\" (a list of jobs); a compile_commands.json is an array")
	}
	var jobsNode *yaml.Node
	err := p.fields(root, "the job list", []string{"jobs"}, func(key string, v *yaml.Node) error {
		jobsNode = v
		return nil
	})
	if err != nil {
		return nil, err
	}
	if jobsNode == nil {
		return nil, p.errf(root, "no \"jobs\": the list of jobs to run")
	}
	if jobsNode.Kind != yaml.SequenceNode {
		return nil, p.errf(jobsNode, "\"jobs\" should be a list of jobs")
	}
	var jobs []*Job
	depNodes := map[*Job][]*yaml.Node{}
	index := map[string]int{}
	for _, jn := range jobsNode.Content {
		j, deps, err := p.job(deref(jn))
		if err != nil {
			return nil, err
		}
		if k, dup := index[j.Name]; dup {
			return nil, p.errf(jn, "a second job is named %q (the first is at line %d); names must be unique", j.Name, jobs[k].Line)
		}
		index[j.Name] = len(jobs)
		jobs = append(jobs, j)
		depNodes[j] = deps
	}
	for _, j := range jobs {
		for i, d := range j.Deps {
			if _, ok := index[d]; !ok {
				return nil, p.errf(depNodes[j][i], "job %q depends on %q, which is not a job in this file", j.Name, d)
			}
		}
	}
	if c := findCycle(jobs, index); c != nil {
		return nil, &FileError{File: p.file, Line: jobs[index[c[0]]].Line,
			Msg: "dependency cycle: " + strings.Join(c, " -> ") + "; remove one of these deps"}
	}
	return jobs, nil
}

// fields calls f for each key of the mapping n, rejecting unknown and
// repeated keys.
func (p *listParser) fields(n *yaml.Node, what string, known []string, f func(key string, v *yaml.Node) error) error {
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := deref(n.Content[i]), deref(n.Content[i+1])
		if k.Kind != yaml.ScalarNode {
			return p.errf(k, "a key of %s is not a plain name", what)
		}
		if !slices.Contains(known, k.Value) {
			if near := nearest(k.Value, known); near != "" {
				return p.errf(k, "unknown field %q in %s; did you mean %q?", k.Value, what, near)
			}
			return p.errf(k, "unknown field %q in %s; the fields are: %s", k.Value, what, strings.Join(known, ", "))
		}
		if line, dup := seen[k.Value]; dup {
			return p.errf(k, "field %q is given twice in %s (also at line %d)", k.Value, what, line)
		}
		seen[k.Value] = k.Line
		if err := f(k.Value, v); err != nil {
			return err
		}
	}
	return nil
}

// job reads one job; it returns the dep nodes too, for error positions.
func (p *listParser) job(n *yaml.Node) (*Job, []*yaml.Node, error) {
	if n.Kind != yaml.MappingNode {
		return nil, nil, p.errf(n, "a job should be a mapping with name, command, inputs, outputs, deps ...")
	}
	j := &Job{Kind: Command, Line: n.Line, Dir: p.base}
	var depNodes []*yaml.Node
	var haveName, haveCommand bool
	what := fmt.Sprintf("the job at line %d", n.Line)
	err := p.fields(n, what, jobFields, func(key string, v *yaml.Node) error {
		var err error
		switch key {
		case "name":
			j.Name, err = p.str(v, key)
			if err == nil && j.Name == "" {
				err = p.errf(v, "\"name\" is empty")
			}
			haveName = true
		case "command":
			j.Args, err = p.command(v)
			haveCommand = true
		case "directory":
			var d string
			d, err = p.str(v, key)
			if !filepath.IsAbs(d) {
				d = filepath.Join(p.base, d)
			}
			j.Dir = filepath.Clean(d)
		case "inputs":
			j.Inputs, _, err = p.list(v, key)
		case "outputs":
			j.Outputs, _, err = p.list(v, key)
		case "output_dirs":
			j.OutputDirs, _, err = p.list(v, key)
		case "deps":
			j.Deps, depNodes, err = p.list(v, key)
		case "platform":
			j.Platform, err = p.pairs(v, key, true)
		case "env":
			j.Env, err = p.pairs(v, key, false)
		case "timeout":
			var s string
			if s, err = p.str(v, key); err == nil {
				j.Timeout, err = time.ParseDuration(s)
				if err != nil || j.Timeout < 0 {
					err = p.errf(v, "\"timeout\" is %q; give a duration such as 90s or 5m", s)
				}
			}
		case "no_cache":
			j.NoCache, err = p.boolean(v, key)
		case "exclusive":
			j.Exclusive, err = p.boolean(v, key)
		}
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	if !haveName {
		return nil, nil, p.errf(n, "the job has no \"name\"; give each job a unique name")
	}
	if !haveCommand {
		return nil, nil, p.errf(n, "job %q has no \"command\"", j.Name)
	}
	return j, depNodes, nil
}

func (p *listParser) str(v *yaml.Node, key string) (string, error) {
	if v.Kind != yaml.ScalarNode || v.Tag == "!!null" {
		return "", p.errf(v, "%q should be a string", key)
	}
	return v.Value, nil
}

func (p *listParser) boolean(v *yaml.Node, key string) (bool, error) {
	if v.Kind == yaml.ScalarNode && v.Tag == "!!bool" {
		b, err := strconv.ParseBool(strings.ToLower(v.Value))
		if err == nil {
			return b, nil
		}
	}
	return false, p.errf(v, "%q should be true or false", key)
}

// list reads a list of strings; null is an empty list.
func (p *listParser) list(v *yaml.Node, key string) ([]string, []*yaml.Node, error) {
	if v.Kind == yaml.ScalarNode && v.Tag == "!!null" {
		return nil, nil, nil
	}
	if v.Kind != yaml.SequenceNode {
		return nil, nil, p.errf(v, "%q should be a list of strings", key)
	}
	var out []string
	var nodes []*yaml.Node
	for _, e := range v.Content {
		e = deref(e)
		s, err := p.str(e, key+" item")
		if err != nil {
			return nil, nil, err
		}
		if s == "" {
			return nil, nil, p.errf(e, "an item of %q is empty", key)
		}
		out = append(out, s)
		nodes = append(nodes, e)
	}
	return out, nodes, nil
}

func (p *listParser) command(v *yaml.Node) ([]string, error) {
	var args []string
	if v.Kind == yaml.SequenceNode {
		for _, e := range v.Content {
			s, err := p.str(deref(e), "command item")
			if err != nil {
				return nil, err
			}
			args = append(args, s)
		}
	} else {
		s, err := p.str(v, "command")
		if err != nil {
			return nil, p.errf(v, "\"command\" should be a list of words or a string")
		}
		if args, err = SplitCommand(s); err != nil {
			return nil, p.errf(v, "\"command\": %v", err)
		}
	}
	if len(args) == 0 || args[0] == "" {
		return nil, p.errf(v, "\"command\" is empty")
	}
	return args, nil
}

// pairs reads a mapping of names to strings (or, when multi, lists of
// strings) as sorted NAME=VALUE.
func (p *listParser) pairs(v *yaml.Node, key string, multi bool) ([]string, error) {
	if v.Kind == yaml.ScalarNode && v.Tag == "!!null" {
		return nil, nil
	}
	if v.Kind != yaml.MappingNode {
		return nil, p.errf(v, "%q should be a mapping of names to values", key)
	}
	var out []string
	seen := map[string]bool{}
	for i := 0; i+1 < len(v.Content); i += 2 {
		k, val := deref(v.Content[i]), deref(v.Content[i+1])
		name, err := p.str(k, key+" name")
		if err != nil {
			return nil, err
		}
		if name == "" || strings.Contains(name, "=") {
			return nil, p.errf(k, "%q name %q is empty or holds '='", key, name)
		}
		if seen[name] {
			return nil, p.errf(k, "%q names %q twice", key, name)
		}
		seen[name] = true
		if multi && val.Kind == yaml.SequenceNode {
			vals, _, err := p.list(val, key+" "+name)
			if err != nil {
				return nil, err
			}
			for _, x := range vals {
				out = append(out, name+"="+x)
			}
			continue
		}
		s, err := p.str(val, key+" "+name)
		if err != nil {
			return nil, err
		}
		out = append(out, name+"="+s)
	}
	slices.Sort(out)
	return out, nil
}

// nearest returns the name in known within two edits of s, if one is.
func nearest(s string, known []string) string {
	best, bestD := "", 3
	for _, k := range known {
		if d := editDistance(s, k); d < bestD {
			best, bestD = k, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// deref follows YAML aliases (an anchor used for shared env or platform).
func deref(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

func yamlError(name string, err error) error {
	msg := err.Error()
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		l, _ := strconv.Atoi(m[1])
		return &FileError{File: name, Line: l, Msg: "invalid YAML: " + m[2]}
	}
	return &FileError{File: name, Msg: "invalid YAML: " + strings.TrimPrefix(msg, "yaml: ")}
}

// jsonTree reads JSON into yaml.Nodes with lines and columns, so JSON and
// YAML job lists share one checker.
func jsonTree(data []byte, name string) (*yaml.Node, error) {
	if err := checkJSON(data, name); err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	lines := &lineCounter{data: data}
	var value func() (*yaml.Node, error)
	value = func() (*yaml.Node, error) {
		off := int64(len(data))
		for o := dec.InputOffset(); o < int64(len(data)); o++ {
			if strings.IndexByte(" \t\r\n,:", data[o]) < 0 {
				off = o
				break
			}
		}
		tok, err := dec.Token()
		if err != nil {
			return nil, jsonError(data, name, dec, err)
		}
		l, c := lines.at(off)
		n := &yaml.Node{Line: l, Column: c}
		switch t := tok.(type) {
		case json.Delim:
			if t != '{' && t != '[' {
				return nil, &FileError{File: name, Line: l, Col: c, Msg: fmt.Sprintf("invalid JSON: unexpected %v", t)}
			}
			n.Kind = yaml.SequenceNode
			if t == '{' {
				n.Kind = yaml.MappingNode
			}
			for dec.More() {
				e, err := value()
				if err != nil {
					return nil, err
				}
				n.Content = append(n.Content, e)
			}
			if _, err := dec.Token(); err != nil {
				return nil, jsonError(data, name, dec, err)
			}
		case string:
			n.Kind, n.Tag, n.Value = yaml.ScalarNode, "!!str", t
		case json.Number:
			n.Kind, n.Tag, n.Value = yaml.ScalarNode, "!!float", t.String()
		case bool:
			n.Kind, n.Tag, n.Value = yaml.ScalarNode, "!!bool", strconv.FormatBool(t)
		case nil:
			n.Kind, n.Tag, n.Value = yaml.ScalarNode, "!!null", "null"
		}
		return n, nil
	}
	root, err := value()
	if err != nil {
		return nil, err
	}
	if tok, err := dec.Token(); !errors.Is(err, io.EOF) {
		l, c := lineCol(data, dec.InputOffset())
		if err != nil {
			return nil, jsonError(data, name, dec, err)
		}
		return nil, &FileError{File: name, Line: l, Col: c, Msg: fmt.Sprintf("unexpected %v after the job list", tok)}
	}
	return root, nil
}
