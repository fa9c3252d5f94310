package main

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"

	tcpadapter "github.com/sidecar-dev/sidecar/adapters/tcp"
)

// localForward is one -L.
type localForward struct {
	bind     string // host:port to listen on (host anyHost: all interfaces)
	given    string // [bind:]port as typed, for messages
	host     string // destination, as seen from the host
	hostPort int
}

// anyHost is the bind host of "all interfaces" (ssh's empty bind address
// or *): listenBind listens on 0.0.0.0 and [::].
const anyHost = "*"

// bindHost is the host to listen on for a bind address as ssh reads it:
// empty and * mean all interfaces (anyHost); anything else stays. A port
// with no bind part at all gets 127.0.0.1 from the parsers, not from here.
func bindHost(s string) string {
	if s == "" {
		return anyHost
	}
	return s
}

// parseLocal parses [bind:]port:host:hostport; IPv6 addresses go in
// brackets: [::1]:8080:[::1]:3000.
func parseLocal(spec string) (localForward, error) {
	parts, err := splitSpec(spec)
	if err != nil {
		return localForward{}, fmt.Errorf("bad -L %q: %v", spec, err)
	}
	f, err := parseLocalParts(parts)
	if err != nil {
		if len(parts) > 4 && unbracketedIPv6(parts) {
			return localForward{}, fmt.Errorf("bad -L %q: put IPv6 addresses in brackets: [::1]", spec)
		}
		return localForward{}, fmt.Errorf("bad -L %q: %v", spec, err)
	}
	return f, nil
}

func parseLocalParts(parts []string) (localForward, error) {
	var f localForward
	bind := "127.0.0.1" // no bind part: loopback only, as ssh
	switch len(parts) {
	case 3:
		f.given = parts[0]
	case 4:
		bind = bindHost(parts[0])
		f.given = net.JoinHostPort(parts[0], parts[1])
		parts = parts[1:]
	default:
		return f, errors.New("want [bind:]port:host:hostport")
	}
	port, err := parsePort(parts[0], true)
	if err != nil {
		return f, err
	}
	f.bind = net.JoinHostPort(bind, strconv.Itoa(port))
	f.host = parts[1]
	if f.host == "" {
		return f, errors.New("no destination host")
	}
	if err := tcpadapter.CheckHost(f.host); err != nil {
		return f, fmt.Errorf("destination host %q %v", f.host, err)
	}
	if f.hostPort, err = parsePort(parts[2], false); err != nil {
		return f, err
	}
	return f, nil
}

// parseDynamic parses [bind:]port into the address to listen on and the
// [bind:]port as typed.
func parseDynamic(spec string) (bind, given string, err error) {
	parts, err := splitSpec(spec)
	if err != nil {
		return "", "", fmt.Errorf("bad -D %q: %v", spec, err)
	}
	host := "127.0.0.1" // no bind part: loopback only, as ssh
	switch len(parts) {
	case 1:
		given = parts[0]
	case 2:
		host = bindHost(parts[0])
		given = net.JoinHostPort(parts[0], parts[1])
		parts = parts[1:]
	default:
		if unbracketedIPv6(parts) {
			return "", "", fmt.Errorf("bad -D %q: put IPv6 addresses in brackets: [::1]", spec)
		}
		return "", "", fmt.Errorf("bad -D %q: want [bind:]port", spec)
	}
	port, err := parsePort(parts[0], true)
	if err != nil {
		return "", "", fmt.Errorf("bad -D %q: %v", spec, err)
	}
	return net.JoinHostPort(host, strconv.Itoa(port)), given, nil
}

// unbracketedIPv6 reports whether some of parts (a spec split at every
// ':' outside brackets, into too many parts) joined again make an IPv6
// address: "-L 5605:::1:5600" meant [::1], which the split took apart.
func unbracketedIPv6(parts []string) bool {
	for i := range parts {
		for j := i + 3; j <= len(parts); j++ { // an IPv6 address has at least two colons
			if a, err := netip.ParseAddr(strings.Join(parts[i:j], ":")); err == nil && a.Is6() {
				return true
			}
		}
	}
	return false
}

// sameLocalPort finds two -L/-D that listen on the same port on
// overlapping addresses (the second would fail with "address already in
// use"): the same address, or a wildcard (*, 0.0.0.0, [::]) and an
// address of its family. binds[i] is the address to listen on, given[i]
// the flag as typed ("-L 5603"). Port 0 never clashes; names are not
// resolved here (only the same name clashes). It returns "" when there is
// no such pair.
func sameLocalPort(binds, given []string) string {
	for i, b := range binds {
		hi, pi, err := net.SplitHostPort(b)
		if err != nil || pi == "0" {
			continue
		}
		for j := range i {
			hj, pj, err := net.SplitHostPort(binds[j])
			if err != nil || pj != pi || !bindsOverlap(hi, hj) {
				continue
			}
			if given[j] == given[i] {
				return given[i] + " given twice"
			}
			return fmt.Sprintf("%s and %s listen on the same port", given[j], given[i])
		}
	}
	return ""
}

// bindsOverlap reports whether listening on bind hosts a and b (same port)
// clashes: the same host, or a wildcard and an address of its family
// (anyHost covers both families).
func bindsOverlap(a, b string) bool {
	if a == b {
		return true
	}
	fam := func(h string) (v4, v6, wild bool) {
		if h == anyHost {
			return true, true, true
		}
		ip, err := netip.ParseAddr(h)
		if err != nil {
			return false, false, false // a name: not resolved here
		}
		return ip.Unmap().Is4(), !ip.Unmap().Is4(), ip.IsUnspecified()
	}
	a4, a6, aw := fam(a)
	b4, b6, bw := fam(b)
	shared := a4 && b4 || a6 && b6
	return shared && (aw || bw)
}

// splitSpec splits on ':' outside brackets and removes the brackets.
func splitSpec(spec string) ([]string, error) {
	var parts []string
	var cur strings.Builder
	depth := 0
	for _, r := range spec {
		switch {
		case r == '[':
			depth++
		case r == ']':
			depth--
		case r == ':' && depth == 0:
			parts = append(parts, cur.String())
			cur.Reset()
		default:
			cur.WriteRune(r)
		}
		if depth < 0 || depth > 1 {
			return nil, errors.New("unbalanced brackets")
		}
	}
	if depth != 0 {
		return nil, errors.New("unbalanced brackets")
	}
	return append(parts, cur.String()), nil
}

// parsePort reads a port in decimal digits (no sign): 1-65535, or 0 too
// when zeroOK (a local port: any free one); the error names the range.
func parsePort(s string, zeroOK bool) (int, error) {
	low := 1
	if zeroOK {
		low = 0
	}
	p, err := strconv.Atoi(s)
	if err != nil || p < low || p > 65535 || strings.Trim(s, "0123456789") != "" {
		return 0, fmt.Errorf("%q is not a port (%d to 65535)", s, low)
	}
	return p, nil
}
