package protocol

import (
	"strings"
	"testing"
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
