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
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
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
short never looks complete) and exits 0; before it has connected, 130.`,
		Example: `  sidecar forward wss://127.0.0.1:4433/ahp -L 8080:127.0.0.1:3000 -L 127.0.0.1:5433:db:5432
  sidecar forward wss://127.0.0.1:4433/ahp -D 1080`,
		Args: cobra.ExactArgs(1),
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
		return localForward{}, err
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
		return "", "", err
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
			return nil, fmt.Errorf("bad forwarding %q: unbalanced brackets", spec)
		}
	}
	if depth != 0 {
		return nil, fmt.Errorf("bad forwarding %q: unbalanced brackets", spec)
	}
	return append(parts, cur.String()), nil
}

func parsePort(s string, zeroOK bool) (int, error) {
	p, err := strconv.Atoi(s)
	if err != nil || p < 0 || p > 65535 || (p == 0 && !zeroOK) {
		return 0, fmt.Errorf("%q is not a port", s)
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

// forwardGCPercent is the GOGC a forward runs with unless $GOGC is set.
// Its heap is pooled buffers and the windows' data in flight, and it
// allocates little per byte moved (about 25 MB over 3 GiB of bulk
// transfer), so collecting after 25% of growth rather than Go's 100% costs
// no throughput, while it lowers the smallest heap Go lets grow before it
// collects from 4 MB to 1 MB: the floor that most of a forward's memory
// for a handful of stalled connections was (16 stalled downloads, client
// and host RSS together: 0.58-0.67 -> 0.46-0.49 MiB each; bench/README.md).
const forwardGCPercent = 25

// setForwardGC applies forwardGCPercent unless the environment sets GOGC.
func setForwardGC() {
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(forwardGCPercent)
	}
}

func forward(cf *connFlags, url string, locals, dynamics []string) error {
	if len(locals) == 0 && len(dynamics) == 0 {
		return &exitError{code: 2, err: errors.New("nothing to forward: give -L [bind:]port:host:hostport or -D [bind:]port")}
	}
	if cf.ordinary {
		return &exitError{code: 2, err: errors.New("--ordinary cannot forward: TCP channels need windowed delivery")}
	}
	setForwardGC()
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
			return listenFailed(err, caught())
		}
		for _, l := range ls {
			bound = append(bound, boundListener{l: l, local: local})
		}
	}
	conn, err := cf.dial(ctx, url)
	if err != nil {
		return dialFailed(err, caught())
	}
	defer conn.Close()
	if conn.Initialized().TCPConnections == nil {
		return &exitError{code: 255, err: fmt.Errorf("%s does not offer TCP forwarding (no tcpConnections in its capabilities)", url)}
	}
	if tr := conn.Transport(); tr != "" {
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
	var result error
	select {
	case <-ctx.Done():
	case <-conn.Done():
		result = &exitError{code: 255, err: conn.Err()}
	}
	close(done) // an accept loop waiting after a failure ends now
	closeListeners()
	if n := fw.closeActive(); n > 0 {
		fmt.Fprintf(os.Stderr, "sidecar: reset %d forwarded connection(s) still open\n", n)
	}
	// Ending the connection ends every channel at once (the host resets
	// their sockets), also those whose handlers wait on the host, not on
	// the local socket just closed (an upload into a destination that
	// does not read).
	_ = conn.Close()
	drained := make(chan struct{})
	go func() {
		fw.wg.Wait()
		close(drained)
	}()
	select {
	case <-drained:
	case <-time.After(forwardDrain):
	}
	return result
}

// listenFailed is how forward ends when a local port cannot be bound: 255
// with the reason, or 128+n when signal n cut a bind name's lookup short.
func listenFailed(err error, sig syscall.Signal) error {
	if sig != 0 {
		return interrupted(sig, "listening")
	}
	return &exitError{code: 255, err: err}
}

// boundListener is one listener of a -L (local set) or a -D (local nil),
// bound before the connection is dialled.
type boundListener struct {
	l     net.Listener
	local *localForward
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
	if _, err := netip.ParseAddr(host); err == nil { // a literal, zone included
		l, err := listen(ctx, listenNetwork(bind), bind)
		if err != nil {
			return nil, fmt.Errorf("cannot listen on %s: %v", bind, unwrapSyscall(err))
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
			return nil, fmt.Errorf("cannot listen on %s (%s): %v", addr, host, unwrapSyscall(err))
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
		_ = c.SetLinger(0)
		_ = c.Close()
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
			defer fw.track(local, false)
			ctx, cancel := context.WithTimeout(context.Background(), forwardOpenTimeout)
			remote, err := fw.conn.DialTCP(ctx, f.host, f.hostPort)
			cancel()
			if err != nil {
				fmt.Fprintf(os.Stderr, "sidecar: %s -> %s: open failed: %s\n", l.Addr(), dest, openMessage(err))
				_ = local.Close()
				return
			}
			pipe(local, remote)
		}()
	}
}

// openMessage is what a person reads when a channel cannot open.
func openMessage(err error) string {
	var re *rpc.Error
	if errors.As(err, &re) {
		return re.Message
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Sprintf("the host did not answer within %s", forwardOpenTimeout)
	}
	return err.Error()
}

// pipe copies both ways until both directions ended. EOF becomes a
// half-close on the other side; a reset on either side resets the other.
func pipe(local *net.TCPConn, remote *client.TCPConn) {
	if client.TCPBacklog(local) >= 0 {
		remote.SetBacklog(func() int { return client.TCPBacklog(local) })
	}
	var once sync.Once
	abort := func(resetRemote bool) {
		once.Do(func() {
			if resetRemote {
				remote.Reset()
			}
			_ = local.SetLinger(0)
			_ = local.Close()
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
}

// serveSOCKS runs a SOCKS5 server on l whose CONNECTs are TCP channels.
func (fw *forwarder) serveSOCKS(l net.Listener) {
	defer fw.wg.Done()
	srv, err := fw.newSOCKS(l.Addr())
	if err != nil {
		fmt.Fprintf(os.Stderr, "sidecar: SOCKS5 on %s: %v\n", l.Addr(), err)
		return
	}
	ln := &trackingListener{Listener: fw.retrying(l), fw: fw}
	for {
		c, err := ln.Accept()
		if err != nil {
			return // closed: forward is shutting down
		}
		go fw.serveSOCKSConn(srv, c, l.Addr())
	}
}

// socksGreetingTimeout bounds a SOCKS client's handshake, from its first
// byte to its request (a client that stalls in it is closed), unless
// forwarder.socksTimeout says otherwise (tests).
const socksGreetingTimeout = 30 * time.Second

// serveSOCKSConn hands a SOCKS5 client to go-socks5, which closes any
// other without a word: a SOCKS4 client gets SOCKS4's "request rejected
// or failed" (VN 0, CD 91) and anything else is closed, each with a line
// saying why.
func (fw *forwarder) serveSOCKSConn(srv *socks5.Server, c net.Conn, addr net.Addr) {
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
		// The deadline stays over the whole handshake: replayConn lifts it
		// with the reply to the request (go-socks5 has no timeouts).
		err := srv.ServeConn(&replayConn{Conn: c, r: io.MultiReader(bytes.NewReader(first[:]), c)})
		if msg := socksServeError(err, timeout); msg != "" {
			fmt.Fprintf(os.Stderr, "sidecar: SOCKS5 %s: %s: %s\n", addr, c.RemoteAddr(), msg)
		}
		return
	case 4:
		_, _ = c.Write([]byte{0, 91, 0, 0, 0, 0, 0, 0})
		fmt.Fprintf(os.Stderr, "sidecar: SOCKS5 %s: refused a SOCKS4 client (%s): only SOCKS5 is served (e.g. curl --socks5-hostname)\n", addr, c.RemoteAddr())
	default:
		fmt.Fprintf(os.Stderr, "sidecar: SOCKS5 %s: %s is not a SOCKS client (first byte 0x%02x): closed\n", addr, c.RemoteAddr(), first[0])
	}
	// End gracefully: a close with the rest of the request unread would be
	// an RST, which may cost the client the reply.
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
		_ = c.SetReadDeadline(time.Now().Add(time.Second))
		_, _ = io.Copy(io.Discard, io.LimitReader(c, 64<<10))
	}
	_ = c.Close()
}

// socksServeError words what go-socks5's ServeConn returned for a line,
// or "" when there is nothing to say: the end of a proxied connection, a
// client gone, or an open failure that Allow has already reported.
func socksServeError(err error, timeout time.Duration) string {
	if err == nil {
		return ""
	}
	msg := err.Error()
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded) || strings.Contains(msg, "i/o timeout"):
		return fmt.Sprintf("handshake not finished within %s: closed", timeout)
	case strings.Contains(msg, "Connect to"), strings.HasSuffix(msg, "EOF"),
		strings.Contains(msg, "use of closed network connection"), strings.Contains(msg, "connection reset"):
		return ""
	}
	return msg // a bad request, an unsupported command or address type
}

// replayConn is a connection whose first bytes were already read: Read
// returns them first. Its second Write (go-socks5's reply to the request,
// after the method selection) lifts the read deadline that bounded the
// handshake. CloseWrite (go-socks5 half-closes with it) goes to the
// connection underneath.
type replayConn struct {
	net.Conn
	r      io.Reader
	writes int // go-socks5 writes from one goroutine until the reply
}

func (c *replayConn) Read(p []byte) (int, error) { return c.r.Read(p) }

func (c *replayConn) Write(p []byte) (int, error) {
	if c.writes < 2 {
		if c.writes++; c.writes == 2 {
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

// newSOCKS returns the SOCKS5 server of a -D listening on addr.
//
// go-socks5 answers a failed Dial with a reply code chosen from the error
// text (3, 4 or 5 only), and 2 "connection not allowed by ruleset" only
// when its RuleSet refuses. So the channel is opened in the RuleSet
// (socksOpener.Allow), which refuses what the host's policy refused, and
// Dial hands over what it opened, or fails with the text that makes
// go-socks5 send socksReply's code.
func (fw *forwarder) newSOCKS(addr net.Addr) (*socks5.Server, error) {
	return socks5.New(&socks5.Config{
		Resolver: remoteResolver{},
		Rules:    &socksOpener{fw: fw, addr: addr},
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
	fw   *forwarder
	addr net.Addr // the proxy's address, for messages
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
	if host == "" || req.DestAddr.Port == 0 {
		fmt.Fprintf(os.Stderr, "sidecar: SOCKS5 %s: a CONNECT from %s to %q port %d: no destination\n", o.addr, req.RemoteAddr, host, req.DestAddr.Port)
		return context.WithValue(ctx, socksOpenedKey{}, &socksOpened{err: socksDialError(socksHostUnreachable)}), true
	}
	dest := net.JoinHostPort(host, strconv.Itoa(req.DestAddr.Port))
	octx, cancel := context.WithTimeout(ctx, forwardOpenTimeout)
	remote, err := o.fw.conn.DialTCP(octx, host, req.DestAddr.Port)
	cancel()
	if err != nil {
		reply := socksReply(err)
		fmt.Fprintf(os.Stderr, "sidecar: SOCKS5 %s -> %s: open failed: %s\n", o.addr, dest, openMessage(err))
		if reply == socksNotAllowed {
			return ctx, false
		}
		return context.WithValue(ctx, socksOpenedKey{}, &socksOpened{err: socksDialError(reply)}), true
	}
	return context.WithValue(ctx, socksOpenedKey{}, &socksOpened{conn: remote}), true
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

func (t *trackingListener) Accept() (net.Conn, error) {
	c, err := t.Listener.Accept()
	if err != nil {
		return nil, err
	}
	tc := c.(*net.TCPConn)
	t.fw.track(tc, true)
	t.fw.wg.Add(1) // serveSOCKS's own count is held: never Add from zero during Wait
	return &untrackOnClose{TCPConn: tc, fw: t.fw}, nil
}

type untrackOnClose struct {
	*net.TCPConn
	fw   *forwarder
	once sync.Once
}

func (u *untrackOnClose) Close() error {
	err := u.TCPConn.Close()
	u.once.Do(func() {
		u.fw.track(u.TCPConn, false)
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
