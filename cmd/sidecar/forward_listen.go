package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"syscall"
	"time"
)

// listenFailed is how forward ends when the local port of flag given (as
// typed: "-L localhost:8080") cannot be bound: 128+n when signal n cut a
// bind name's lookup short; a usage error (2) when one of our own
// listeners already bound holds the address (two -L/-D whose names and
// addresses resolve to the same one, which sameLocalPort cannot see);
// else exitBindFailed (1) with the flag and the reason: not 255, which
// says the connection to the host failed, when nothing was dialled.
func listenFailed(err error, sig syscall.Signal, bound []boundListener, given string) error {
	if sig != 0 {
		return interrupted(sig, "listening")
	}
	if b := clashingListener(bound, err); b != nil {
		return &exitError{code: 2, err: fmt.Errorf("%s and %s listen on the same port", b.given, given)}
	}
	msg := fmt.Sprintf("%s: %v", given, err)
	if errors.Is(err, syscall.EADDRINUSE) {
		msg += " (another program holds it: pick another local port, or 0 for any free one)"
	}
	return &exitError{code: exitBindFailed, err: &bindError{msg: msg, err: err}}
}

// exitBindFailed is forward's exit status when a local port cannot be
// bound: 1, as serve's for its own listener, distinct from 255 (the
// connection to the host failed) and 2 (a usage error).
const exitBindFailed = 1

// bindError is a local bind that failed, worded with the flag; it unwraps
// to the listen error.
type bindError struct {
	msg string
	err error
}

func (e *bindError) Error() string { return e.msg }
func (e *bindError) Unwrap() error { return e.err }

// boundListener is one listener of a -L (local set) or a -D (local nil),
// bound before the connection is dialled; given is the flag as typed
// ("-L localhost:8080"), for messages.
type boundListener struct {
	l     net.Listener
	local *localForward
	given string
}

// bindLookupTimeout bounds resolving a bind address given as a name
// (-L localhost:8080:...).
const bindLookupTimeout = 10 * time.Second

// lookupFunc resolves a bind name (net.Resolver.LookupIPAddr; tests
// substitute their own).
type lookupFunc func(ctx context.Context, host string) ([]net.IPAddr, error)

// listenFunc listens on one address (listenTCP; tests substitute their
// own).
type listenFunc func(ctx context.Context, network, addr string) (net.Listener, error)

func listenTCP(ctx context.Context, network, addr string) (net.Listener, error) {
	var lc net.ListenConfig
	return lc.Listen(ctx, network, addr)
}

// listenBind listens on bind (host:port) as ssh does. A literal address is
// one listener (on the network listenNetwork gives). A name gets one
// listener on every address it resolves to (localhost: 127.0.0.1 and ::1),
// and anyHost (*) one on 0.0.0.0 and one on [::] (all interfaces),
// IPv4 ones on tcp4 and IPv6 ones on tcp6; an address whose family the
// machine lacks (no IPv6: EADDRNOTAVAIL or EAFNOSUPPORT) is skipped as
// long as another one is bound. With port 0 the first listener picks the
// port and the others take the same. Any other failure closes what was
// bound and returns "cannot listen on ADDR: reason".
func listenBind(ctx context.Context, bind string, lookup lookupFunc, listen listenFunc) ([]net.Listener, error) {
	host, port, err := net.SplitHostPort(bind)
	if err != nil {
		return nil, fmt.Errorf("cannot listen on %s: %v", bind, err)
	}
	if a, err := netip.ParseAddr(host); err == nil { // a literal, zone included
		l, err := listen(ctx, listenNetwork(bind), bind)
		if err != nil {
			msg := fmt.Sprintf("cannot listen on %s: %v", bind, unwrapSyscall(err))
			if a.Is6() && a.IsLinkLocalUnicast() && a.Zone() == "" {
				msg += fmt.Sprintf(" (a link-local address needs its interface: [%s%%eth0])", a)
			}
			return nil, &listenError{addr: bind, msg: msg, err: err}
		}
		return []net.Listener{l}, nil
	}
	var addrs []net.IPAddr
	if host == anyHost {
		addrs = []net.IPAddr{{IP: net.IPv4zero}, {IP: net.IPv6unspecified}}
	} else {
		lctx, cancel := context.WithTimeout(ctx, bindLookupTimeout)
		addrs, err = lookup(lctx, host)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("cannot listen on %s: %v", bind, err)
		}
	}
	var ls []net.Listener
	var skipped error // the first address skipped for its family
	seen := map[string]bool{}
	for _, a := range addrs {
		ip := a.String() // with its zone, if any
		if seen[ip] {
			continue
		}
		seen[ip] = true
		network := "tcp6"
		if a.IP.To4() != nil {
			network = "tcp4"
		}
		addr := net.JoinHostPort(ip, port)
		l, err := listen(ctx, network, addr)
		switch {
		case err != nil && noAddressFamily(err):
			if skipped == nil {
				skipped = fmt.Errorf("cannot listen on %s (%s): %v", addr, host, unwrapSyscall(err))
			}
			continue
		case err != nil:
			for _, l := range ls {
				_ = l.Close()
			}
			return nil, &listenError{addr: addr, msg: fmt.Sprintf("cannot listen on %s (%s): %v", addr, host, unwrapSyscall(err)), err: err}
		}
		if port == "0" {
			if ta, ok := l.Addr().(*net.TCPAddr); ok {
				port = strconv.Itoa(ta.Port)
			}
		}
		ls = append(ls, l)
	}
	switch {
	case len(ls) > 0:
		return ls, nil
	case skipped != nil:
		return nil, skipped
	}
	return nil, fmt.Errorf("cannot listen on %s: %s has no address", bind, host)
}

// listenError is a bind that failed: addr is the address asked for (a
// name's resolved address: 127.0.0.1:8080); it unwraps to the listen
// error (errors.Is(err, syscall.EADDRINUSE) works).
type listenError struct {
	addr string
	msg  string
	err  error
}

func (e *listenError) Error() string { return e.msg }
func (e *listenError) Unwrap() error { return e.err }

// clashingListener finds, for a bind that failed with err, which of our
// own listeners already bound holds its address: the same address and
// port, or a wildcard of its family on that port (what bindsOverlap
// finds between literals, here once names are resolved: -L localhost:8080
// and -L 127.0.0.1:8080). It returns nil when err is no EADDRINUSE or
// the address is held by someone else.
func clashingListener(bound []boundListener, err error) *boundListener {
	var le *listenError
	if !errors.As(err, &le) || !errors.Is(err, syscall.EADDRINUSE) {
		return nil
	}
	want, perr := netip.ParseAddrPort(le.addr)
	if perr != nil {
		return nil
	}
	wa := want.Addr().Unmap()
	for i, b := range bound {
		ta, ok := b.l.Addr().(*net.TCPAddr)
		if !ok {
			continue
		}
		got := ta.AddrPort()
		if got.Port() == want.Port() && bindsOverlap(got.Addr().Unmap().String(), wa.String()) {
			return &bound[i]
		}
	}
	return nil
}

// noAddressFamily reports whether a listen failed because the machine has
// no such address family or address (a name's ::1 without IPv6).
func noAddressFamily(err error) bool {
	return errors.Is(err, syscall.EADDRNOTAVAIL) || errors.Is(err, syscall.EAFNOSUPPORT)
}

// listenNetwork is the network to listen on for a literal bind address,
// as ssh does: an IPv4 address (0.0.0.0 included) only IPv4 ("tcp" would
// make 0.0.0.0 a dual-stack [::]), an IPv6 one only IPv6, anything else
// (listenBind resolves names first) both.
func listenNetwork(bind string) string {
	host, _, err := net.SplitHostPort(bind)
	if err != nil {
		return "tcp"
	}
	ip := net.ParseIP(host)
	switch {
	case ip == nil:
		return "tcp"
	case ip.To4() != nil:
		return "tcp4"
	}
	return "tcp6"
}

func unwrapSyscall(err error) error {
	var se *os.SyscallError
	if errors.As(err, &se) {
		return se.Err
	}
	return err
}
