package protocol

import (
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"
)

// FuzzCleanBuildName feeds arbitrary bytes as a build name (clients send
// it): the result is valid UTF-8, bounded, free of control characters and
// clean already.
func FuzzCleanBuildName(f *testing.F) {
	f.Add("gantry run -- sh -c 'echo hi'")
	f.Add("a\nb\x1b[31m\xff" + strings.Repeat("é", 150))
	f.Fuzz(func(t *testing.T, s string) {
		got := CleanBuildName(s)
		if !utf8.ValidString(got) || len(got) > MaxBuildName {
			t.Fatalf("CleanBuildName(%q) = %q: invalid UTF-8 or %d bytes", s, got, len(got))
		}
		for _, r := range got {
			if unicode.IsControl(r) {
				t.Fatalf("CleanBuildName(%q) = %q keeps control character %U", s, got, r)
			}
		}
		if again := CleanBuildName(got); again != got {
			t.Fatalf("CleanBuildName is not stable: %q, then %q", got, again)
		}
	})
}

// FuzzParseCriticalPath feeds arbitrary header values: a value either
// fails or gives a duration within bounds that formats back to itself.
func FuzzParseCriticalPath(f *testing.F) {
	for _, s := range []string{"0", "1500", "007", "-1", "1e3", " 5", "999999999999999", "9999999999999999", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseCriticalPath(s)
		if err != nil {
			return
		}
		if d < 0 || d > MaxCriticalPath || d%time.Millisecond != 0 {
			t.Fatalf("ParseCriticalPath(%q) = %v: out of bounds", s, d)
		}
		if again, err := ParseCriticalPath(FormatCriticalPath(d)); err != nil || again != d {
			t.Fatalf("%v formats as %q, which reads back as %v, %v", d, FormatCriticalPath(d), again, err)
		}
	})
}
