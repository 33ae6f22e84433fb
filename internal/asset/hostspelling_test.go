package asset

import (
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
)

func TestParseIPv4Spelling(t *testing.T) {
	for host, want := range map[string]string{
		"127.0.0.1":               "127.0.0.1",
		"127.1":                   "127.0.0.1",
		"127.0.1":                 "127.0.0.1",
		"2130706433":              "127.0.0.1",
		"0x7f000001":              "127.0.0.1",
		"0X7F000001":              "127.0.0.1",
		"0x7f.1":                  "127.0.0.1",
		"0177.0.0.1":              "127.0.0.1",
		"017700000001":            "127.0.0.1",
		"127.0.0.1.":              "127.0.0.1",
		"10.0x10.1":               "10.16.0.1",
		"192.168.0x101":           "192.168.1.1",
		"1.2.65535":               "1.2.255.255",
		"169.254.43518":           "169.254.169.254",
		"0":                       "0.0.0.0",
		"0x":                      "0.0.0.0",
		"00":                      "0.0.0.0",
		"4294967295":              "255.255.255.255",
		"1.2.3.04":                "1.2.3.4",
		"4294967296":              "",
		"99999999999999999999999": "",
		"256.1":                   "",
		"1.2.3.256":               "",
		"1.2.65536":               "",
		"1.2.3.4.5":               "",
		"08":                      "",
		"0x1g":                    "",
		"1..2":                    "",
		".1":                      "",
		"":                        "",
		"example.com":             "",
		"1.2.3.4..":               "",
		"::1":                     "",
	} {
		a, ok := parseIPv4Spelling(host)
		got := ""
		if ok {
			got = a.String()
		}
		if got != want {
			t.Errorf("parseIPv4Spelling(%q) = %q, want %q", host, got, want)
		}
	}
}

func TestGuardRefusesNumericSpellings(t *testing.T) {
	def, _ := NewGuard(nil)
	allow, _ := NewGuard([]string{"127.0.0.1"})
	for _, c := range []struct {
		host string
		// what the default guard and the one allowing 127.0.0.1 say:
		// "" (nothing here: the dial is checked), "forbidden", or the
		// address a spelling error suggests ("-": none).
		def, allowed string
	}{
		{"example.com", "", ""},
		{"127.0.0.1", "", ""},
		{"::1", "", ""},
		{"x1.example", "", ""},
		{"123abc", "", ""},
		{"127.1", "forbidden", "127.0.0.1"},
		{"2130706433", "forbidden", "127.0.0.1"},
		{"0x7f000001", "forbidden", "127.0.0.1"},
		{"0177.0.0.1", "forbidden", "127.0.0.1"},
		{"0300.0250.1.1", "forbidden", "forbidden"},
		{"0xa9fea9fe", "forbidden", "forbidden"},
		{"1572395042", "93.184.216.34", "93.184.216.34"},
		{"1.2.3.04", "1.2.3.4", "1.2.3.4"},
		{"1.2.3.4.5", "-", "-"},
		{"a.b.123", "-", "-"},
		{"host.0x1f", "-", "-"},
	} {
		for _, g := range []struct {
			guard *Guard
			want  string
		}{{def, c.def}, {allow, c.allowed}} {
			err := g.guard.checkSpelling(c.host)
			var fe *ForbiddenError
			var se *HostSpellingError
			got := ""
			switch {
			case errors.As(err, &fe):
				got = "forbidden"
			case errors.As(err, &se) && se.Addr.IsValid():
				got = se.Addr.String()
				if !strings.Contains(err.Error(), "write it as "+got) {
					t.Errorf("%s: message %q does not say how to write it", c.host, err)
				}
			case errors.As(err, &se):
				got = "-"
			case err != nil:
				got = err.Error()
			}
			if got != g.want {
				t.Errorf("checkSpelling(%q) = %v (%q), want %q", c.host, err, got, g.want)
			}
		}
	}
}

// TestFetchReadsNumericHostsAsAddresses: URLs naming 127.0.0.1 in other
// spellings are refused as 127.0.0.1 is (PERMISSION_DENIED), or, where
// 127.0.0.1 is allowed, with INVALID_ARGUMENT saying how to write it, on
// the first request and on a redirect; the origin is never contacted
// through them.
func TestFetchReadsNumericHostsAsAddresses(t *testing.T) {
	target := newOrigin(t, serve([]byte("internal secret")))
	_, port, _ := strings.Cut(strings.TrimPrefix(target.URL, "http://"), ":")
	spellings := []string{"127.1", "2130706433", "0x7f000001", "0177.0.0.1", "127.0.0.1.", "0x7f.0.0.0x1"}
	def := newFixture(t, func(c *FetcherConfig) { c.Guard = nil })
	allowing := newFixture(t, nil) // allows 127.0.0.1
	for _, h := range spellings {
		uri := fmt.Sprintf("http://%s:%s/secret", h, port)
		_, err := def.fetchBlob([]string{uri})
		if msg := wantCode(t, err, codes.PermissionDenied); !strings.Contains(msg, "(127.0.0.1)") || !strings.Contains(msg, "remote_asset.allow_hosts") {
			t.Errorf("%s, default guard: %q", uri, msg)
		}
		_, err = allowing.fetchBlob([]string{uri})
		if msg := wantCode(t, err, codes.InvalidArgument); !strings.Contains(msg, "write it as 127.0.0.1") {
			t.Errorf("%s, 127.0.0.1 allowed: %q", uri, msg)
		}
	}
	redirect := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://2130706433:"+port+"/secret", http.StatusFound)
	})
	_, err := allowing.fetchBlob([]string{redirect.URL + "/go"})
	if msg := wantCode(t, err, codes.InvalidArgument); !strings.Contains(msg, "write it as 127.0.0.1") {
		t.Errorf("redirect: %q", msg)
	}
	if target.hits.Load() != 0 || redirect.hits.Load() != 1 {
		t.Fatalf("hits: target %d (want 0), redirect %d (want 1)", target.hits.Load(), redirect.hits.Load())
	}
}

// FuzzParseIPv4Spelling: any host parses or not without panicking; what
// parses ends in a number (so checkSpelling never passes it as a name),
// and reads back the same in other spellings of its value.
func FuzzParseIPv4Spelling(f *testing.F) {
	for _, s := range []string{"127.1", "2130706433", "0x7f000001", "0177.0.0.1", "1.2.3.4", "1.2.3.4.", "0x", "08", "256.1", "a.b.1", "4294967296", "::1"} {
		f.Add(s)
	}
	g, _ := NewGuard(nil)
	f.Fuzz(func(t *testing.T, host string) {
		a, ok := parseIPv4Spelling(host)
		spellingErr := g.checkSpelling(host)
		if !ok {
			return
		}
		if !a.Is4() {
			t.Fatalf("%q parsed to %v, not IPv4", host, a)
		}
		if !endsInNumber(host) {
			t.Fatalf("%q parses as %v but does not end in a number", host, a)
		}
		if _, err := netip.ParseAddr(host); err != nil && spellingErr == nil {
			t.Fatalf("%q (%v) passed checkSpelling", host, a)
		}
		b := a.As4()
		v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
		for _, other := range []string{a.String(), fmt.Sprint(v), fmt.Sprintf("0x%x", v), fmt.Sprintf("0%o", v), fmt.Sprintf("%d.%d", b[0], v&0xffffff)} {
			if c, ok := parseIPv4Spelling(other); !ok || c != a {
				t.Fatalf("%q is %v, but %q reads as %v, %v", host, a, other, c, ok)
			}
		}
	})
}
