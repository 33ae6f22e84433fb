package batch

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
)

// FileError is a problem in a job file, at a line (and column when known,
// both from 1).
type FileError struct {
	File      string
	Line, Col int
	Msg       string
}

func (e *FileError) Error() string {
	switch {
	case e.Line == 0:
		return fmt.Sprintf("%s: %s", e.File, e.Msg)
	case e.Col == 0:
		return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg)
	}
	return fmt.Sprintf("%s:%d:%d: %s", e.File, e.Line, e.Col, e.Msg)
}

// lineCol turns a byte offset of data into a line and column (from 1;
// the column counts bytes).
func lineCol(data []byte, off int64) (line, col int) {
	return (&lineCounter{data: data}).at(off)
}

// lineCounter turns offsets into lines and columns in time proportional to
// the distance from the previous offset, so a parser that asks for every
// value's position in order stays linear in the file's size.
type lineCounter struct {
	data      []byte
	off       int64 // the offset of the last call
	line      int   // the line at off, from 0
	lineStart int64 // the offset where that line starts
}

func (l *lineCounter) at(off int64) (line, col int) {
	off = min(max(off, 0), int64(len(l.data)))
	if off < l.off {
		l.off, l.line, l.lineStart = 0, 0, 0
	}
	seg := l.data[l.off:off]
	if n := bytes.Count(seg, []byte{'\n'}); n > 0 {
		l.line += n
		l.lineStart = l.off + int64(bytes.LastIndexByte(seg, '\n')) + 1
	}
	l.off = off
	return l.line + 1, int(off-l.lineStart) + 1
}

// ParseFile reads a job file: a compile_commands.json (a JSON array) or a
// Gantry job list (YAML or JSON, a mapping with "jobs"), told apart by
// the first character that is not white space. Relative directories in
// the file are relative to the file's own directory.
func ParseFile(path string) ([]*Job, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("cannot read the job file: %w", err)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	base := filepath.Dir(abs)
	if t := bytes.TrimLeft(data, " \t\r\n\ufeff"); len(t) > 0 && t[0] == '[' {
		return ParseCompileCommands(data, path, base)
	}
	return ParseJobList(data, path, base)
}
