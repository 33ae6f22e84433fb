package asset

import (
	"net/netip"
	"testing"
)

func TestGuard(t *testing.T) {
	def, _ := NewGuard(nil)
	allow, err := NewGuard([]string{"mirror.internal", "*.corp.example", "10.1.0.0/16", "::1"})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		host, addr   string
		def, allowed bool
	}{
		{"example.com", "93.184.216.34", true, true},
		{"example.com", "2606:2800:220:1::1", true, true},
		{"localhost", "127.0.0.1", false, false},
		{"localhost", "::1", false, true},
		{"x", "::ffff:127.0.0.1", false, false},
		{"metadata", "169.254.169.254", false, false},
		{"x", "10.1.2.3", false, true},
		{"x", "10.2.0.1", false, false},
		{"x", "192.168.1.1", false, false},
		{"x", "172.16.0.1", false, false},
		{"x", "100.64.0.1", false, false},
		{"x", "0.0.0.0", false, false},
		{"x", "fd00::1", false, false},
		{"x", "fe80::1", false, false},
		{"x", "224.0.0.1", false, false},
		{"mirror.internal", "192.168.1.1", false, true},
		{"MIRROR.internal.", "192.168.1.1", false, true},
		{"a.corp.example", "10.9.9.9", false, true},
		{"corp.example.evil", "10.9.9.9", false, false},
	}
	for _, c := range cases {
		a := netip.MustParseAddr(c.addr)
		if got := def.Check(c.host, a) == nil; got != c.def {
			t.Errorf("default guard, %s at %s: allowed %v, want %v", c.host, c.addr, got, c.def)
		}
		if got := allow.Check(c.host, a) == nil; got != c.allowed {
			t.Errorf("allow list, %s at %s: allowed %v, want %v", c.host, c.addr, got, c.allowed)
		}
	}
	for _, bad := range []string{"", "http://x", "a*b.com", "*.*.com"} {
		if _, err := NewGuard([]string{bad}); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
