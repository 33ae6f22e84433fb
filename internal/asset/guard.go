package asset

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
)

// Guard decides which addresses the fetcher may connect to. By default
// only public addresses: a client must not be able to make the server
// read its own loopback services, the cloud metadata endpoint
// (link-local) or the private network behind it (server-side request
// forgery). The check runs on the address actually dialled (the
// dialer's Control hook), so it holds after DNS resolution, on every
// redirect and against DNS rebinding.
type Guard struct {
	hosts    []string // exact names, or "*.suffix"
	prefixes []netip.Prefix
}

// NewGuard builds a guard that also allows the entries of allow: a host
// name ("mirror.internal"), a wildcard ("*.corp.example.com"), an IP
// address or a CIDR prefix ("10.0.0.0/8").
func NewGuard(allow []string) (*Guard, error) {
	g := &Guard{}
	for _, a := range allow {
		a = strings.TrimSpace(a)
		if p, err := netip.ParsePrefix(a); err == nil {
			g.prefixes = append(g.prefixes, p.Masked())
			continue
		}
		if ip, err := netip.ParseAddr(a); err == nil {
			g.prefixes = append(g.prefixes, netip.PrefixFrom(ip.Unmap(), ip.Unmap().BitLen()))
			continue
		}
		if a == "" || strings.ContainsAny(a, "/: ") || strings.Contains(strings.TrimPrefix(a, "*."), "*") {
			return nil, fmt.Errorf("%q is neither a host name, a *.domain wildcard, an IP address nor a CIDR prefix", a)
		}
		g.hosts = append(g.hosts, strings.ToLower(strings.TrimSuffix(a, ".")))
	}
	return g, nil
}

// ForbiddenError is a connection the guard refused.
type ForbiddenError struct {
	Host string
	Addr netip.Addr
}

func (e *ForbiddenError) Error() string {
	return fmt.Sprintf("refusing to connect to %s (%s): loopback, private and link-local addresses are not fetched unless remote_asset.allow_hosts lists the host or its network", e.Host, e.Addr)
}

// Check returns a *ForbiddenError unless host (the name in the URL)
// resolved to addr may be dialled.
func (g *Guard) Check(host string, addr netip.Addr) error {
	addr = addr.Unmap()
	if public(addr) || g.allowedHost(host) {
		return nil
	}
	for _, p := range g.prefixes {
		if p.Contains(addr) {
			return nil
		}
	}
	return &ForbiddenError{Host: host, Addr: addr}
}

func (g *Guard) allowedHost(host string) bool {
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	for _, h := range g.hosts {
		if h == host || (strings.HasPrefix(h, "*.") && strings.HasSuffix(host, h[1:])) {
			return true
		}
	}
	return false
}

// CheckHost resolves host and checks every address, for requests that go
// through a proxy (where the dial is to the proxy, not to host). A
// numeric host other than a dotted decimal address is refused
// (checkSpelling), unresolved.
func (g *Guard) CheckHost(ctx context.Context, host string) error {
	if ip, err := netip.ParseAddr(host); err == nil {
		return g.Check(host, ip)
	}
	if err := g.checkSpelling(host); err != nil {
		return err
	}
	if g.allowedHost(host) {
		return nil
	}
	addrs, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return err
	}
	for _, a := range addrs {
		if err := g.Check(host, a); err != nil {
			return err
		}
	}
	return nil
}

// sharedAddressSpace is carrier-grade NAT (RFC 6598), private in effect.
var sharedAddressSpace = netip.MustParsePrefix("100.64.0.0/10")

// public reports whether a is a globally routable unicast address.
func public(a netip.Addr) bool {
	return a.IsValid() && a.IsGlobalUnicast() && !a.IsPrivate() && !sharedAddressSpace.Contains(a) &&
		!(a.Is4() && a.As4()[0] == 0)
}
