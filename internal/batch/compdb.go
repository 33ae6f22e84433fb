package batch

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
)

// compdbEntry is one entry of a compile_commands.json
// (https://clang.llvm.org/docs/JSONCompilationDatabase.html). Other
// fields are ignored, as the tools that write the format add their own.
type compdbEntry struct {
	Directory *string  `json:"directory"`
	File      *string  `json:"file"`
	Arguments []string `json:"arguments"`
	Command   *string  `json:"command"`
	Output    string   `json:"output"`
}

// ParseCompileCommands reads a compile_commands.json: a JSON array of
// entries {directory, file, arguments | command, output?}. Each entry
// becomes a Compile job named after its output (or its file when it has
// none; a repeated name gets " (2)", " (3)" ...). "arguments" wins over
// "command", which is split by the shell's quoting rules (SplitCommand).
// A relative directory is taken relative to base (the file's directory).
// name is the file's name for error messages, which give the line and
// column of the problem.
func ParseCompileCommands(data []byte, name, base string) ([]*Job, error) {
	lines := &lineCounter{data: data}
	ferr := func(off int64, format string, a ...any) error {
		l, c := lines.at(off)
		return &FileError{File: name, Line: l, Col: c, Msg: fmt.Sprintf(format, a...)}
	}
	if err := checkJSON(data, name); err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	tok, err := dec.Token()
	if err != nil {
		return nil, jsonError(data, name, dec, err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '[' {
		return nil, ferr(dec.InputOffset(), "a compile_commands.json is a JSON array of entries, but this starts with %v", tok)
	}
	var jobs []*Job
	seen := map[string]int{}
	for n := 1; dec.More(); n++ {
		start := skipSpace(data, dec.InputOffset())
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, jsonError(data, name, dec, err)
		}
		var e compdbEntry
		if err := json.Unmarshal(raw, &e); err != nil {
			var te *json.UnmarshalTypeError
			if errors.As(err, &te) {
				// te.Offset is just after the value.
				return nil, ferr(start+te.Offset-1, "entry %d: field %q: found a JSON %s where %s belongs", n, te.Field, te.Value, jsonKind(te.Type.String()))
			}
			return nil, ferr(start, "entry %d: %v", n, err)
		}
		j, msg := e.job(base)
		if msg != "" {
			return nil, ferr(start, "entry %d: %s", n, msg)
		}
		j.Line, _ = lines.at(start)
		if k := seen[j.Name]; k > 0 {
			seen[j.Name] = k + 1
			j.Name = fmt.Sprintf("%s (%d)", j.Name, k+1)
		} else {
			seen[j.Name] = 1
		}
		jobs = append(jobs, j)
	}
	if _, err := dec.Token(); err != nil { // the closing ]
		return nil, jsonError(data, name, dec, err)
	}
	end := skipSpace(data, dec.InputOffset())
	if tok, err := dec.Token(); err != io.EOF {
		if err != nil {
			return nil, jsonError(data, name, dec, err)
		}
		return nil, ferr(end, "unexpected %v after the array; the file should hold one array", tok)
	}
	return jobs, nil
}

func (e *compdbEntry) job(base string) (*Job, string) {
	if e.Directory == nil || *e.Directory == "" {
		return nil, `no "directory" (the directory the compiler runs in)`
	}
	if e.File == nil || *e.File == "" {
		return nil, `no "file" (the source file)`
	}
	j := &Job{Kind: Compile, Dir: *e.Directory, Inputs: []string{*e.File}}
	if !filepath.IsAbs(j.Dir) {
		j.Dir = filepath.Join(base, j.Dir)
	}
	j.Dir = filepath.Clean(j.Dir)
	switch {
	case e.Arguments != nil:
		if len(e.Arguments) == 0 || e.Arguments[0] == "" {
			return nil, `"arguments" is empty; it should hold the compiler and its arguments`
		}
		j.Args = e.Arguments
	case e.Command != nil:
		args, err := SplitCommand(*e.Command)
		if err != nil {
			return nil, fmt.Sprintf(`"command": %v`, err)
		}
		if len(args) == 0 {
			return nil, `"command" is empty; it should hold the compiler and its arguments`
		}
		j.Args = args
	default:
		return nil, `neither "arguments" nor "command" (the compiler command line)`
	}
	j.Name = *e.File
	if e.Output != "" {
		j.Name = e.Output
		j.Outputs = []string{e.Output}
	}
	return j, ""
}

// checkJSON checks the syntax of the whole file first, so the error
// names the exact place (the streaming decoder's offsets are not exact).
func checkJSON(data []byte, name string) error {
	err := json.Unmarshal(data, new(json.RawMessage))
	if err == nil {
		return nil
	}
	off, msg := int64(0), err.Error()
	var se *json.SyntaxError
	if errors.As(err, &se) {
		off, msg = se.Offset-1, se.Error()
	}
	if strings.Contains(msg, "unexpected end of JSON input") {
		off, msg = int64(len(data)), "the file ends in the middle of the JSON (a missing ] or }?)"
	}
	l, c := lineCol(data, off)
	return &FileError{File: name, Line: l, Col: c, Msg: "invalid JSON: " + msg}
}

// jsonError turns a decoding error of a file checkJSON passed into a
// FileError at the decoder's position.
func jsonError(data []byte, name string, dec *json.Decoder, err error) error {
	l, c := lineCol(data, dec.InputOffset())
	return &FileError{File: name, Line: l, Col: c, Msg: "invalid JSON: " + err.Error()}
}

// skipSpace returns the offset of the first byte at or after off that is
// neither JSON white space nor a comma: where the next value starts.
func skipSpace(data []byte, off int64) int64 {
	for off < int64(len(data)) && strings.IndexByte(" \t\r\n,", data[off]) >= 0 {
		off++
	}
	return off
}

func jsonKind(goType string) string {
	switch goType {
	case "[]string":
		return "an array of strings"
	case "string", "*string":
		return "a string"
	}
	return goType
}
