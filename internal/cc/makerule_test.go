package cc

import (
	"reflect"
	"strings"
	"testing"
)

func TestParseMakeDeps(t *testing.T) {
	cases := []struct {
		in   string
		want []string
	}{
		{"a.o: a.c b.h\n", []string{"a.c", "b.h"}},
		{"a.o: a.c \\\n /usr/include/stdio.h \\\n  c.h\n", []string{"a.c", "/usr/include/stdio.h", "c.h"}},
		{"x: sp\\ ace.h d$$ollar.h h\\#ash.h\n", []string{"sp ace.h", "d$ollar.h", "h#ash.h"}},
		{"x: back\\\\\\ slash.h tail\\\\ z\n", []string{`back\ slash.h`, `tail\`, "z"}},
		{"t1 t\\ 2: a.c\n\nb.h:\n", []string{"a.c"}},
		{"a.o: a.c b.h\r\n", []string{"a.c", "b.h"}},
		{"a.o:\\\n a.c", []string{"a.c"}},
		{"c\\:x.o: a.c\n", []string{"a.c"}},
	}
	for _, tc := range cases {
		got, err := parseMakeDeps([]byte(tc.in))
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("parseMakeDeps(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	if _, err := parseMakeDeps([]byte("no rule here\n")); err == nil {
		t.Error("a listing without ':' should be an error")
	}
}

// FuzzParseMakeDeps: never panics; a rule written with gcc's escaping
// reads back as the names written.
func FuzzParseMakeDeps(f *testing.F) {
	f.Add("a.c\x00sp ace.h\x00d$.h")
	f.Add("h#.h\x00x\\ y")
	f.Fuzz(func(t *testing.T, joined string) {
		parseMakeDeps([]byte(joined)) // must not panic on anything
		names := strings.Split(joined, "\x00")
		var b strings.Builder
		b.WriteString("t.o:")
		for _, n := range names {
			if n == "" || strings.ContainsAny(n, "\n\r\t\x00") || strings.HasSuffix(n, `\`) {
				return // names gcc cannot write unambiguously
			}
			b.WriteString(" \\\n " + munge(n))
		}
		got, err := parseMakeDeps([]byte(b.String() + "\n"))
		if err != nil || !reflect.DeepEqual(got, names) {
			t.Fatalf("wrote %q, read %q (%v)", names, got, err)
		}
	})
}

// munge escapes a name as gcc's mkdeps does: a backslash run before a
// blank doubled and the blank escaped, $ as $$, # as \#.
func munge(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case ' ', '\t':
			for j := i - 1; j >= 0 && s[j] == '\\'; j-- {
				b.WriteByte('\\')
			}
			b.WriteByte('\\')
			b.WriteByte(c)
		case '$':
			b.WriteString("$$")
		case '#':
			b.WriteString(`\#`)
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// targetsEnd finds the ':' that ends the targets, past escaped ones and
// drive-letter-like colons inside a target.
func TestTargetsEnd(t *testing.T) {
	for s, want := range map[string]int{
		"a.o: a.c":   3,
		"a.o:":       3,
		"a\\:b.o: x": 6,
		"c:x.o: y":   5,
		"a.o:\\\n b": 3,
		"no colon":   -1,
		"a.o:b":      -1,
		"a\\: b":     -1,
	} {
		if got := targetsEnd(s); got != want {
			t.Errorf("targetsEnd(%q) = %d, want %d", s, got, want)
		}
	}
}
