package tcp

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
)

// Policy decides which resolved destination addresses may be dialed
// (DESIGN.md §7): those inside an allowed prefix (tcp.allow; the default is
// loopback only). Link-local and cloud metadata addresses are refused even
// inside a broad prefix such as 0.0.0.0/0, unless an entry names them (a
// prefix at least as narrow as the sensitive range); unspecified, multicast
// and broadcast addresses are always refused.
type Policy struct {
	allow []netip.Prefix
	// own are the daemon's own listening addresses (SetOwn), refused by
	// CheckDest.
	own []netip.AddrPort
	// localAddrs returns the addresses of this machine's interfaces
	// (tests replace it).
	localAddrs func() []netip.Addr
}

// sensitive are ranges only a specific allow entry opens: metadata
// services are the classic target of a forwarded-port SSRF, and link-local
// addresses are never a workload's service.
var sensitive = []struct {
	prefix netip.Prefix
	what   string
}{
	{netip.MustParsePrefix("169.254.169.254/32"), "a cloud metadata address"},
	{netip.MustParsePrefix("fd00:ec2::254/128"), "a cloud metadata address"},
	{netip.MustParsePrefix("100.100.100.200/32"), "a cloud metadata address"},
	{netip.MustParsePrefix("168.63.129.16/32"), "a cloud metadata address"},
	{netip.MustParsePrefix("169.254.0.0/16"), "a link-local address"},
	{netip.MustParsePrefix("fe80::/10"), "a link-local address"},
}

// NewPolicy parses tcp.allow entries: CIDRs ("10.0.0.0/8") or single
// addresses ("192.168.1.7", "::1").
func NewPolicy(allow []string) (*Policy, error) {
	p := &Policy{}
	for _, a := range allow {
		a = strings.TrimSpace(a)
		if pfx, err := netip.ParsePrefix(a); err == nil {
			p.allow = append(p.allow, pfx.Masked())
			continue
		}
		addr, err := netip.ParseAddr(a)
		if err != nil {
			return nil, fmt.Errorf("tcp.allow: %q is neither a CIDR nor an IP address", a)
		}
		addr = addr.Unmap()
		p.allow = append(p.allow, netip.PrefixFrom(addr, addr.BitLen()))
	}
	return p, nil
}

// Check returns nil if addr may be dialed, else the reason (a phrase such
// as "a link-local address", used after "not allowed by policy: ").
func (p *Policy) Check(addr netip.Addr) (reason string, ok bool) {
	addr = addr.Unmap().WithZone("")
	switch {
	case addr.IsUnspecified():
		return "the unspecified address", false
	case addr.IsMulticast() || addr == netip.MustParseAddr("255.255.255.255"):
		return "a multicast or broadcast address", false
	}
	for _, s := range sensitive {
		if !s.prefix.Contains(addr) {
			continue
		}
		for _, a := range p.allow {
			if a.Contains(addr) && a.Bits() >= s.prefix.Bits() {
				return "", true
			}
		}
		return s.what + ", which tcp.allow must list explicitly", false
	}
	for _, a := range p.allow {
		if a.Contains(addr) {
			return "", true
		}
	}
	return "not in tcp.allow", false
}

// SetOwn sets the daemon's own TCP listening addresses, as bound (the
// listener's, the metrics listener's): CheckDest refuses them whatever
// tcp.allow says. A TCP channel into the daemon's own listener would be a
// connection to the daemon made by the daemon, from its own address: past
// any firewall in front of it, counted apart from the client's own
// connections, and a loop a client could nest. A listener on the
// unspecified address (0.0.0.0 or ::) takes every local address on its
// port: the loopback ones and those of the machine's interfaces. Call it
// before the Policy is used.
func (p *Policy) SetOwn(own []netip.AddrPort) {
	p.own = nil
	for _, o := range own {
		p.own = append(p.own, netip.AddrPortFrom(o.Addr().Unmap().WithZone(""), o.Port()))
	}
}

// CheckDest is Check for a destination's address and port: it also
// refuses the daemon's own listeners (SetOwn), in every spelling of their
// address (IPv4-mapped IPv6 included; a name is checked by what it
// resolves to).
func (p *Policy) CheckDest(addr netip.Addr, port int) (reason string, ok bool) {
	if reason, ok := p.Check(addr); !ok {
		return reason, false
	}
	addr = addr.Unmap().WithZone("")
	for _, o := range p.own {
		if int(o.Port()) != port {
			continue
		}
		if o.Addr() == addr || (o.Addr().IsUnspecified() && p.isLocal(addr)) {
			return fmt.Sprintf("the daemon's own listener %s (a TCP channel may not connect back into sidecar)", o), false
		}
	}
	return "", true
}

// isLocal reports whether addr (unmapped) is an address of this machine:
// loopback, or one of its interfaces'.
func (p *Policy) isLocal(addr netip.Addr) bool {
	if addr.IsLoopback() {
		return true
	}
	local := p.localAddrs
	if local == nil {
		local = interfaceAddrs
	}
	return slices.Contains(local(), addr)
}

// interfaceAddrs returns the addresses of this machine's interfaces,
// unmapped and without zones (none when they cannot be read).
func interfaceAddrs() []netip.Addr {
	ifaddrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil
	}
	var addrs []netip.Addr
	for _, ia := range ifaddrs {
		if n, ok := ia.(*net.IPNet); ok {
			if a, ok := netip.AddrFromSlice(n.IP); ok {
				addrs = append(addrs, a.Unmap())
			}
		}
	}
	return addrs
}

// FirstWindowBytes is the window (UTF-16 bytes) a TCP channel is always
// granted, whatever its client's other connections hold
// (config tcp.window_bytes_per_client): the delivery block's default
// window, twice what the sidecar client offers first. A subscribe that
// offers less gets what it offers.
const FirstWindowBytes = 256 << 10
