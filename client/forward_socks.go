package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	socks5 "github.com/armon/go-socks5"

	"github.com/sidecar-dev/sidecar/rpc"
)

// ServeSOCKS runs a SOCKS5 proxy on l (ssh -D): CONNECT with no
// authentication, each CONNECT one channel the host dials (names are
// resolved by the host, under its policy). A destination the host's
// policy refuses is answered 2 (connection not allowed by ruleset), a
// refused one 5, other open failures 3 or 4; BIND and UDP ASSOCIATE get 7
// (command not supported). A SOCKS4 client gets SOCKS4's rejection, and
// anything else is closed; each with a line in the Log. It starts l's
// accept loop and returns at once; l must yield *net.TCPConn connections.
// The Forwarder owns l from now on: Close closes it. After Close,
// ServeSOCKS closes l and returns net.ErrClosed.
func (fw *Forwarder) ServeSOCKS(l net.Listener) error {
	if !fw.add(l) {
		return net.ErrClosed
	}
	go fw.serveSOCKS(l)
	return nil
}

// serveSOCKS is ServeSOCKS's accept loop.
func (fw *Forwarder) serveSOCKS(l net.Listener) {
	defer fw.wg.Done()
	ln := &trackingListener{Listener: fw.retrying(l), fw: fw}
	for {
		c, err := ln.accept()
		if err != nil {
			return // closed: the forwarder is closing
		}
		go fw.serveSOCKSConn(c, l.Addr())
	}
}

// DefaultSOCKSHandshakeTimeout is ForwarderOptions.SOCKSHandshakeTimeout's
// default: it bounds a SOCKS client's handshake, from its first byte to
// its request (a client that stalls in it is closed).
const DefaultSOCKSHandshakeTimeout = 30 * time.Second

// serveSOCKSConn hands a SOCKS5 client to go-socks5, which closes any
// other without a word: a SOCKS4 client gets SOCKS4's "request rejected
// or failed" (VN 0, CD 91) and anything else is closed, each with a line
// saying why (an HTTP proxy client is told so).
func (fw *Forwarder) serveSOCKSConn(c *socksLocal, addr net.Addr) {
	timeout := fw.opts.SOCKSHandshakeTimeout
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
			fw.log("SOCKS5 %s: %v", addr, err)
			_ = c.Close()
			return
		}
		// The deadline stays over the whole handshake: replayConn lifts it
		// with the reply to the request (go-socks5 has no timeouts).
		rc := &replayConn{Conn: c, r: io.MultiReader(bytes.NewReader(first[:]), c)}
		err = srv.ServeConn(rc)
		if msg := rc.problem(err, timeout); msg != "" {
			fw.log("SOCKS5 %s: %s", addr, msg)
		}
		return
	case 4:
		_, _ = c.Write([]byte{0, 91, 0, 0, 0, 0, 0, 0})
		fw.log("SOCKS5 %s: refused a SOCKS4 client (%s): only SOCKS5 is served (e.g. curl --socks5-hostname)", addr, c.RemoteAddr())
	case 'G', 'P', 'C': // GET, POST, PUT, CONNECT: a client that took -D for an HTTP proxy
		fw.log("SOCKS5 %s: client %s sent what looks like an HTTP proxy request; -D speaks SOCKS5 (curl --socks5-hostname): closed", addr, c.RemoteAddr())
	default:
		fw.log("SOCKS5 %s: %s is not a SOCKS client (first byte 0x%02x): closed", addr, c.RemoteAddr(), first[0])
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
			return "" // the client went away, or the forwarder is closing
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
func (fw *Forwarder) newSOCKS(addr net.Addr, local *socksLocal) (*socks5.Server, error) {
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
	fw    *Forwarder
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
		o.fw.log("SOCKS5 %s: a CONNECT from %s to %q port %d: no destination", o.addr, req.RemoteAddr, host, req.DestAddr.Port)
		return context.WithValue(ctx, socksOpenedKey{}, &socksOpened{err: socksDialError(socksHostUnreachable)}), true
	}
	dest := net.JoinHostPort(host, strconv.Itoa(req.DestAddr.Port))
	remote, err := o.fw.dialTCP(ctx, host, req.DestAddr.Port, false)
	if err != nil {
		if o.fw.ending() {
			// Failed because the forwarder is closing: no line, and a reset
			// like every other connection still open.
			o.local.reset()
			return ctx, false
		}
		reply := socksReply(err)
		o.fw.log("SOCKS5 %s -> %s: open failed: %s", o.addr, printable(dest), o.fw.openMessage(err))
		if reply == socksNotAllowed {
			return ctx, false
		}
		return context.WithValue(ctx, socksOpenedKey{}, &socksOpened{err: socksDialError(reply)}), true
	}
	return context.WithValue(ctx, socksOpenedKey{}, &socksOpened{conn: &socksTarget{TCPConn: remote, local: o.local, fw: o.fw}}), true
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
	*TCPConn
	local *socksLocal
	fw    *Forwarder
	once  sync.Once
}

func (t *socksTarget) fail(err error) {
	if err == nil {
		return
	}
	t.once.Do(func() {
		if !errors.Is(err, ErrTCPReset) {
			t.TCPConn.Reset()
		}
		t.local.reset()
	})
}

// Close closes the channel (go-socks5 does when the proxying has ended)
// and stops the Forwarder tracking it.
func (t *socksTarget) Close() error {
	err := t.TCPConn.Close()
	t.fw.untrackChannel(t.TCPConn)
	return err
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

// trackingListener registers accepted SOCKS connections so that Close
// resets them, and counts them in fw.wg until go-socks5 closes them (the
// last thing its ServeConn does, after closing the channel), so that the
// drain waits for their channels as it does for -L's.
type trackingListener struct {
	net.Listener
	fw *Forwarder
}

func (t *trackingListener) accept() (*socksLocal, error) {
	c, err := t.Listener.Accept()
	for err == nil {
		if _, ok := c.(*net.TCPConn); ok {
			break
		}
		t.fw.log("SOCKS5 %s: accepted a %T, not a TCP connection: closed", t.Addr(), c)
		_ = c.Close()
		c, err = t.Listener.Accept()
	}
	if err != nil {
		return nil, err
	}
	tc := c.(*net.TCPConn)
	armReset(tc)
	t.fw.track(tc, true)
	t.fw.wg.Add(1) // serveSOCKS's own count is held: never Add from zero during Wait
	return &socksLocal{TCPConn: tc, fw: t.fw}, nil
}

// socksLocal is a SOCKS client's connection: its first Close releases it
// (fw.release) and ends its count in fw.wg.
type socksLocal struct {
	*net.TCPConn
	fw       *Forwarder
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
	if !u.wasReset.Load() {
		disarmReset(u.TCPConn)
	}
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
