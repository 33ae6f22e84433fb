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
	// Find the end of the targets: the first ':' followed by a blank, a
	// newline or the end. Targets never contain an unescaped blank.
	colon := -1
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' {
			i++ // an escaped character is never the separator
			continue
		}
		if s[i] == ':' && (i+1 == len(s) || s[i+1] == ' ' || s[i+1] == '\t' || s[i+1] == '\n' || s[i+1] == '\r' || s[i+1] == '\\') {
			colon = i
			break
		}
	}
	if colon < 0 {
		return nil, fmt.Errorf("no ':' in the dependency listing %q", firstLine(s))
	}
	var (
		deps []string
		cur  strings.Builder
		have bool
	)
	flush := func() {
		if have {
			deps = append(deps, cur.String())
		}
		cur.Reset()
		have = false
	}
	for i := colon + 1; i < len(s); i++ {
		ch := s[i]
		switch {
		case ch == '\\':
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
				// A continuation: the backslashes before it (n-1 of them)
				// are literal; the last one joins the lines.
				cur.WriteString(strings.Repeat("\\", n-1))
				if n > 1 {
					have = true
				}
				flush()
				i += n
				if next == '\r' {
					i++
				}
			case next == ' ' || next == '\t':
				// 2k backslashes then a blank: k backslashes and the
				// word ends; 2k+1: k backslashes and an escaped blank.
				cur.WriteString(strings.Repeat("\\", n/2))
				have = true
				if n%2 == 1 {
					cur.WriteByte(next)
					i += n
				} else {
					i += n - 1
				}
			case next == '#':
				cur.WriteString(strings.Repeat("\\", n-1))
				cur.WriteByte('#')
				have = true
				i += n
			default:
				cur.WriteString(strings.Repeat("\\", n))
				have = true
				i += n - 1
			}
		case ch == '$' && i+1 < len(s) && s[i+1] == '$':
			cur.WriteByte('$')
			have = true
			i++
		case ch == ' ' || ch == '\t' || ch == '\r':
			flush()
		case ch == '\n':
			flush()
			// The first rule ends here; -MP's phony targets follow.
			return deps, nil
		default:
			cur.WriteByte(ch)
			have = true
		}
	}
	flush()
	return deps, nil
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
