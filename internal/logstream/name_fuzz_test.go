package logstream

import (
	"strings"
	"testing"
)

// Names parse back to what they were made from; whatever else parses is
// a well-formed name of the stream it names.
func FuzzParseName(f *testing.F) {
	for _, s := range []string{"logstreams/t1.stdout", "a/b/logstreams/x.stderr/lease-1", "logstreams//x", "a/logstreams/../t", "blobs/abc/3", "logstreams/c0f/tok/extra"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if n, err := ParseRead(s); err == nil {
			if n.Read() != s || !Is(s) || n.Token != "" {
				t.Fatalf("ParseRead(%q) = %+v, which reads back as %q", s, n, n.Read())
			}
		}
		if n, err := ParseWrite(s); err == nil {
			if n.Write() != s || !Is(s) || strings.Contains(n.ID, "/") || strings.Contains(n.Token, "/") {
				t.Fatalf("ParseWrite(%q) = %+v, which writes back as %q", s, n, n.Write())
			}
			if _, err := ParseRead(n.Read()); err != nil {
				t.Fatalf("the read name %q of write name %q does not parse: %v", n.Read(), s, err)
			}
		}
	})
}

func TestParseName(t *testing.T) {
	for _, tc := range []struct {
		s         string
		read, wrt bool
	}{
		{"logstreams/t1.stdout", true, false},
		{"team/main/logstreams/t1.stdout", true, false},
		{"team/main/logstreams/t1.stdout/lease-7", false, true},
		{"team/blobs/logstreams/t1.stdout", false, false}, // reserved word in the instance
		{"logstreams/", false, false},
		{"logstreams/a b", false, false},
		{"x/logstreams/t/../y", false, false},
	} {
		_, rerr := ParseRead(tc.s)
		_, werr := ParseWrite(tc.s)
		if (rerr == nil) != tc.read || (werr == nil) != tc.wrt {
			t.Errorf("%q: read %v, write %v; want read %v, write %v", tc.s, rerr, werr, tc.read, tc.wrt)
		}
	}
	if _, err := ParseRead("i/logstreams/t.stdout/tok"); err == nil || !strings.Contains(err.Error(), "write name") {
		t.Errorf("reading a write name: %v, want an error saying it is a write name", err)
	}
}
