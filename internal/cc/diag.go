package cc

import (
	"bytes"
	"regexp"
	"sort"
	"sync"
)

// absSysrootPath matches a path into the remote input root's sysroot
// mirror, which the remote compiler prints absolute ("/worker/root/
// .gantry-sysroot/usr/include/stdio.h"): the local compiler would print
// "/usr/include/stdio.h".
// It is compiled on first use: a launcher process that maps no messages
// should not pay for it.
var absSysrootPath = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`(^|[\s'"(‘]|\x1b\[[0-9;]*[@-~])/[^\s'"()‘’\x1b]*/` + regexp.QuoteMeta(SysrootDir) + `/`)
})

// MapDiagnostics rewrites the remote compiler's messages (stderr) so that
// paths read as the local compiler would print them: a source or header
// given absolute appears absolute again, and mirrored system headers
// appear at their own path. Call it after Spec.
func (c *Compile) MapDiagnostics(b []byte) []byte {
	if c.layout == nil || len(b) == 0 {
		return b
	}
	pairs := append([]pathPair(nil), c.layout.diag...)
	sort.SliceStable(pairs, func(i, j int) bool { return len(pairs[i].from) > len(pairs[j].from) })
	if c.layout.absSysroot {
		b = absSysrootPath().ReplaceAll(b, []byte("$1/"))
	}
	if len(pairs) == 0 {
		return b
	}
	var out bytes.Buffer
	out.Grow(len(b))
	for i := 0; i < len(b); {
		if i == 0 || isPathBoundary(b[i-1]) || endsWithCSI(b[:i]) {
			matched := false
			for _, p := range pairs {
				if bytes.HasPrefix(b[i:], []byte(p.from)) {
					out.WriteString(p.to)
					i += len(p.from)
					matched = true
					break
				}
			}
			if matched {
				continue
			}
		}
		out.WriteByte(b[i])
		i++
	}
	return out.Bytes()
}

// isPathBoundary reports whether a path may start after c in a message.
func isPathBoundary(c byte) bool {
	switch c {
	case ' ', '\t', '\n', '\r', '\'', '"', '(', '`':
		return true
	}
	// The last byte of gcc's ‘ (U+2018, E2 80 98).
	return c == 0x98
}

// endsWithCSI reports whether b ends with an ANSI control sequence such
// as gcc's colour codes ("\x1b[01m\x1b[K"), after which a path may start.
func endsWithCSI(b []byte) bool {
	i := len(b) - 1
	if i < 2 || b[i] < '@' || b[i] > '~' {
		return false
	}
	for i--; i >= 1 && (b[i] >= '0' && b[i] <= '9' || b[i] == ';'); i-- {
	}
	return b[i] == '[' && b[i-1] == 0x1b
}
