package frontend

import (
	"encoding/base64"
	"math"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// FuzzParsePageToken feeds GetTree page tokens (untrusted input) to the
// parser. It must never panic; a token it accepts must be exactly the one
// the server would have issued for that offset (so no two tokens mean the
// same page and nothing the server did not issue gets in), and a rejected
// token is INVALID_ARGUMENT with a bounded message.
func FuzzParsePageToken(f *testing.F) {
	for _, s := range []string{"", pageToken(0), pageToken(1000), pageToken(math.MaxInt),
		"not a token!", base64.RawURLEncoding.EncodeToString([]byte("-1")),
		base64.RawURLEncoding.EncodeToString([]byte("+5")), base64.RawURLEncoding.EncodeToString([]byte("007")),
		base64.RawURLEncoding.EncodeToString([]byte("99999999999999999999999")), "MQ", "MR", "MQ=="} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, tok string) {
		off, err := parsePageToken(tok)
		if err != nil {
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("parsePageToken(%q): %v, want INVALID_ARGUMENT", tok, err)
			}
			if n := len(status.Convert(err).Message()); n > 1024 {
				t.Fatalf("parsePageToken: %d-byte error message for a %d-byte token", n, len(tok))
			}
			return
		}
		if off < 0 {
			t.Fatalf("parsePageToken(%q) = %d", tok, off)
		}
		if tok == "" {
			if off != 0 {
				t.Fatalf("empty token = offset %d", off)
			}
			return
		}
		if again := pageToken(off); again != tok {
			t.Fatalf("parsePageToken(%q) = %d, but the server issues %q for that offset", tok, off, again)
		}
	})
}

// FuzzPageTokenRoundTrip: every token the server issues parses back to
// its offset.
func FuzzPageTokenRoundTrip(f *testing.F) {
	for _, n := range []int64{0, 1, 999, 1 << 40, math.MaxInt64} {
		f.Add(n)
	}
	f.Fuzz(func(t *testing.T, n int64) {
		if n < 0 || n > math.MaxInt {
			return
		}
		got, err := parsePageToken(pageToken(int(n)))
		if err != nil || got != int(n) {
			t.Fatalf("pageToken(%d) parses as %d, %v", n, got, err)
		}
	})
}
