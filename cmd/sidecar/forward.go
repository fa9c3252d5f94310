package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	socks5 "github.com/armon/go-socks5"
	"github.com/spf13/cobra"

	"github.com/sidecar-dev/sidecar/client"
	"github.com/sidecar-dev/sidecar/rpc"
)

// forwardOpenTimeout bounds createTcpConnection plus the subscription for
// one accepted connection (the host's own dial is bounded by
// tcp.dial_timeout).
const forwardOpenTimeout = 30 * time.Second

// forwardDrain bounds how long Ctrl-C waits for open channels to close.
const forwardDrain = 3 * time.Second

func forwardCmd() *cobra.Command {
	var cf connFlags
	var locals, dynamics []string
	cmd := &cobra.Command{
		Use:   "forward URL -L [bind:]port:host:hostport ... [-D [bind:]port ...]",
		Short: "Forward local TCP ports through the host, like ssh -L and ssh -D",
		Long: `Forward local TCP ports through the host, as ssh -L and -D do.

-L [bind:]port:host:hostport listens on bind:port and opens, for every
accepted connection, one TCP channel on which the host connects to
host:hostport. host is resolved on the host, and must be allowed by its
tcp.allow policy (loopback only by default). Put IPv6 addresses in
brackets: -L 8080:[::1]:3000.

The bind address is as ssh's: none (-L 8080:...) listens on 127.0.0.1
only; an empty one (-L :8080:...) or * (-L '*:8080:...') on all
interfaces (0.0.0.0 and [::]); a name on every address it resolves to
(localhost: 127.0.0.1 and ::1). Port 0 picks a free port; the address
actually bound is printed. Every port is bound before connecting: one in
use fails at once.

-D [bind:]port runs a SOCKS5 proxy (CONNECT, no authentication) whose
connections go out from the host, names resolved there (SOCKS4 clients
get SOCKS4's rejection). Its bind address is as -L's.

Both may be given several times; everything shares one connection to the
host. Ctrl-C resets every forwarded connection still open (a download cut
short never looks complete) and exits 0; before it has connected, 130.

Exit status: 0 after Ctrl-C, SIGTERM or SIGHUP once connected (130, 143
or 129 while still connecting); 255 when a local port cannot be bound,
or the connection cannot be made or is lost; 2 for a usage error.`,
		Example: `  sidecar forward wss://127.0.0.1:4433/ahp -L 8080:127.0.0.1:3000 -L 127.0.0.1:5433:db:5432
  sidecar forward wss://127.0.0.1:4433/ahp -D 1080`,
		Args: forwardArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return forward(&cf, args[0], locals, dynamics)
		},
	}
	cf.register(cmd)
	// forward refuses --ordinary (TCP channels need windowed delivery):
	// not worth a line in its help.
	_ = cmd.Flags().MarkHidden("ordinary")
	cmd.Flags().StringArrayVarP(&locals, "local", "L", nil, "forward [bind:]port to host:hostport on the host's side (repeatable)")
	cmd.Flags().StringArrayVarP(&dynamics, "dynamic", "D", nil, "SOCKS5 proxy on [bind:]port, connecting from the host (repeatable)")
	return cmd
}

// forwardArgs takes exactly one argument, the URL (with --via, connFlags
// puts "stdio:" in for a missing one), and says in words what is wrong
// otherwise: a forwarding typed without -L, say, is named.
func forwardArgs(_ *cobra.Command, args []string) error {
	switch len(args) {
	case 0:
		return errors.New("missing URL: sidecar forward URL -L [bind:]port:host:hostport or -D [bind:]port")
	case 1:
		return nil
	case 2:
		return fmt.Errorf("unexpected argument %q: forward takes one URL; give forwardings with -L/-D", args[1])
	}
	quoted := make([]string, len(args)-1)
	for i, a := range args[1:] {
		quoted[i] = strconv.Quote(a)
	}
	return fmt.Errorf("unexpected arguments %s: forward takes one URL; give forwardings with -L/-D", strings.Join(quoted, " "))
}

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

// forwarder runs the listeners and the channels of one forward command.
type forwarder struct {
	conn         *client.Conn
	wg           sync.WaitGroup // connection handlers
	socksTimeout time.Duration  // the SOCKS handshake's bound; 0: socksGreetingTimeout

	// done is closed when forward shuts down: it ends the accept loops'
	// waits between failed Accepts at once. nil: never.
	done <-chan struct{}
	// stderr gets the accept failures; nil: os.Stderr (tests).
	stderr io.Writer
	// retryMin and retryMax bound the wait after a failed Accept; 0:
	// acceptRetryMin and acceptRetryMax (tests).
	retryMin, retryMax time.Duration

	mu     sync.Mutex
	active map[*net.TCPConn]struct{}
}

// log is where forward's lines go: fw.stderr, else os.Stderr.
func (fw *forwarder) log() io.Writer {
	if fw.stderr != nil {
		return fw.stderr
	}
	return os.Stderr
}

// ending reports whether forward is shutting down (done closed) or the
// connection to the host has ended. A channel that fails then failed
// because of it: that gets no line of its own (Ctrl-C needs none, and
// the connection's end is said once, with the count of connections
// reset).
func (fw *forwarder) ending() bool {
	select {
	case <-fw.done: // nil: never
		return true
	default:
	}
	return fw.conn != nil && fw.conn.Err() != nil
}

// release stops tracking local connection c, whose handler has ended,
// unless it was reset while forward is ending: closeActive counts those
// among the connections reset, whichever of the handler and closeActive
// got there first.
func (fw *forwarder) release(c *net.TCPConn, wasReset bool) {
	if wasReset && fw.ending() {
		return
	}
	fw.track(c, false)
}

// resetTCP closes c with an RST instead of a FIN: its reader gets
// ECONNRESET, never the EOF of a complete answer.
func resetTCP(c *net.TCPConn) {
	_ = c.SetLinger(0)
	_ = c.Close()
}

// forwardGCPercent is the GOGC a forward runs with unless $GOGC is set
// (setGCPercent). Its heap is pooled buffers and the windows' data in
// flight, and it allocates little per byte moved (about 25 MB over 3 GiB
// of bulk transfer: some 30 collections, 0% of its CPU), so collecting
// after 25% of growth rather than Go's 100% costs no throughput, while it
// lowers the smallest heap Go lets grow before it collects from 4 MB to
// 1 MB: the floor that most of a forward's memory for a handful of stalled
// connections was.
const forwardGCPercent = 25

func forward(cf *connFlags, url string, locals, dynamics []string) error {
	if len(locals) == 0 && len(dynamics) == 0 {
		return &exitError{code: 2, err: errors.New("nothing to forward: give -L [bind:]port:host:hostport or -D [bind:]port")}
	}
	if cf.ordinary {
		return &exitError{code: 2, err: errors.New("--ordinary cannot forward: TCP channels need windowed delivery")}
	}
	setGCPercent(forwardGCPercent)
	var lfs []localForward
	var binds, given []string // every -L and -D, for sameLocalPort
	for _, s := range locals {
		f, err := parseLocal(s)
		if err != nil {
			return &exitError{code: 2, err: err}
		}
		lfs = append(lfs, f)
		binds, given = append(binds, f.bind), append(given, "-L "+f.given)
	}
	for _, s := range dynamics {
		d, g, err := parseDynamic(s)
		if err != nil {
			return &exitError{code: 2, err: err}
		}
		binds, given = append(binds, d), append(given, "-D "+g)
	}
	if msg := sameLocalPort(binds, given); msg != "" {
		return &exitError{code: 2, err: errors.New(msg)}
	}
	ctx, caught, stop := signalContext(os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	// Listen before dialing: a local address in use fails at once, without
	// a connection. Until the accept loops start (once connected), the
	// kernel's backlog holds the connections that arrive early.
	var bound []boundListener
	closeListeners := func() {
		for _, b := range bound {
			_ = b.l.Close()
		}
	}
	defer closeListeners()       // a failed dial; closing twice is harmless
	for i, bind := range binds { // the -L first (lfs[i]), then the -D
		var local *localForward
		if i < len(lfs) {
			local = &lfs[i]
		}
		ls, err := listenBind(ctx, bind, net.DefaultResolver.LookupIPAddr, listenTCP)
		if err != nil {
			return listenFailed(err, caught(), bound, given[i])
		}
		for _, l := range ls {
			bound = append(bound, boundListener{l: l, local: local, given: given[i]})
		}
	}
	conn, err := cf.dial(ctx, url)
	if err != nil {
		return dialFailed(err, cf.dialSignal(ctx, err, caught))
	}
	defer conn.Close()
	if conn.Initialized().TCPConnections == nil {
		return &exitError{code: 255, err: fmt.Errorf("%s does not offer TCP forwarding (no tcpConnections in its capabilities)", url)}
	}
	if cf.via != "" {
		fmt.Fprintf(os.Stderr, "sidecar: connected through %q\n", cf.via)
	} else if tr := conn.Transport(); tr != "" {
		fmt.Fprintf(os.Stderr, "sidecar: connected to %s over %s\n", url, tr)
	}
	done := make(chan struct{})
	fw := &forwarder{conn: conn, active: map[*net.TCPConn]struct{}{}, done: done}
	for _, b := range bound {
		fw.wg.Add(1)
		if f := b.local; f != nil {
			fmt.Fprintf(os.Stderr, "sidecar: forwarding %s -> %s\n", b.l.Addr(), net.JoinHostPort(f.host, strconv.Itoa(f.hostPort)))
			go fw.acceptLocal(b.l, *f)
		} else {
			fmt.Fprintf(os.Stderr, "sidecar: SOCKS5 proxy on %s\n", b.l.Addr())
			go fw.serveSOCKS(b.l)
		}
	}
	return fw.runUntil(ctx, done, closeListeners)
}

// runUntil forwards until ctx ends (a signal: exit 0) or the connection
// to the host does (exit 255, its reason printed first), then shuts down:
// done is closed (accept loops waiting after a failure end), the
// listeners closed, every local connection still open reset and counted
// on a line after the reason, the connection closed, and the handlers
// given forwardDrain to end.
func (fw *forwarder) runUntil(ctx context.Context, done chan<- struct{}, closeListeners func()) error {
	var result error
	select {
	case <-ctx.Done():
	case <-fw.conn.Done():
		// Here, not through main: before the count of connections reset.
		// The host's words (a close reason) are escaped as every peer's
		// text is (printable).
		fmt.Fprintf(fw.log(), "sidecar: %s\n", printable(fmt.Sprint(fw.conn.Err())))
		result = &exitError{code: 255}
	}
	close(done) // an accept loop waiting after a failure ends now
	closeListeners()
	if n := fw.closeActive(); n > 0 {
		fmt.Fprintf(fw.log(), "sidecar: reset %d forwarded connection(s) still open\n", n)
	}
	// Ending the connection ends every channel at once (the host resets
	// their sockets), also those whose handlers wait on the host, not on
	// the local socket just closed (an upload into a destination that
	// does not read).
	_ = fw.conn.Close()
	drained := make(chan struct{})
	go func() {
		fw.wg.Wait()
		close(drained)
	}()
	t := time.NewTimer(forwardDrain)
	defer t.Stop()
	select {
	case <-drained:
	case <-t.C:
	}
	return result
}

// listenFailed is how forward ends when the local port of flag given (as
// typed: "-L localhost:8080") cannot be bound: 128+n when signal n cut a
// bind name's lookup short; a usage error (2) when one of our own
// listeners already bound holds the address (two -L/-D whose names and
// addresses resolve to the same one, which sameLocalPort cannot see);
// else 255 with the reason.
func listenFailed(err error, sig syscall.Signal, bound []boundListener, given string) error {
	if sig != 0 {
		return interrupted(sig, "listening")
	}
	if b := clashingListener(bound, err); b != nil {
		return &exitError{code: 2, err: fmt.Errorf("%s and %s listen on the same port", b.given, given)}
	}
	return &exitError{code: 255, err: err}
}

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

func (fw *forwarder) track(c *net.TCPConn, add bool) {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	if add {
		fw.active[c] = struct{}{}
	} else {
		delete(fw.active, c)
	}
}

// closeActive resets every local connection still open (Ctrl-C, or the
// host connection ended): an RST, not a FIN, so that a local reader cannot
// take a transfer cut short for a complete one; their channels are reset
// too. It returns how many there were.
func (fw *forwarder) closeActive() int {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	for c := range fw.active {
		resetTCP(c)
	}
	return len(fw.active)
}

func (fw *forwarder) acceptLocal(l net.Listener, f localForward) {
	defer fw.wg.Done()
	dest := net.JoinHostPort(f.host, strconv.Itoa(f.hostPort))
	rl := fw.retrying(l)
	for {
		c, err := rl.Accept()
		if err != nil {
			return // closed: forward is shutting down
		}
		local := c.(*net.TCPConn)
		fw.track(local, true)
		fw.wg.Add(1)
		go func() {
			defer fw.wg.Done()
			wasReset := true
			defer func() { fw.release(local, wasReset) }()
			ctx, cancel := context.WithTimeout(context.Background(), forwardOpenTimeout)
			remote, err := fw.conn.DialTCP(ctx, f.host, f.hostPort)
			cancel()
			if err != nil {
				if !fw.ending() { // else it failed because forward is ending
					fmt.Fprintf(fw.log(), "sidecar: %s -> %s: open failed: %s\n", l.Addr(), printable(dest), openMessage(err))
				}
				// A reset: a client that only reads must not take the
				// end for an empty answer.
				resetTCP(local)
				return
			}
			wasReset = pipe(local, remote)
		}()
	}
}

// openMessage is what a person reads when a channel cannot open, escaped
// (printable): the host's message may repeat the destination a SOCKS
// client named, control characters included.
func openMessage(err error) string {
	var re *rpc.Error
	if errors.As(err, &re) {
		return printable(re.Message)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Sprintf("the host did not answer within %s", forwardOpenTimeout)
	}
	return printable(err.Error())
}

// pipe copies both ways until both directions ended. EOF becomes a
// half-close on the other side; a reset on either side resets the other,
// as does a channel that fails. It reports whether local was reset.
func pipe(local *net.TCPConn, remote *client.TCPConn) (wasReset bool) {
	if client.TCPBacklog(local) >= 0 {
		remote.SetBacklog(func() int { return client.TCPBacklog(local) })
	}
	var once sync.Once
	abort := func(resetRemote bool) {
		once.Do(func() {
			wasReset = true // read after <-done below
			if resetRemote {
				remote.Reset()
			}
			resetTCP(local)
		})
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, err := io.Copy(remote, local)
		switch {
		case err == nil:
			_ = remote.CloseWrite()
		case errors.Is(err, client.ErrTCPReset):
			abort(false)
		default: // the local side reset, or the channel failed
			abort(true)
		}
	}()
	_, err := remote.WriteTo(local)
	switch {
	case err == nil:
		_ = local.CloseWrite()
	case errors.Is(err, client.ErrTCPReset):
		abort(false)
	default:
		abort(true)
	}
	<-done
	_ = remote.Close()
	_ = local.Close()
	return wasReset
}

// serveSOCKS runs a SOCKS5 server on l whose CONNECTs are TCP channels.
func (fw *forwarder) serveSOCKS(l net.Listener) {
	defer fw.wg.Done()
	ln := &trackingListener{Listener: fw.retrying(l), fw: fw}
	for {
		c, err := ln.accept()
		if err != nil {
			return // closed: forward is shutting down
		}
		go fw.serveSOCKSConn(c, l.Addr())
	}
}

// socksGreetingTimeout bounds a SOCKS client's handshake, from its first
// byte to its request (a client that stalls in it is closed), unless
// forwarder.socksTimeout says otherwise (tests).
const socksGreetingTimeout = 30 * time.Second

// serveSOCKSConn hands a SOCKS5 client to go-socks5, which closes any
// other without a word: a SOCKS4 client gets SOCKS4's "request rejected
// or failed" (VN 0, CD 91) and anything else is closed, each with a line
// saying why (an HTTP proxy client is told so).
func (fw *forwarder) serveSOCKSConn(c *socksLocal, addr net.Addr) {
	timeout := socksGreetingTimeout
	if fw.socksTimeout > 0 {
		timeout = fw.socksTimeout
	}
	var first [1]byte
	_ = c.SetReadDeadline(time.Now().Add(timeout))
	if _, err := io.ReadFull(c, first[:]); err != nil {
		_ = c.Close()
		return
	}
	switch first[0] {
	case 5:
		srv, err := fw.newSOCKS(addr, c)
		if err != nil { // go-socks5 fails only without a config
			fmt.Fprintf(fw.log(), "sidecar: SOCKS5 %s: %v\n", addr, err)
			_ = c.Close()
			return
		}
		// The deadline stays over the whole handshake: replayConn lifts it
		// with the reply to the request (go-socks5 has no timeouts).
		rc := &replayConn{Conn: c, r: io.MultiReader(bytes.NewReader(first[:]), c)}
		err = srv.ServeConn(rc)
		if msg := rc.problem(err, timeout); msg != "" {
			fmt.Fprintf(fw.log(), "sidecar: SOCKS5 %s: %s\n", addr, msg)
		}
		return
	case 4:
		_, _ = c.Write([]byte{0, 91, 0, 0, 0, 0, 0, 0})
		fmt.Fprintf(fw.log(), "sidecar: SOCKS5 %s: refused a SOCKS4 client (%s): only SOCKS5 is served (e.g. curl --socks5-hostname)\n", addr, c.RemoteAddr())
	case 'G', 'P', 'C': // GET, POST, PUT, CONNECT: a client that took -D for an HTTP proxy
		fmt.Fprintf(fw.log(), "sidecar: SOCKS5 %s: client %s sent what looks like an HTTP proxy request; -D speaks SOCKS5 (curl --socks5-hostname): closed\n", addr, c.RemoteAddr())
	default:
		fmt.Fprintf(fw.log(), "sidecar: SOCKS5 %s: %s is not a SOCKS client (first byte 0x%02x): closed\n", addr, c.RemoteAddr(), first[0])
	}
	// End gracefully: a close with the rest of the request unread would be
	// an RST, which may cost the client the reply.
	_ = c.CloseWrite()
	_ = c.SetReadDeadline(time.Now().Add(time.Second))
	_, _ = io.Copy(io.Discard, io.LimitReader(c, 64<<10))
	_ = c.Close()
}

// socksHeadBytes bounds what replayConn keeps of a handshake for messages:
// the greeting (at most 2+255 bytes) and the request's first 4 bytes
// (version, command, reserved, address type).
const socksHeadBytes = 2 + 255 + 4

// replayConn is a connection whose first bytes were already read: Read
// returns them first. Its second Write (go-socks5's reply to the request,
// after the method selection) lifts the read deadline that bounded the
// handshake. CloseWrite (go-socks5 half-closes with it) goes to the
// connection underneath. It keeps what the client sent and what it was
// answered during the handshake, for problem.
type replayConn struct {
	net.Conn
	r io.Reader
	// Written by go-socks5's goroutine until the reply (writes == 2);
	// after it, the proxying goroutines only read writes.
	writes int
	method byte   // the method selected (the first Write): 0xff for none
	reply  byte   // the reply to the request (the second Write): 0 success
	head   []byte // the first socksHeadBytes bytes read, until the reply
}

func (c *replayConn) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if c.writes < 2 && len(c.head) < socksHeadBytes {
		c.head = append(c.head, p[:min(n, socksHeadBytes-len(c.head))]...)
	}
	return n, err
}

func (c *replayConn) Write(p []byte) (int, error) {
	if c.writes < 2 {
		c.writes++
		if len(p) >= 2 {
			if c.writes == 1 {
				c.method = p[1]
			} else {
				c.reply = p[1]
			}
		}
		if c.writes == 2 {
			_ = c.Conn.SetReadDeadline(time.Time{})
		}
	}
	return c.Conn.Write(p)
}

func (c *replayConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Conn.Close()
}

// SOCKS5 methods (RFC 1928 section 3), for messages.
const (
	socksNoAuth   byte = 0
	socksNoMethod byte = 0xff // no acceptable methods
)

// Replies that tell the client what it asked for is not served.
const (
	socksCommandNotSupported  byte = 7
	socksAddrTypeNotSupported byte = 8
)

// problem words for a line what went wrong in a handshake that go-socks5's
// ServeConn ended with err (go-socks5's own words are capitalised and
// name its internals), or "" when there is nothing to say: a connection
// that was proxied (its end is the end of the transfer; failures reset
// both sides, see socksTarget), an open failure that Allow has already
// reported, a client gone.
func (c *replayConn) problem(err error, timeout time.Duration) string {
	client := c.RemoteAddr()
	// The handshake as read: the greeting (5, n, n methods), then the
	// request (5, command, 0, address type, ...).
	var methods, req []byte
	if len(c.head) >= 2 && len(c.head) >= 2+int(c.head[1]) {
		methods = c.head[2 : 2+int(c.head[1])]
		req = c.head[2+int(c.head[1]):]
	}
	switch {
	case c.writes >= 1 && c.method == socksNoMethod:
		return fmt.Sprintf("client %s offered no method we accept (it offered %s; we take only no-authentication)", client, socksMethodNames(methods))
	case c.writes >= 2 && c.reply == socksCommandNotSupported && len(req) >= 2:
		return fmt.Sprintf("client %s asked for %s; -D serves only CONNECT: answered \"command not supported\"", client, socksCommandName(req[1]))
	case c.writes >= 2 && c.reply == socksAddrTypeNotSupported && len(req) >= 4:
		return fmt.Sprintf("client %s gave a destination of unknown address type %d (SOCKS5 has 1 IPv4, 3 domain name, 4 IPv6): answered \"address type not supported\"", client, req[3])
	case c.writes >= 2:
		return "" // proxied, or refused with a reply Allow has explained
	case err == nil:
		return ""
	case errors.Is(err, os.ErrDeadlineExceeded) || strings.Contains(err.Error(), "i/o timeout"):
		return fmt.Sprintf("client %s did not finish the handshake within %s: closed", client, timeout)
	case len(req) >= 3 && req[0] != 5: // go-socks5 reads 3 bytes, then checks
		return fmt.Sprintf("client %s sent a request of version %d after a SOCKS5 greeting, not 5: closed", client, req[0])
	}
	msg := err.Error()
	for _, gone := range []string{"EOF", "use of closed network connection", "connection reset", "broken pipe"} {
		if strings.Contains(msg, gone) {
			return "" // the client went away, or forward is shutting down
		}
	}
	// Anything else: the cause, without go-socks5's "Failed to ...: "
	// prefixes.
	for {
		_, rest, ok := strings.Cut(msg, ": ")
		if !ok || !strings.HasPrefix(msg, "Failed to ") {
			break
		}
		msg = rest
	}
	return fmt.Sprintf("client %s: SOCKS5 handshake failed: %s", client, printable(msg))
}

// socksMethodNames lists SOCKS5 authentication methods for a message.
func socksMethodNames(methods []byte) string {
	if len(methods) == 0 {
		return "none"
	}
	names := make([]string, len(methods))
	for i, m := range methods {
		switch m {
		case socksNoAuth:
			names[i] = "no-authentication"
		case 1:
			names[i] = "GSSAPI"
		case 2:
			names[i] = "username/password"
		default:
			names[i] = fmt.Sprintf("method %d", m)
		}
	}
	return strings.Join(names, ", ")
}

// socksCommandName names a SOCKS5 command for a message.
func socksCommandName(cmd byte) string {
	switch cmd {
	case socks5.BindCommand:
		return "BIND"
	case socks5.AssociateCommand:
		return "UDP ASSOCIATE"
	}
	return fmt.Sprintf("command %d, which SOCKS5 does not have", cmd)
}

// newSOCKS returns the SOCKS5 server of one client connection local
// accepted by a -D listening on addr.
//
// go-socks5 answers a failed Dial with a reply code chosen from the error
// text (3, 4 or 5 only), and 2 "connection not allowed by ruleset" only
// when its RuleSet refuses. So the channel is opened in the RuleSet
// (socksOpener.Allow), which refuses what the host's policy refused, and
// Dial hands over what it opened (as a socksTarget), or fails with the
// text that makes go-socks5 send socksReply's code.
func (fw *forwarder) newSOCKS(addr net.Addr, local *socksLocal) (*socks5.Server, error) {
	return socks5.New(&socks5.Config{
		Resolver: remoteResolver{},
		Rules:    &socksOpener{fw: fw, addr: addr, local: local},
		Logger:   log.New(io.Discard, "", 0),
		Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
			o, ok := ctx.Value(socksOpenedKey{}).(*socksOpened)
			if !ok { // not through socksOpener.Allow: cannot happen
				return nil, errors.New("general failure")
			}
			if o.err != nil {
				return nil, o.err
			}
			return o.conn, nil
		},
	})
}

// socksOpener is the RuleSet of the SOCKS5 server: it opens the channel of
// a CONNECT, refuses it (reply 2) if the host's policy refused it, and
// leaves the result in the context for Dial.
type socksOpener struct {
	fw    *forwarder
	addr  net.Addr    // the proxy's address, for messages
	local *socksLocal // the client's connection
}

type socksOpenedKey struct{}

// socksOpened is what socksOpener.Allow leaves for Dial: the channel, or
// the error that gives the SOCKS5 reply.
type socksOpened struct {
	conn net.Conn
	err  error
}

func (o *socksOpener) Allow(ctx context.Context, req *socks5.Request) (context.Context, bool) {
	if req.Command != socks5.ConnectCommand {
		return ctx, true // go-socks5 answers 7 "command not supported"
	}
	host := req.DestAddr.FQDN // names are resolved on the host
	if host == "" && req.DestAddr.IP != nil {
		host = req.DestAddr.IP.String()
	}
	// The name is the SOCKS client's, any bytes at all (an escape
	// sequence, NUL): every line below writes it escaped (%q, printable).
	if host == "" || req.DestAddr.Port == 0 {
		fmt.Fprintf(o.fw.log(), "sidecar: SOCKS5 %s: a CONNECT from %s to %q port %d: no destination\n", o.addr, req.RemoteAddr, host, req.DestAddr.Port)
		return context.WithValue(ctx, socksOpenedKey{}, &socksOpened{err: socksDialError(socksHostUnreachable)}), true
	}
	dest := net.JoinHostPort(host, strconv.Itoa(req.DestAddr.Port))
	octx, cancel := context.WithTimeout(ctx, forwardOpenTimeout)
	remote, err := o.fw.conn.DialTCP(octx, host, req.DestAddr.Port)
	cancel()
	if err != nil {
		if o.fw.ending() {
			// Failed because forward is ending: no line, and a reset
			// like every other connection still open.
			o.local.reset()
			return ctx, false
		}
		reply := socksReply(err)
		fmt.Fprintf(o.fw.log(), "sidecar: SOCKS5 %s -> %s: open failed: %s\n", o.addr, printable(dest), openMessage(err))
		if reply == socksNotAllowed {
			return ctx, false
		}
		return context.WithValue(ctx, socksOpenedKey{}, &socksOpened{err: socksDialError(reply)}), true
	}
	return context.WithValue(ctx, socksOpenedKey{}, &socksOpened{conn: &socksTarget{TCPConn: remote, local: o.local}}), true
}

// socksTarget is the channel of a CONNECT that succeeded, as go-socks5
// proxies it. go-socks5 ends each direction with a half-close whatever
// ended it, so a destination's reset (or a channel lost with the
// connection) would reach the SOCKS client as the FIN of a complete
// transfer, and a client's reset the destination as one. So, as pipe
// does, a direction that ends in an error resets both sides here first:
// the client's socket with an RST, the channel with tcp/reset unless the
// host reset it.
type socksTarget struct {
	*client.TCPConn
	local *socksLocal
	once  sync.Once
}

func (t *socksTarget) fail(err error) {
	if err == nil {
		return
	}
	t.once.Do(func() {
		if !errors.Is(err, client.ErrTCPReset) {
			t.TCPConn.Reset()
		}
		t.local.reset()
	})
}

func (t *socksTarget) Read(p []byte) (int, error) {
	n, err := t.TCPConn.Read(p)
	if err != io.EOF {
		t.fail(err)
	}
	return n, err
}

func (t *socksTarget) Write(p []byte) (int, error) {
	n, err := t.TCPConn.Write(p)
	t.fail(err)
	return n, err
}

// WriteTo is the channel to client direction (io.Copy uses it).
func (t *socksTarget) WriteTo(w io.Writer) (int64, error) {
	n, err := t.TCPConn.WriteTo(w)
	t.fail(err)
	return n, err
}

// ReadFrom is the client to channel direction (io.Copy uses it).
func (t *socksTarget) ReadFrom(r io.Reader) (int64, error) {
	n, err := t.TCPConn.ReadFrom(r)
	t.fail(err)
	return n, err
}

// SOCKS5 reply codes (RFC 1928 section 6) for a CONNECT that failed.
const (
	socksGeneralFailure  byte = 1
	socksNotAllowed      byte = 2 // connection not allowed by ruleset
	socksNetUnreachable  byte = 3
	socksHostUnreachable byte = 4
	socksRefused         byte = 5
	socksTTLExpired      byte = 6 // also the usual reply for a timeout
)

// socksReply is the SOCKS5 reply for a DialTCP error. The host says why in
// the code (PermissionDenied: tcp.allow or a connection limit) and, for
// TcpConnectionOpenFailed, only in the message, which adapters/tcp's
// OpenError words; a destination host never contains a space, so the
// phrases matched below cannot come from the name itself.
func socksReply(err error) byte {
	var re *rpc.Error
	if !errors.As(err, &re) {
		return socksGeneralFailure // the client side failed (deadline, connection lost)
	}
	switch re.Code {
	case rpc.CodePermissionDenied:
		return socksNotAllowed
	case rpc.CodeTCPConnectionOpenFailed:
	default:
		return socksGeneralFailure // Overloaded, InvalidParams, ...
	}
	switch msg := re.Message; {
	case strings.HasSuffix(msg, " refused"):
		return socksRefused
	case strings.Contains(msg, " timed out"):
		return socksTTLExpired
	case strings.Contains(msg, "network is unreachable"):
		return socksNetUnreachable
	}
	return socksHostUnreachable // no route to host, no such host, other failures
}

// socksDialError is the Dial error that makes go-socks5 send reply (it
// matches "refused" and "network is unreachable" in the text, and sends 4
// for anything else). go-socks5 cannot send 1 or 6 for a failed Dial: they
// become 4, host unreachable.
func socksDialError(reply byte) error {
	switch reply {
	case socksRefused:
		return errors.New("connection refused")
	case socksNetUnreachable:
		return errors.New("network is unreachable")
	}
	return errors.New("host unreachable")
}

// remoteResolver leaves names unresolved: the host resolves them (as
// ssh -D does), under its own policy.
type remoteResolver struct{}

func (remoteResolver) Resolve(ctx context.Context, _ string) (context.Context, net.IP, error) {
	return ctx, nil, nil
}

// trackingListener registers accepted SOCKS connections so that Ctrl-C
// closes them, and counts them in fw.wg until go-socks5 closes them (the
// last thing its ServeConn does, after closing the channel), so that the
// drain waits for their channels as it does for -L's.
type trackingListener struct {
	net.Listener
	fw *forwarder
}

func (t *trackingListener) accept() (*socksLocal, error) {
	c, err := t.Listener.Accept()
	if err != nil {
		return nil, err
	}
	tc := c.(*net.TCPConn)
	t.fw.track(tc, true)
	t.fw.wg.Add(1) // serveSOCKS's own count is held: never Add from zero during Wait
	return &socksLocal{TCPConn: tc, fw: t.fw}, nil
}

// socksLocal is a SOCKS client's connection: its first Close releases it
// (fw.release) and ends its count in fw.wg.
type socksLocal struct {
	*net.TCPConn
	fw       *forwarder
	once     sync.Once
	wasReset atomic.Bool
}

// reset closes the connection with an RST.
func (u *socksLocal) reset() {
	u.wasReset.Store(true)
	_ = u.SetLinger(0)
	_ = u.Close()
}

func (u *socksLocal) Close() error {
	err := u.TCPConn.Close()
	u.once.Do(func() {
		u.fw.release(u.TCPConn, u.wasReset.Load())
		u.fw.wg.Done()
	})
	return err
}

// A failed Accept (EMFILE: out of file descriptors, ECONNABORTED, ...) is
// retried, as net/http's Server.Serve does, after a wait of acceptRetryMin
// that doubles with each failure in a row up to acceptRetryMax; the next
// successful Accept starts again from acceptRetryMin. The connections that
// arrive meanwhile wait in the kernel's backlog.
const (
	acceptRetryMin = 5 * time.Millisecond
	acceptRetryMax = time.Second
	// acceptLogEvery: a failure that repeats is logged at most this often
	// (near the descriptor limit Accept fails and succeeds in turns, and
	// each success starts the backoff again at acceptRetryMin); a
	// different one is logged at once.
	acceptLogEvery = time.Second
)

// retrying returns l with an Accept that retries failures (see
// acceptRetryMin), for -L and -D alike.
func (fw *forwarder) retrying(l net.Listener) *retryListener {
	r := &retryListener{Listener: l, done: fw.done, log: fw.stderr, min: fw.retryMin, max: fw.retryMax, now: time.Now}
	if r.log == nil {
		r.log = os.Stderr
	}
	if r.min <= 0 {
		r.min = acceptRetryMin
	}
	if r.max <= 0 {
		r.max = acceptRetryMax
	}
	return r
}

// retryListener is a net.Listener whose Accept returns only a connection
// or the end: the listener closed (net.ErrClosed) or done closed. Any
// other failure is logged ("sidecar: accept on ADDR: ERR", rate-limited)
// and retried after a backoff (acceptRetryMin to acceptRetryMax) that
// done cuts short. One goroutine calls Accept.
type retryListener struct {
	net.Listener
	done     <-chan struct{} // closed at shutdown; nil: never
	log      io.Writer
	min, max time.Duration
	now      func() time.Time

	// The log's rate limit: the last line written, when, and how many
	// failures went unlogged since.
	lastMsg  string
	lastLog  time.Time
	unlogged int
}

func (r *retryListener) Accept() (net.Conn, error) {
	var delay time.Duration
	for {
		c, err := r.Listener.Accept()
		if err == nil && r.lastMsg != "" {
			fmt.Fprintf(r.log, "sidecar: accepting on %s again\n", r.Addr())
			r.lastMsg, r.unlogged = "", 0
		}
		if err == nil || errors.Is(err, net.ErrClosed) {
			return c, err
		}
		r.logFailure(err)
		delay = min(max(2*delay, r.min), r.max)
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-r.done:
			t.Stop()
			return nil, fmt.Errorf("accept on %s: %w", r.Addr(), net.ErrClosed)
		}
	}
}

// logFailure writes "sidecar: accept on ADDR: ERR (retrying)" for the
// first failure, for one different from the last line's, and for a
// repeated one at most every acceptLogEvery, saying how many went
// unlogged in between.
func (r *retryListener) logFailure(err error) {
	msg := unwrapSyscall(err).Error() // "too many open files", not the whole OpError
	now := r.now()
	if msg == r.lastMsg && now.Sub(r.lastLog) < acceptLogEvery {
		r.unlogged++
		return
	}
	more := ""
	if r.unlogged > 0 {
		more = fmt.Sprintf("; %d more since the last line", r.unlogged)
	}
	fmt.Fprintf(r.log, "sidecar: accept on %s: %s (retrying%s)\n", r.Addr(), msg, more)
	r.lastMsg, r.lastLog, r.unlogged = msg, now, 0
}
