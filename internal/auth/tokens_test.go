package auth

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
)

func TestParseTokens(t *testing.T) {
	sum := sha256.Sum256([]byte("hashed-token-0123456789"))
	file := "# comment\n\nalice  alice-token-0123456789\n" +
		"ci\tci-token-0123456789abcdef  builders,release\n" +
		"bob sha256:" + hex.EncodeToString(sum[:]) + "\n"
	tk, err := ParseTokens([]byte(file), "tokens")
	if err != nil {
		t.Fatal(err)
	}
	if tk.Len() != 3 {
		t.Fatalf("Len = %d, want 3", tk.Len())
	}
	if id := tk.Lookup("alice-token-0123456789"); id == nil || id.Subject != "alice" || id.Source != SourceToken {
		t.Errorf("alice: %+v", id)
	}
	if id := tk.Lookup("ci-token-0123456789abcdef"); id == nil || strings.Join(id.Groups, ",") != "builders,release" {
		t.Errorf("ci: %+v", id)
	}
	if id := tk.Lookup("hashed-token-0123456789"); id == nil || id.Subject != "bob" {
		t.Errorf("bob (hashed): %+v", id)
	}
	if id := tk.Lookup("alice-token-012345678"); id != nil {
		t.Errorf("a prefix of a token was accepted as %v", id)
	}
	var none *Tokens
	if none.Lookup("x") != nil || none.Len() != 0 {
		t.Error("nil Tokens")
	}
}

func TestParseTokensErrors(t *testing.T) {
	for _, c := range []struct{ file, want string }{
		{"alice\n", "tokens:1: expected SUBJECT TOKEN"},
		{"\nalice short\n", "tokens:2: the token of \"alice\" is shorter than 16"},
		{"a tok-0123456789abcdef\nb tok-0123456789abcdef\n", "tokens:2: this token is already given to \"a\""},
		{"a sha256:abcd\n", "64 hex digits"},
		{"* tok-0123456789abcdef\n", "reserved"},
		{"anonymous tok-0123456789abcdef\n", "reserved"},
		{"group:x tok-0123456789abcdef\n", "group:"},
		{"a tok-0123456789abcdef g1,,g2\n", "empty group name"},
		{"a tok-0123456789abcdef g x\n", "found 4 fields"},
		{"a\x01b tok-0123456789abcdef\n", "control character"},
		{"a " + strings.Repeat("x", 70000) + "\n", "64 KiB"},
	} {
		_, err := ParseTokens([]byte(c.file), "tokens")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseTokens(%.40q) = %v, want an error containing %q", c.file, err, c.want)
		}
	}
}
