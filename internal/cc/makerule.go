package cc

import (
	"fmt"
	"strings"
)

// parseMakeDeps reads the prerequisites of the first rule of a make
// dependency file as a compiler writes it with -M: backslash-newline
// continuations, spaces escaped with a backslash (backslashes before a
// space doubled), "$$" for "$" and "\#" for "#". Phony rules that -MP adds
// after the first rule are ignored.
func parseMakeDeps(data []byte) ([]string, error) {
	s := string(data)
	colon := targetsEnd(s)
	if colon < 0 {
		return nil, fmt.Errorf("no ':' in the dependency listing %q", firstLine(s))
	}
	var w depWords
	for i := colon + 1; i < len(s); i++ {
		ch := s[i]
		switch {
		case ch == '\\':
			i = w.backslashes(s, i)
		case ch == '$' && i+1 < len(s) && s[i+1] == '$':
			w.add("$")
			i++
		case ch == ' ' || ch == '\t' || ch == '\r':
			w.flush()
		case ch == '\n':
			w.flush()
			// The first rule ends here; -MP's phony targets follow.
			return w.deps, nil
		default:
			w.cur.WriteByte(ch)
			w.have = true
		}
	}
	w.flush()
	return w.deps, nil
}

// targetsEnd is the index of the ':' that ends a rule's targets: the
// first one followed by a blank, a newline, a backslash or the end
// (targets never contain an unescaped blank), or -1.
func targetsEnd(s string) int {
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' {
			i++ // an escaped character is never the separator
			continue
		}
		if s[i] == ':' && (i+1 == len(s) || s[i+1] == ' ' || s[i+1] == '\t' || s[i+1] == '\n' || s[i+1] == '\r' || s[i+1] == '\\') {
			return i
		}
	}
	return -1
}

// depWords gathers the prerequisites: the word being read (cur; have:
// it has begun, even if empty so far) and those read.
type depWords struct {
	deps []string
	cur  strings.Builder
	have bool
}

// add appends text to the current word.
func (w *depWords) add(text string) {
	w.cur.WriteString(text)
	w.have = true
}

// flush ends the current word, if one has begun.
func (w *depWords) flush() {
	if w.have {
		w.deps = append(w.deps, w.cur.String())
	}
	w.cur.Reset()
	w.have = false
}

// backslashes reads the run of backslashes at s[i] and what they escape,
// and returns the index of the run's last character read.
func (w *depWords) backslashes(s string, i int) int {
	n := 0
	for i+n < len(s) && s[i+n] == '\\' {
		n++
	}
	next := byte(0)
	if i+n < len(s) {
		next = s[i+n]
	}
	switch {
	case next == '\n' || next == '\r' && i+n+1 < len(s) && s[i+n+1] == '\n':
		// A continuation: the backslashes before it (n-1 of them) are
		// literal; the last one joins the lines.
		w.cur.WriteString(strings.Repeat("\\", n-1))
		if n > 1 {
			w.have = true
		}
		w.flush()
		i += n
		if next == '\r' {
			i++
		}
		return i
	case next == ' ' || next == '\t':
		// 2k backslashes then a blank: k backslashes and the word ends;
		// 2k+1: k backslashes and an escaped blank.
		w.add(strings.Repeat("\\", n/2))
		if n%2 == 1 {
			w.cur.WriteByte(next)
			return i + n
		}
		return i + n - 1
	case next == '#':
		w.add(strings.Repeat("\\", n-1) + "#")
		return i + n
	default:
		w.add(strings.Repeat("\\", n))
		return i + n - 1
	}
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if len(s) > 80 {
		s = s[:80] + "..."
	}
	return s
}
