package invocation

import (
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"google.golang.org/grpc/metadata"
)

// FuzzFromHeaders feeds arbitrary bytes as the RequestMetadata header (it
// comes from clients) and derives every key: no panic, one key per
// extractor.
func FuzzFromHeaders(f *testing.F) {
	f.Add([]byte{0x0a, 0x03, 'a', 'b', 'c'}, "user-1")
	f.Add([]byte("\xff\xfe garbage"), "")
	ex, err := ParseAll(Default)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, meta []byte, user string) {
		r := &Request{UserHeader: DefaultUserHeader}
		r.FromHeaders(metadata.Pairs(RequestMetadataHeader, string(meta), DefaultUserHeader, user))
		if got := Keys(ex, r); len(got) != len(ex) {
			t.Fatalf("%d keys for %d extractors", len(got), len(ex))
		}
	})
}

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
