// Package client is the Go client of the sidecar: it dials a host, speaks
// the AHP control plane, and carries channels with the same windowed
// delivery engine as the host (seed 000), offering windows, crediting what
// its consumer has taken, and sending its own data within hostReceive.
//
// Dial (or NewConn over a transport of your own) gives a Conn; on it,
// OpenTerminal shows and drives a terminal, Subscribe reads any channel,
// DialTCP opens a TCP stream from the host's side, and a Forwarder serves
// local listeners through such streams as ssh -L and ssh -D do.
package client

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/sidecar-dev/sidecar/delivery"
	"github.com/sidecar-dev/sidecar/rpc"
	"github.com/sidecar-dev/sidecar/transport"
	"github.com/sidecar-dev/sidecar/transport/tlscert"
)

// ProtocolVersions are the AHP versions the client offers, preferred first.
var ProtocolVersions = []string{"0.5.0"}

// DefaultReceive is the window the client offers for data it receives:
// 256 KiB window, 16 KiB frames (UTF-16 bytes).
var DefaultReceive = delivery.Limits{WindowBytes: 256 << 10, MaximumFrameBytes: 16 << 10}

// DefaultTCPReceive is the window a TCP connection (DialTCP) starts with:
// 128 KiB, 16 KiB frames (UTF-16 bytes; about 48 KiB of stream bytes in
// flight). DefaultTCPReceiveMax is how far it may grow while the window is
// what limits a transfer (the host lowers it to its tcp block's maxima):
// 16 MiB, 512 KiB frames (the largest a host allows; 192 KiB of stream
// bytes a message, so a bulk transfer costs few messages).
var (
	DefaultTCPReceive    = delivery.Limits{WindowBytes: 128 << 10, MaximumFrameBytes: 16 << 10}
	DefaultTCPReceiveMax = delivery.Limits{WindowBytes: 16 << 20, MaximumFrameBytes: 512 << 10}
)

// withDefaults fills the zero limits of o.
func (o Options) withDefaults() Options {
	if o.Receive == (delivery.Limits{}) {
		o.Receive = DefaultReceive
	}
	if o.TCPReceive == (delivery.Limits{}) {
		o.TCPReceive = DefaultTCPReceive
	}
	if o.TCPReceiveMax == (delivery.Limits{}) {
		o.TCPReceiveMax = DefaultTCPReceiveMax
	}
	o.TCPReceiveMax.WindowBytes = max(o.TCPReceiveMax.WindowBytes, o.TCPReceive.WindowBytes)
	o.TCPReceiveMax.MaximumFrameBytes = max(o.TCPReceiveMax.MaximumFrameBytes, o.TCPReceive.MaximumFrameBytes)
	return o
}

// Options configure Dial.
type Options struct {
	// Token authenticates to the host (Authorization: Bearer).
	Token string
	// CertHash pins the host's certificate: the SHA-256 of its DER, hex.
	// When set, the certificate chain is not otherwise verified.
	CertHash string
	// ClientID identifies this client; "" means a random one.
	ClientID string
	// Receive is the windowed-delivery offer; zero means DefaultReceive.
	Receive delivery.Limits
	// TCPReceive is the first offer of each DialTCP connection, and
	// TCPReceiveMax the most its tuning offers; zero means
	// DefaultTCPReceive and DefaultTCPReceiveMax. Set both equal for a
	// fixed window.
	TCPReceive, TCPReceiveMax delivery.Limits
	// Ordinary turns windowed delivery off: subscriptions are ordinary.
	Ordinary bool
	// MaxMessageBytes bounds one received message in UTF-16 bytes, the unit
	// of every delivery size (as the host's delivery.max_message_bytes):
	// a message reassembled from channel/frame fragments, and one
	// WebSocket message (read with a limit of 3/2 as many UTF-8 bytes, the
	// most such a message takes). Default 16 MiB.
	MaxMessageBytes int
	// ClientName is sent as clientInfo.name.
	ClientName string
	// Transport picks the transport for https:// URLs: "auto" (default:
	// WebTransport, falling back to the transport-io WebSocket mapping when
	// the QUIC path fails, never retrying a WT_UNAUTHORIZED refusal),
	// "webtransport", "websocket", or "ahp" (plain AHP on /ahp).
	Transport string
	// Via, when set, is a command (run with sh -c) whose stdin and stdout
	// carry transport-io, e.g. "docker exec -i C sidecar stdio"; the URL is
	// then not dialled.
	Via string

	// viaEnded, set by Dial with Via, says how the command ended once it
	// has (nil while it runs): the reason a session that ends gives.
	viaEnded func() error
}

// Conn is one client connection. Its methods are safe for concurrent use.
type Conn struct {
	mc       transport.MessageConn
	sched    *delivery.Scheduler
	opts     Options
	clientID string
	init     rpc.InitializeResult

	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
	err    error
	errMu  sync.Mutex

	nextID    atomic.Uint64
	clientSeq atomic.Uint64

	mu      sync.Mutex
	pending map[uint64]chan response
	subs    map[string]*Subscription

	dials chan struct{} // bounds createTcpConnection calls in progress (DialTCP)
}

type response struct {
	result json.RawMessage
	err    *rpc.Error
}

// CheckURL parses rawURL and reports, in words a person can act on, what
// Dial would refuse before dialling: not a URL, a scheme other than
// https:// or wss:// (or their plain-text forms), a port outside
// 1-65535, a wss:// URL (plain AHP) with a transport (Options.Transport)
// that needs https://, or http:// (no TLS) with WebTransport (always TLS).
// The plain-text forms ws:// and http:// are for peers without TLS (a
// transport-io server of another implementation); sidecar serve always
// speaks TLS.
func CheckURL(rawURL, transportMode string) (*url.URL, error) {
	u, err := url.Parse(rawURL)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("invalid URL %q: want https://HOST:PORT/transport-io or wss://HOST:PORT/ahp", rawURL)
	}
	switch u.Scheme {
	case "wss", "ws":
		if u.Path != transport.TIOPath && transportMode != "" && transportMode != TransportAHP && transportMode != TransportAuto {
			return nil, fmt.Errorf("%s: --transport %s needs an https:// URL (wss:// is plain AHP)", rawURL, transportMode)
		}
	case "https", "http":
		if u.Scheme == "http" && transportMode == TransportWebTransport {
			return nil, fmt.Errorf("%s: WebTransport always runs over TLS: use https://", rawURL)
		}
	default:
		return nil, fmt.Errorf("invalid URL %q: scheme must be https:// (transport-io) or wss:// (plain AHP), or http:// or ws:// for a peer without TLS", rawURL)
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return nil, fmt.Errorf("invalid URL %q: port %q is not between 1 and 65535", rawURL, p)
		}
	}
	return u, nil
}

// Dial connects to the host at rawURL (wss://host:port/ahp, or ws:// on
// loopback) and initializes the AHP session with the root catalogue as the
// initial subscription. Errors say what a person can do about them.
func Dial(ctx context.Context, rawURL string, opts Options) (*Conn, error) {
	if opts.MaxMessageBytes <= 0 {
		opts.MaxMessageBytes = 16 << 20
	}
	opts = opts.withDefaults()
	if opts.Via != "" {
		mc, v, err := dialVia(ctx, opts.Via)
		if err != nil {
			return nil, err
		}
		opts.viaEnded = func() error {
			if !v.waitEnded() {
				return nil
			}
			return fmt.Errorf("--via %q: the command ended (%s)", opts.Via, *v.how)
		}
		c, err := dialed(ctx, mc, opts)
		if err == nil {
			return c, nil
		}
		if errors.Is(err, context.DeadlineExceeded) {
			// Something answered the transport-io handshake, but nothing
			// answered initialize: not a sidecar behind the command.
			v.kill() // given up on: it must not outlive us
			return nil, fmt.Errorf("--via %q: no answer to initialize in time: is the command `sidecar stdio` (or a shell that runs it)?", opts.Via)
		}
		if e := v.ended(); e != nil {
			return nil, e
		}
		v.kill()
		return nil, err
	}
	u, err := CheckURL(rawURL, opts.Transport)
	if err != nil {
		return nil, err
	}
	typed := u.Scheme // as given: the switch below rewrites u
	tio := false
	switch u.Scheme {
	case "wss", "ws":
		if u.Path == transport.TIOPath {
			// The transport-io WebSocket mapping, named by its path.
			tio = true
			u.Scheme = map[string]string{"wss": "https", "ws": "http"}[u.Scheme]
			if opts.Transport == "" || opts.Transport == TransportAuto {
				opts.Transport = TransportWebSocket
			}
			break
		}
	case "https", "http":
		if u.Path == "/ahp" && (opts.Transport == "" || opts.Transport == TransportAuto) {
			opts.Transport = TransportAHP // plain AHP, named by its path
		}
		if opts.Transport == TransportAHP {
			u.Scheme = map[string]string{"https": "wss", "http": "ws"}[u.Scheme]
			if u.Path == "" || u.Path == "/" || u.Path == transport.TIOPath {
				u.Path = "/ahp"
			}
		} else {
			tio = true
		}
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = "/ahp"
		if tio {
			u.Path = transport.TIOPath
		}
	}
	tlsConf := &tls.Config{}
	if opts.CertHash != "" {
		pin, err := tlscert.ParsePin(opts.CertHash)
		if err != nil {
			return nil, fmt.Errorf("--cert-hash: %w", err)
		}
		tlsConf.InsecureSkipVerify = true // the pin replaces chain verification
		tlsConf.VerifyPeerCertificate = tlscert.VerifyPin(pin)
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsConf, Proxy: http.ProxyFromEnvironment}}
	header := http.Header{}
	if opts.Token != "" {
		header.Set("Authorization", "Bearer "+opts.Token)
	}
	var mc transport.MessageConn
	if tio {
		mc, err = dialTransportIO(ctx, u, opts.Transport, tlsConf, header, hc)
	} else {
		mc, err = transport.DialWebSocket(ctx, u.String(), header, hc, utf8Limit(opts.MaxMessageBytes))
		if err != nil {
			err = explainDial(u, err)
		}
	}
	if err != nil {
		var he *transport.HTTPError
		switch {
		case opts.Token == "" && strings.Contains(err.Error(), "refused the token"):
			return nil, fmt.Errorf("%s wants a token and none was given: pass --token or set SIDECAR_TOKEN", u.Host)
		case (typed == "ws" || typed == "http") && (errors.As(err, &he) || strings.Contains(err.Error(), "HTTP 400")):
			return nil, fmt.Errorf("%s answered plain %s:// with HTTP 400: the sidecar always speaks TLS: use %s://", u.Host, typed, map[string]string{"ws": "wss", "http": "https"}[typed])
		}
		return nil, err
	}
	return dialed(ctx, mc, opts)
}

// dialed runs the client protocol over an established transport.
func dialed(ctx context.Context, mc transport.MessageConn, opts Options) (*Conn, error) {
	c := newConn(mc, opts)
	if err := c.initialize(ctx); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// explainDial turns a dial error into one a person can act on.
func explainDial(u *url.URL, err error) error {
	var he *transport.HTTPError
	var certErr *tls.CertificateVerificationError
	var unknownAuth x509.UnknownAuthorityError
	var hostnameErr x509.HostnameError
	var recordErr tls.RecordHeaderError
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Errorf("nothing is listening at %s (connection refused): is sidecar serve running?", u.Host)
	case errors.As(err, &he) && he.StatusCode == http.StatusUnauthorized:
		return fmt.Errorf("%s refused the token (HTTP 401): check --token or SIDECAR_TOKEN", u.Host)
	case errors.As(err, &he) && he.StatusCode == http.StatusForbidden:
		return fmt.Errorf("%s refused the connection (HTTP 403): origin not allowed", u.Host)
	case errors.As(err, &he) && he.StatusCode == http.StatusNotFound:
		return fmt.Errorf("%s has no endpoint %s (HTTP 404): is it a sidecar? (one answers at https://%s and wss://%s/ahp)", u.Host, u.Path, u.Host, u.Host)
	case errors.As(err, &he):
		return fmt.Errorf("%s refused the connection: %v", u.Host, he)
	case strings.Contains(err.Error(), "certificate pin mismatch"):
		// From the mismatch on: QUIC wraps it as "CRYPTO_ERROR 0x12a (local): ...".
		msg := err.Error()
		msg = msg[strings.Index(msg, "certificate pin mismatch"):] // found: the case's condition
		return fmt.Errorf("%s: %s; check --cert-hash (sidecar serve prints the current one)", u.Host, msg)
	case errors.As(err, &recordErr) || strings.Contains(err.Error(), "server gave HTTP response to HTTPS client"):
		// The first bytes back were no TLS record: another service on
		// that port (net/http says so in words when they were HTTP).
		what := "something that is not TLS"
		if recordErr.RecordHeader == [5]byte{} {
			what = "plain HTTP"
		}
		return fmt.Errorf("%s answered with %s: is it a sidecar? (sidecar serve always speaks TLS, on TCP and UDP at the same port)", u.Host, what)
	case errors.As(err, &certErr) || errors.As(err, &unknownAuth) || errors.As(err, &hostnameErr):
		return fmt.Errorf("%s: the certificate is not trusted (%v); pass --cert-hash with the pin that sidecar serve printed", u.Host, unwrapAll(err))
	}
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout() {
		return fmt.Errorf("%s did not answer within --connect-timeout: is the address reachable, and is sidecar serve running there?", u.Host)
	}
	return fmt.Errorf("cannot connect to %s: %v", u.Host, err)
}

func unwrapAll(err error) error {
	for {
		next := errors.Unwrap(err)
		if next == nil {
			return err
		}
		err = next
	}
}

// utf8Limit is the most UTF-8 bytes a message of maxMessage UTF-16 bytes
// takes: 3 for each 2 (a BMP character above U+07FF), and ASCII's 1 for 2
// and an astral character's 4 for 4 take less.
func utf8Limit(maxMessage int) int64 { return int64(maxMessage) / 2 * 3 }

// NewConn runs the client protocol over an established transport (tests,
// stdio). Call Initialize next.
func NewConn(mc transport.MessageConn, opts Options) *Conn {
	if opts.MaxMessageBytes <= 0 {
		opts.MaxMessageBytes = 16 << 20
	}
	return newConn(mc, opts.withDefaults())
}

func newConn(mc transport.MessageConn, opts Options) *Conn {
	id := opts.ClientID
	if id == "" {
		var b [8]byte
		_, _ = rand.Read(b[:])
		id = "sidecar-" + hex.EncodeToString(b[:])
	}
	c := &Conn{
		mc: mc, opts: opts, clientID: id,
		sched:   delivery.NewScheduler(delivery.SchedulerConfig{WriterReleases: transport.WriteReleases(mc)}),
		done:    make(chan struct{}),
		pending: map[uint64]chan response{},
		subs:    map[string]*Subscription{},
		dials:   make(chan struct{}, maxDials),
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	go c.writeLoop()
	go c.readLoop()
	return c
}

// ClientID returns the client id sent in initialize.
func (c *Conn) ClientID() string { return c.clientID }

// Initialized returns the initialize result.
func (c *Conn) Initialized() rpc.InitializeResult { return c.init }

// Transport names what carries the connection ("WebTransport",
// "WebSocket (transport-io)", "WebSocket (/ahp)", ...), for messages.
func (c *Conn) Transport() string { return transport.Describe(c.mc) }

// Done is closed when the connection has ended; Err says why.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Err returns why the connection ended (nil while open).
func (c *Conn) Err() error {
	c.errMu.Lock()
	defer c.errMu.Unlock()
	return c.err
}

// Close closes the connection.
func (c *Conn) Close() error {
	c.fail(errClosedByUs, transport.CloseNormal, "")
	<-c.done
	return nil
}

var errClosedByUs = errors.New("client: connection closed")

func (c *Conn) fail(err error, code transport.CloseCode, reason string) {
	c.errMu.Lock()
	if c.err != nil {
		c.errMu.Unlock()
		return
	}
	c.err = err
	c.errMu.Unlock()
	c.sched.Close(err)
	_ = c.mc.Close(code, reason)
	c.cancel()
}

func (c *Conn) writeLoop() {
	// Run returns only once the scheduler is closed, always with the reason.
	err := c.sched.Run(c.ctx, c.mc)
	if !errors.Is(err, errClosedByUs) && !errors.Is(err, context.Canceled) {
		c.fail(fmt.Errorf("connection lost: %w", err), transport.CloseInternalError, "")
	}
}

func (c *Conn) readLoop() {
	defer close(c.done)
	defer func() {
		c.mu.Lock()
		for id, ch := range c.pending {
			ch <- response{err: &rpc.Error{Code: rpc.CodeInternalError, Message: "connection closed"}}
			delete(c.pending, id)
		}
		subs := make([]*Subscription, 0, len(c.subs))
		for _, s := range c.subs {
			subs = append(subs, s)
		}
		c.mu.Unlock()
		for _, s := range subs {
			s.q.close(c.Err())
		}
	}()
	for {
		raw, err := c.mc.ReadMessage(c.ctx)
		if err != nil {
			why := describeClose(err)
			if c.opts.viaEnded != nil && c.Err() == nil && transport.CloseStatus(err) != transport.CloseGoingAway {
				// The --via command ending is the story (its stdout
				// closed: it exited, or was killed), unless it said it
				// was shutting down.
				if v := c.opts.viaEnded(); v != nil {
					why = v
				}
			}
			c.fail(why, transport.CloseNormal, "")
			return
		}
		if err := c.handle(raw); err != nil {
			c.fail(err, transport.CloseProtocolError, err.Error())
			return
		}
	}
}

// describeClose explains why the server ended the connection.
func describeClose(err error) error {
	code := transport.CloseStatus(err)
	reason := transport.CloseReason(err)
	switch code {
	case -1:
		// Without the layers' own "connection lost" prefixes.
		msg := strings.TrimPrefix(err.Error(), "transportio: connection lost")
		msg = strings.TrimPrefix(msg, ": ")
		if msg == "" {
			msg = "the transport ended"
		}
		return &lostError{msg: "connection lost: " + msg, err: err}
	case transport.CloseGoingAway:
		return &closedError{msg: "the server is shutting down", err: err}
	case transport.CloseNormal:
		msg := "the server closed the connection"
		if reason != "" {
			msg += ": " + reason // without the layers' codes (WT_NO_ERROR)
		}
		return &closedError{msg: msg, err: err}
	}
	return fmt.Errorf("the server closed the connection (code %d: %s)", code, reason)
}

// closedError is a connection the server closed normally; msg says so in
// words, err is the transport's error.
type closedError struct {
	msg string
	err error
}

func (e *closedError) Error() string { return e.msg }
func (e *closedError) Unwrap() error { return e.err }

// lostError is a lost connection worded once; it unwraps to the cause.
type lostError struct {
	msg string
	err error
}

func (e *lostError) Error() string { return e.msg }
func (e *lostError) Unwrap() error { return e.err }

func (c *Conn) handle(raw []byte) error {
	h, perr := rpc.ParseHeader(raw)
	if perr != nil {
		return fmt.Errorf("bad message from server: %s", perr.Message)
	}
	if h.IsResponse() {
		var id uint64
		if json.Unmarshal(h.ID, &id) != nil {
			return nil
		}
		c.mu.Lock()
		ch := c.pending[id]
		delete(c.pending, id)
		c.mu.Unlock()
		if ch == nil {
			return nil
		}
		r := response{result: h.Result}
		if h.Error != nil {
			r.err = &rpc.Error{}
			if json.Unmarshal(h.Error, r.err) != nil {
				r.err = &rpc.Error{Code: rpc.CodeInternalError, Message: string(h.Error)}
			}
		}
		ch <- r
		return nil
	}
	if !h.IsNotification() {
		return nil // the client serves no requests
	}
	c.mu.Lock()
	sub := c.subs[h.Channel]
	c.mu.Unlock()
	if sub == nil {
		return nil
	}
	return sub.receive(h, raw)
}

// Call sends a request and waits for its response. A JSON-RPC error comes
// back as *rpc.Error.
func (c *Conn) Call(ctx context.Context, method string, params, result any) error {
	id := c.nextID.Add(1)
	text, err := rpc.Request(id, method, params)
	if err != nil {
		return err
	}
	ch := make(chan response, 1)
	c.mu.Lock()
	c.pending[id] = ch
	c.mu.Unlock()
	if err := c.sched.PushProtected(text); err != nil {
		c.mu.Lock()
		delete(c.pending, id)
		c.mu.Unlock()
		if e := c.Err(); e != nil {
			return e
		}
		return err
	}
	select {
	case r := <-ch:
		if r.err != nil {
			if r.err.Message == "connection closed" {
				if e := c.Err(); e != nil {
					return e
				}
			}
			return r.err
		}
		if result != nil && len(r.result) > 0 {
			return json.Unmarshal(r.result, result)
		}
		return nil
	case <-ctx.Done():
		c.mu.Lock()
		delete(c.pending, id)
		c.mu.Unlock()
		return ctx.Err()
	}
}

func (c *Conn) initialize(ctx context.Context) error {
	name := c.opts.ClientName
	if name == "" {
		name = "sidecar"
	}
	err := c.Call(ctx, rpc.MethodInitialize, rpc.InitializeParams{
		Channel: rpc.RootChannel, ProtocolVersions: ProtocolVersions, ClientID: c.clientID,
		ClientInfo: &rpc.ClientInfo{Name: name},
	}, &c.init)
	var re *rpc.Error
	if errors.As(err, &re) && re.Code == rpc.CodeUnsupportedProtocolVersion {
		var d rpc.UnsupportedVersionData
		_ = json.Unmarshal(re.Data, &d)
		return fmt.Errorf("protocol version mismatch: this client speaks AHP %s, the server supports %s", strings.Join(ProtocolVersions, ", "), strings.Join(d.SupportedVersions, ", "))
	}
	if err != nil {
		return fmt.Errorf("initialize: %w", err)
	}
	return nil
}

// Ping checks the connection.
func (c *Conn) Ping(ctx context.Context) error {
	return c.Call(ctx, rpc.MethodPing, rpc.ChannelParams{Channel: rpc.RootChannel}, nil)
}

// RootState fetches the root catalogue (an ordinary subscribe that is
// dropped right after).
func (c *Conn) RootState(ctx context.Context) (rpc.RootState, error) {
	var res rpc.SubscribeResult
	var st rpc.RootState
	if err := c.Call(ctx, rpc.MethodSubscribe, rpc.SubscribeParams{Channel: rpc.RootChannel}, &res); err != nil {
		return st, err
	}
	_ = c.notify(rpc.MethodUnsubscribe, rpc.ChannelParams{Channel: rpc.RootChannel})
	if res.Snapshot == nil {
		return st, errors.New("root subscribe returned no snapshot")
	}
	err := json.Unmarshal(res.Snapshot.State, &st)
	return st, err
}

// notify sends a control notification.
func (c *Conn) notify(method string, params any) error {
	text, err := rpc.Notification(method, params)
	if err != nil {
		return err
	}
	return c.sched.PushControl(text)
}
