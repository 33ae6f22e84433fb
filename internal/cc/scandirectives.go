package cc

import (
	"bytes"
	"fmt"
)

// directive is one header a file names: an #include, #include_next or
// #import, or the operand of __has_include / __has_include_next in an #if.
type directive struct {
	name  string // as written between the delimiters
	angle bool   // <name>, else "name"
	next  bool   // #include_next or __has_include_next
	// only: #pragma GCC dependency, a file the compiler looks at (it
	// fails without it) but does not preprocess.
	only bool
}

// cannotScan says that the scanner cannot be sure of a compile's inputs
// (a computed include, #embed, ...): the compiler's listing decides.
type cannotScan struct{ reason string }

func (e *cannotScan) Error() string {
	return "the include scanner cannot follow this compile: " + e.reason
}

func unscannable(format string, a ...any) error {
	return &cannotScan{reason: fmt.Sprintf(format, a...)}
}

// scanDirectives reads the include directives of a C, C++, Objective-C or
// preprocessed-assembler file, in every conditional branch (live or
// not). It skips comments and string, character and raw string literals
// so that they cannot hide a directive or fake one, joins
// backslash-newline continuations, and knows the %: digraph. It errs
// (cannotScan) for what it cannot follow: an include of a macro, #embed,
// an unterminated raw string or header name, trigraphs.
//
// The lexing errs on the side of seeing too much: a '#' first on any
// physical line outside comments and literals starts a directive, and a
// digit separator (1'000) is read as a character literal, which can only
// hide the rest of its own line.
func scanDirectives(data []byte) ([]directive, error) {
	if bytes.Contains(data, []byte("??=")) || bytes.Contains(data, []byte("??/")) {
		// A trigraph could be a '#' or a backslash; rare enough to leave
		// to the compiler.
		return nil, unscannable("trigraph-like ??= or ??/")
	}
	data = removeSplices(data)
	s := &dirScanner{data: data}
	bol := true
	n := len(data)
	for s.i < n {
		c := data[s.i]
		switch {
		case c == '\n' || c == '\r':
			bol = true
			s.i++
		case c == ' ' || c == '\t' || c == '\f' || c == '\v':
			s.i++
		case c == '/' && s.peek(1) == '/':
			s.i = lineEnd(data, s.i)
		case c == '/' && s.peek(1) == '*':
			if s.skipBlockComment() {
				bol = true
			}
		case bol && (c == '#' || c == '%' && s.peek(1) == ':'):
			if c == '#' {
				s.i++
			} else {
				s.i += 2
			}
			if err := s.directive(); err != nil {
				return nil, err
			}
			bol = false
		case c == '"' || c == '\'':
			s.skipLiteral()
			bol = false
		case isIdentStart(c):
			j := identEnd(data, s.i)
			if j < n && data[j] == '"' && isRawPrefix(data[s.i:j]) {
				s.i = j
				if err := s.skipRawString(); err != nil {
					return nil, err
				}
			} else {
				s.i = j
			}
			bol = false
		case c >= '0' && c <= '9' || c == '.' && s.peek(1) >= '0' && s.peek(1) <= '9':
			// A pp-number: "1uR" must not start a raw string.
			s.i++
			for s.i < n && (isIdentChar(data[s.i]) || data[s.i] == '.') {
				s.i++
			}
			bol = false
		default:
			s.i++
			bol = false
		}
	}
	return s.out, nil
}

type dirScanner struct {
	data []byte
	i    int
	out  []directive
}

func (s *dirScanner) peek(k int) byte {
	if s.i+k < len(s.data) {
		return s.data[s.i+k]
	}
	return 0
}

// skipBlockComment skips a /* comment */ at s.i and reports whether it
// spanned a line end. An unterminated comment runs to the end.
func (s *dirScanner) skipBlockComment() bool {
	body := s.data[s.i+2:]
	j := bytes.Index(body, []byte("*/"))
	if j < 0 {
		j = len(body)
		s.i = len(s.data)
	} else {
		s.i += 2 + j + 2
	}
	return bytes.IndexByte(body[:j], '\n') >= 0 || bytes.IndexByte(body[:j], '\r') >= 0
}

// skipLiteral skips a string or character literal at s.i: to the closing
// quote (backslash escapes one character) or, unterminated, to the end
// of the line, as the compiler lexes it.
func (s *dirScanner) skipLiteral() {
	q := s.data[s.i]
	s.i++
	for s.i < len(s.data) {
		switch c := s.data[s.i]; {
		case c == q:
			s.i++
			return
		case c == '\n' || c == '\r':
			return
		case c == '\\' && s.i+1 < len(s.data) && s.data[s.i+1] != '\n' && s.data[s.i+1] != '\r':
			s.i += 2
		default:
			s.i++
		}
	}
}

// skipRawString skips R"delim( ... )delim" with s.i at the quote. A
// malformed delimiter is an ordinary string (as the compiler recovers);
// an unterminated raw string cannot be scanned.
func (s *dirScanner) skipRawString() error {
	start := s.i + 1
	j := start
	for j < len(s.data) && j-start <= 16 {
		c := s.data[j]
		if c == '(' {
			break
		}
		if c == ' ' || c == ')' || c == '\\' || c == '\t' || c == '\v' || c == '\f' || c == '\n' || c == '\r' || c == '"' {
			j = -1
			break
		}
		j++
	}
	if j < 0 || j >= len(s.data) || s.data[j] != '(' {
		s.skipLiteral()
		return nil
	}
	end := make([]byte, 0, j-start+2)
	end = append(append(append(end, ')'), s.data[start:j]...), '"')
	k := bytes.Index(s.data[j+1:], end)
	if k < 0 {
		return unscannable("an unterminated raw string literal")
	}
	s.i = j + 1 + k + len(end)
	return nil
}

// skipSpace skips blanks and comments within the directive's line (a
// block comment may span lines). It reports whether the line goes on.
func (s *dirScanner) skipSpace() bool {
	for s.i < len(s.data) {
		switch c := s.data[s.i]; {
		case c == ' ' || c == '\t' || c == '\f' || c == '\v':
			s.i++
		case c == '/' && s.peek(1) == '*':
			s.skipBlockComment()
		case c == '/' && s.peek(1) == '/':
			s.i = lineEnd(s.data, s.i)
			return false
		case c == '\n' || c == '\r':
			return false
		default:
			return true
		}
	}
	return false
}

// directive reads one directive, s.i just after the '#'; it leaves s.i
// at the end of the directive's line.
func (s *dirScanner) directive() error {
	if !s.skipSpace() || !isIdentStart(s.data[s.i]) {
		return s.restOfLine(true)
	}
	j := identEnd(s.data, s.i)
	name := string(s.data[s.i:j])
	s.i = j
	switch name {
	case "include", "include_next", "import":
		if !s.skipSpace() {
			return unscannable("#%s without a header name", name)
		}
		d, err := s.headerName()
		if err != nil {
			return fmt.Errorf("#%s: %w", name, err)
		}
		d.next = name == "include_next"
		s.out = append(s.out, d)
		s.restOfLine(false)
	case "embed":
		return unscannable("#embed")
	case "pragma":
		// #pragma GCC dependency "file": gcc's listing does not name
		// the file, but the compile fails without it.
		if s.word() == "GCC" && s.word() == "dependency" && s.skipSpace() {
			d, err := s.headerName()
			if err != nil {
				return fmt.Errorf("#pragma GCC dependency: %w", err)
			}
			d.only = true
			s.out = append(s.out, d)
		}
		return s.restOfLine(true)
	default:
		// #if and #elif, and #define too: a macro can stand for
		// __has_include(<x.h>) in a later #if (libstdc++'s c++config.h).
		return s.restOfLine(true)
	}
	return nil
}

// word reads the identifier after blanks and comments on the line ("" if
// there is none).
func (s *dirScanner) word() string {
	if !s.skipSpace() || !isIdentStart(s.data[s.i]) {
		return ""
	}
	j := identEnd(s.data, s.i)
	w := string(s.data[s.i:j])
	s.i = j
	return w
}

// headerName reads <name> or "name" at s.i; anything else is a computed
// include.
func (s *dirScanner) headerName() (directive, error) {
	c := s.data[s.i]
	var closer byte
	switch c {
	case '<':
		closer = '>'
	case '"':
		closer = '"'
	default:
		return directive{}, unscannable("a computed include (a macro instead of <file> or \"file\")")
	}
	start := s.i + 1
	for j := start; j < len(s.data); j++ {
		switch s.data[j] {
		case closer:
			name := string(s.data[start:j])
			if name == "" {
				return directive{}, unscannable("an empty header name")
			}
			s.i = j + 1
			return directive{name: name, angle: closer == '>'}, nil
		case '\n', '\r':
			j = len(s.data)
		}
	}
	return directive{}, unscannable("an unterminated header name")
}

// restOfLine skips to the end of the directive's line, past comments and
// literals; with has set it records the operands of __has_include and
// __has_include_next.
func (s *dirScanner) restOfLine(has bool) error {
	for s.i < len(s.data) {
		c := s.data[s.i]
		switch {
		case c == '\n' || c == '\r':
			return nil
		case c == '/' && s.peek(1) == '*':
			s.skipBlockComment()
		case c == '/' && s.peek(1) == '/':
			s.i = lineEnd(s.data, s.i)
			return nil
		case c == '"' || c == '\'':
			s.skipLiteral()
		case isIdentStart(c):
			j := identEnd(s.data, s.i)
			word := string(s.data[s.i:j])
			s.i = j
			if !has {
				continue
			}
			switch word {
			case "__has_include", "__has_include__", "__has_include_next", "__has_include_next__":
				if !s.skipSpace() || s.data[s.i] != '(' {
					continue // "defined __has_include": the operator's existence
				}
				s.i++
				if !s.skipSpace() {
					return unscannable("%s without an operand", word)
				}
				d, err := s.headerName()
				if err != nil {
					return fmt.Errorf("%s: %w", word, err)
				}
				d.next = word == "__has_include_next" || word == "__has_include_next__"
				s.out = append(s.out, d)
			case "__has_embed", "__has_embed__":
				return unscannable("__has_embed")
			}
		case c >= '0' && c <= '9':
			s.i++
			for s.i < len(s.data) && (isIdentChar(s.data[s.i]) || s.data[s.i] == '.') {
				s.i++
			}
		default:
			s.i++
		}
	}
	return nil
}

// removeSplices joins backslash-newline continuations (gcc also accepts
// blanks between the backslash and the newline). It returns data itself
// when there are none.
func removeSplices(data []byte) []byte {
	var out []byte
	last := 0
	for i := 0; i < len(data); {
		k := bytes.IndexByte(data[i:], '\\')
		if k < 0 {
			break
		}
		i += k
		j := i + 1
		for j < len(data) && (data[j] == ' ' || data[j] == '\t' || data[j] == '\f' || data[j] == '\v') {
			j++
		}
		switch {
		case j < len(data) && data[j] == '\n':
			j++
		case j < len(data) && data[j] == '\r':
			j++
			if j < len(data) && data[j] == '\n' {
				j++
			}
		default:
			i++
			continue
		}
		if out == nil {
			out = make([]byte, 0, len(data))
		}
		out = append(out, data[last:i]...)
		last, i = j, j
	}
	if out == nil {
		return data
	}
	return append(out, data[last:]...)
}

// lineEnd is the index of the end of the line holding i.
func lineEnd(data []byte, i int) int {
	for ; i < len(data); i++ {
		if data[i] == '\n' || data[i] == '\r' {
			return i
		}
	}
	return i
}

func isIdentStart(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '$' || c >= 0x80
}

func isIdentChar(c byte) bool { return isIdentStart(c) || c >= '0' && c <= '9' }

func identEnd(data []byte, i int) int {
	for i < len(data) && isIdentChar(data[i]) {
		i++
	}
	return i
}

// isRawPrefix reports whether an identifier right before a '"' makes a raw
// string literal.
func isRawPrefix(id []byte) bool {
	switch string(id) {
	case "R", "LR", "uR", "UR", "u8R":
		return true
	}
	return false
}
