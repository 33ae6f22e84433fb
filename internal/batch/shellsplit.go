package batch

import (
	"fmt"
	"strings"
)

// splitError is a quoting error at a byte offset of the split string.
type splitError struct {
	off int
	msg string
}

func (e *splitError) Error() string { return fmt.Sprintf("%s (at byte %d)", e.msg, e.off+1) }

// SplitCommand splits a command line into words by the POSIX shell's
// quoting rules, as the tools that read compile_commands.json do: blanks
// separate words; a backslash outside quotes keeps the next character (and
// drops a newline); single quotes keep everything up to the next one;
// double quotes keep everything but let a backslash escape $ ` " \ and a
// newline. Nothing is expanded: $VAR, globs and operators are plain text.
func SplitCommand(s string) ([]string, error) {
	var words []string
	var w strings.Builder
	inWord := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			if inWord {
				words = append(words, w.String())
				w.Reset()
				inWord = false
			}
		case c == '\\':
			if i+1 >= len(s) {
				return nil, &splitError{i, "a backslash ends the command; remove it or escape it"}
			}
			i++
			if s[i] != '\n' {
				w.WriteByte(s[i])
				inWord = true
			}
		case c == '\'':
			end := strings.IndexByte(s[i+1:], '\'')
			if end < 0 {
				return nil, &splitError{i, "a single quote is not closed"}
			}
			w.WriteString(s[i+1 : i+1+end])
			i += 1 + end
			inWord = true
		case c == '"':
			j := i + 1
			for ; j < len(s) && s[j] != '"'; j++ {
				if s[j] == '\\' && j+1 < len(s) && strings.IndexByte("$`\"\\\n", s[j+1]) >= 0 {
					j++
					if s[j] != '\n' {
						w.WriteByte(s[j])
					}
					continue
				}
				w.WriteByte(s[j])
			}
			if j >= len(s) {
				return nil, &splitError{i, "a double quote is not closed"}
			}
			i = j
			inWord = true
		default:
			w.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		words = append(words, w.String())
	}
	return words, nil
}
