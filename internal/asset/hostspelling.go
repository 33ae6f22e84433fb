package asset

import (
	"fmt"
	"net/netip"
	"strings"
)

// Numeric host spellings. inet_aton(3), and after it curl, proxies and
// browsers (the WHATWG URL standard), read "127.1", "2130706433",
// "0x7f000001" and "0177.0.0.1" as 127.0.0.1; Go's resolver takes them
// for names and asks DNS. The fetcher reads them as the addresses they
// are, so that the guard refuses the forbidden ones as it refuses
// 127.0.0.1, and refuses the rest too (Go would not dial them as
// addresses, and a proxy would): a URL must spell an IPv4 address in
// dotted decimal.

// HostSpellingError is a URL host that is a number but not a dotted
// decimal IPv4 address.
type HostSpellingError struct {
	Host string
	// Addr is the address Host stands for; invalid when Host is no
	// address at all.
	Addr netip.Addr
}

func (e *HostSpellingError) Error() string {
	if !e.Addr.IsValid() {
		return fmt.Sprintf("host %q ends in a number but is not an IPv4 address; give a host name or a dotted decimal IPv4 address", e.Host)
	}
	return fmt.Sprintf("host %q is the IPv4 address %s in a shortened, decimal, octal or hexadecimal spelling, which Gantry does not fetch from; write it as %s", e.Host, e.Addr, e.Addr)
}

// checkSpelling refuses a host that is an IPv4 address in another
// spelling than dotted decimal: with the guard's *ForbiddenError if the
// guard refuses the address, else with a *HostSpellingError; and a host
// whose last label is a number without being an address.
func (g *Guard) checkSpelling(host string) error {
	if _, err := netip.ParseAddr(host); err == nil {
		return nil
	}
	if a, ok := parseIPv4Spelling(host); ok {
		if err := g.Check(host, a); err != nil {
			return err
		}
		return &HostSpellingError{Host: host, Addr: a}
	}
	if endsInNumber(host) {
		return &HostSpellingError{Host: host}
	}
	return nil
}

// parseIPv4Spelling reads host as inet_aton(3) does: one to four parts
// separated by dots (and an optional trailing dot, as URL parsers
// allow), each decimal, octal (a leading 0) or hexadecimal (0x); the
// last part fills the bytes the others leave. ok is false when host is
// not such a spelling.
func parseIPv4Spelling(host string) (netip.Addr, bool) {
	host = strings.TrimSuffix(host, ".")
	parts := strings.Split(host, ".")
	if len(parts) > 4 {
		return netip.Addr{}, false
	}
	var v uint64
	for i, p := range parts {
		n, ok := parseIPv4Part(p)
		if !ok {
			return netip.Addr{}, false
		}
		if i < len(parts)-1 {
			if n > 0xff {
				return netip.Addr{}, false
			}
			v = v<<8 | n
			continue
		}
		rest := 8 * uint(4-i) // bits the last part fills
		if n >= 1<<rest {
			return netip.Addr{}, false
		}
		v = v<<rest | n
	}
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), true
}

// parseIPv4Part reads one part: 0x followed by hex digits (none: 0), a 0
// followed by octal digits, or decimal digits. Values beyond 32 bits are
// refused without overflowing.
func parseIPv4Part(p string) (uint64, bool) {
	base, digits := uint64(10), p
	switch {
	case len(p) >= 2 && p[0] == '0' && (p[1] == 'x' || p[1] == 'X'):
		base, digits = 16, p[2:]
		if digits == "" {
			return 0, true
		}
	case len(p) > 1 && p[0] == '0':
		base, digits = 8, p[1:]
	case p == "":
		return 0, false
	}
	var n uint64
	for i := 0; i < len(digits); i++ {
		d, ok := digitValue(digits[i])
		if !ok || d >= base {
			return 0, false
		}
		n = n*base + d
		if n > 0xffffffff {
			return 0, false
		}
	}
	return n, true
}

func digitValue(c byte) (uint64, bool) {
	switch {
	case c >= '0' && c <= '9':
		return uint64(c - '0'), true
	case c >= 'a' && c <= 'f':
		return uint64(c-'a') + 10, true
	case c >= 'A' && c <= 'F':
		return uint64(c-'A') + 10, true
	}
	return 0, false
}

// endsInNumber reports whether the last label of host (before an
// optional trailing dot) is decimal digits, or 0x and hex digits: no DNS
// name ends so (top-level domains are letters), and URL parsers take
// such a host for an IPv4 address or refuse it.
func endsInNumber(host string) bool {
	host = strings.TrimSuffix(host, ".")
	last := host[strings.LastIndexByte(host, '.')+1:]
	if last == "" {
		return false
	}
	if len(last) >= 2 && last[0] == '0' && (last[1] == 'x' || last[1] == 'X') {
		last = last[2:]
		for i := 0; i < len(last); i++ {
			if _, ok := digitValue(last[i]); !ok {
				return false
			}
		}
		return true
	}
	for i := 0; i < len(last); i++ {
		if last[i] < '0' || last[i] > '9' {
			return false
		}
	}
	return true
}
