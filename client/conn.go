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
	"time"

	"github.com/sidecar-dev/sidecar/delivery"
	"github.com/sidecar-dev/sidecar/delivery/bytestream"
	"github.com/sidecar-dev/sidecar/rpc"
	"github.com/sidecar-dev/sidecar/transport"
	"github.com/sidecar-dev/sidecar/transport/tlscert"
	"github.com/sidecar-dev/sidecar/transportio"
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
// 32 MiB, 512 KiB frames (the host's defaults, tcp.window_bytes and the
// largest frame a host allows: 192 KiB of stream bytes a message, so a
// bulk transfer costs few messages). 32 MiB is about 12 MiB of stream
// bytes, twice what 1 Gbit/s with a 50 ms round trip holds in flight.
var (
	DefaultTCPReceive    = delivery.Limits{WindowBytes: 128 << 10, MaximumFrameBytes: 16 << 10}
	DefaultTCPReceiveMax = delivery.Limits{WindowBytes: 32 << 20, MaximumFrameBytes: 512 << 10}
)

// withDefaults fills the zero limits of o.
func (o Options) withDefaults() Options {
	if o.Receive == (delivery.Limits{}) {
		o.Receive = DefaultReceive
	}
	if o.TCPReceive == (delivery.Limits{}) {
		o.TCPReceive = DefaultTCPReceive
	}
	if o.ReconnectDelay <= 0 {
		o.ReconnectDelay = 250 * time.Millisecond
	}
	if o.ReconnectMaxDelay <= 0 {
		o.ReconnectMaxDelay = 10 * time.Second
	}
	o.ReconnectMaxDelay = max(o.ReconnectMaxDelay, o.ReconnectDelay)
	if o.ReconnectAttemptTimeout <= 0 {
		o.ReconnectAttemptTimeout = 15 * time.Second
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
	// Compress offers WebSocket permessage-deflate (RFC 7692, no context
	// takeover; transport.Compression) on the WebSocket transports: a host
	// that accepts compresses its messages of 1 KiB or more, and so do we.
	// It pays where the link, not the CPU, is the bottleneck and the
	// stream is compressible (text, logs): tcp/data already crosses raw
	// with a sidecar host (the subprotocol ahp-tcp-data on /ahp, the event
	// on transport-io); only with a host that sends base64 does Deflate
	// give base64's third back. On a fast link the compressor's CPU costs
	// more than it saves. No effect on WebTransport.
	Compress bool
	// MaxMessageBytes bounds one received message in UTF-16 bytes, the unit
	// of every delivery size (as the host's delivery.max_message_bytes):
	// a message reassembled from channel/frame fragments, and one
	// WebSocket message (read with a limit of 3/2 as many UTF-8 bytes, the
	// most such a message takes). Default 16 MiB.
	MaxMessageBytes int
	// ClientName is sent as clientInfo.name.
	ClientName string
	// Transport picks the transport for https:// URLs: "auto" (default:
	// WebTransport and the transport-io WebSocket mapping dialled at once,
	// the first to complete its handshake used, WebTransport preferred
	// when it completes within 150 ms of WebSocket; a WT_UNAUTHORIZED
	// refusal is final), "webtransport", "websocket", or "ahp" (plain AHP
	// on /ahp).
	Transport string
	// TransportMemory is the file in which auto remembers, per origin
	// (scheme, host, port, base path), which transport connected, so
	// that the next dial tries it first and starts the other only 250 ms
	// later or when it fails (a remembered WebSocket is trusted for an
	// hour). "" remembers nothing; the CLI uses DefaultTransportMemory.
	TransportMemory string
	// Via, when set, is a command (run with sh -c) whose stdin and stdout
	// carry transport-io, e.g. "docker exec -i C sidecar stdio"; the URL is
	// then not dialled.
	Via string

	// Dialer, when set, makes a new transport to the host: Dial uses it
	// instead of dialling its URL, and a Conn reconnects with it (Dial
	// sets one that dials the URL again with the same options; with Via
	// there is none: a sidecar stdio host ends with its pipe). A refusal
	// that must stop reconnection wraps ErrUnauthorized; any other error
	// is retried until the grace ends.
	Dialer func(ctx context.Context) (transport.MessageConn, error)
	// NoReconnect turns reconnection off: a lost transport ends the Conn.
	NoReconnect bool
	// ReconnectAfterShutdown treats a host that closes because it is
	// shutting down (ErrServerShutdown) as a lost connection: the Conn
	// reconnects, as for any loss, until the grace ends, so that a
	// restarted daemon (systemctl restart) is found again; it keeps none
	// of our state, so the reconnect ends with ErrResumeExpired, on which
	// a caller starts a new session (forward does). Without it the Conn
	// ends at once with ErrServerShutdown: right for a terminal, which
	// the shutdown ended.
	ReconnectAfterShutdown bool
	// GiveUpWhenRefused ends the reconnection at once, with
	// ErrHostGone, when an attempt's dial is refused (ECONNREFUSED:
	// nothing listens at the host's address, so the process that held
	// our state is gone, killed or crashed): a caller that can start a
	// new session does so once the host answers again (forward does)
	// instead of waiting for the grace to end. A path that does not
	// answer at all is retried as ever. Off, a refused dial is retried
	// like any other failure (a host restarting behind its address may
	// come back; so may a tunnel to it).
	GiveUpWhenRefused bool
	// RefusedRetry, with GiveUpWhenRefused, retries refused dials for
	// this long from the first refusal of a reconnection before giving
	// up (ErrHostGone): a relay or tunnel in front of a live daemon that
	// restarts refuses for a moment, and the state the daemon keeps
	// resumes with nothing lost. Zero gives up at the first refusal.
	RefusedRetry time.Duration
	// ReconnectDelay is the wait before the first reconnect attempt,
	// doubled for each next one up to ReconnectMaxDelay, each with ±20%
	// jitter; zero means 250 ms and 10 s.
	ReconnectDelay, ReconnectMaxDelay time.Duration
	// ReconnectAttemptTimeout bounds one attempt (dial and reconnect);
	// zero means 15 s. The grace period's end bounds it too.
	ReconnectAttemptTimeout time.Duration
	// OnReconnect, when set, is told each step of a reconnection, in
	// order, from one goroutine at a time: Lost, then Retrying before
	// each attempt, then Resumed or GaveUp. It must not block for long
	// (the reconnection waits for it).
	OnReconnect func(ReconnectStatus)
	// OnDialRetry, when set, is told each time Dial tries the first
	// connection again because the host reached no decision on the
	// credential (Undecided: its identity provider could not be
	// reached), with the error, the wait before the next try and what is
	// left of Dial's context (0: no deadline). Dial tries again until
	// ctx ends.
	OnDialRetry func(err error, wait, left time.Duration)
	// OnSync, when set, is told each change of an ordinary
	// subscription's SyncState after a channel/gap (gap.go): Stale,
	// Paging, then Current (with what recovered it), one call at a time
	// per subscription, from the Conn's goroutines. It must not block.
	OnSync func(SyncStatus)

	// viaEnded, set by Dial with Via, says how the command ended once it
	// has (nil while it runs): the reason a session that ends gives.
	viaEnded func() error
}

// Conn is one client connection. Its methods are safe for concurrent use.
//
// A Conn survives the loss of its transport (docs/protocol.md
// "reconnect"): when the transport is lost (not when we close it, not on a
// protocol violation, not when the host closes it with a code), and the
// host offered to resume (the initialize result's resume) and the Conn has
// a Dialer (Dial sets one, except with Via), it dials again with backoff
// (Options.ReconnectDelay doubling to ReconnectMaxDelay, ±20% jitter) and
// sends reconnect instead of initialize, until it resumes, the host's
// grace period (resume.graceMs, counted from the loss) ends, or the host
// refuses (ErrUnauthorized, ErrResumeExpired, ErrResumeRefused). The same
// Conn and Subscriptions carry on afterwards; Options.OnReconnect is told
// each step. Calls made while reconnecting wait (bounded by their ctx);
// calls in flight at the loss fail with an error matching
// ErrConnectionLost. Done closes only once the Conn is closed or gave up;
// Err is then a *ReconnectError for a Conn that gave up.
type Conn struct {
	mc       *switchConn // the current transport; stable across reconnects
	opts     Options
	clientID string
	init     rpc.InitializeResult

	ctx    context.Context // ends when the Conn ends
	cancel context.CancelFunc
	done   chan struct{}
	err    error
	errMu  sync.Mutex
	wg     sync.WaitGroup // every goroutine of every link, and the reconnect loop

	nextID    atomic.Uint64
	clientSeq atomic.Uint64
	heard     atomic.Int64 // unix nanoseconds of the last message read from the host (LastHeard)

	mu       sync.Mutex
	link     *link         // the link in use; nil while reconnecting
	ready    chan struct{} // closed while link is set
	subs     map[string]*Subscription
	resume   *rpc.Resume     // the host's latest resume offer (nil: none)
	identity *rpc.Identity   // the host's latest identity extension (nil: none)
	resuming resumingAttempt // the reconnection attempt under way
	lastSeen uint64          // highest serverSeq applied on ordinary subscriptions
	ended    bool            // fail has run

	dials chan struct{} // bounds createTcpConnection calls in progress (DialTCP)
}

// link is one transport connection of a Conn with its scheduler; a
// reconnect makes a new one.
type link struct {
	mc      transport.MessageConn
	sched   *delivery.Scheduler
	ctx     context.Context
	cancel  context.CancelFunc
	pending map[uint64]*call // guarded by Conn.mu
	dead    error            // guarded by Conn.mu: why it ended, once it has
}

// call is a request waiting for its response on a link.
type call struct {
	ch     chan response
	method string
	// inline, when set, runs on the reader goroutine with the response
	// before the next message is read (reconnect's result).
	inline func(response)
}

type response struct {
	result json.RawMessage
	err    *rpc.Error
	lost   error // the link ended before the response came
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
		return nil, fmt.Errorf("invalid URL %q: want https://HOST:PORT/ (transport-io) or wss://HOST:PORT/ahp (plain AHP), with the daemon's base path before them when it has one (https://HOST/vm1/)", rawURL)
	}
	switch u.Scheme {
	case "wss", "ws":
		if _, ep := splitEndpoint(u.Path); ep != endpointTIO && transportMode != "" && transportMode != TransportAHP && transportMode != TransportAuto {
			return nil, fmt.Errorf("%s: --transport %s needs an https:// URL, or wss:// with the path %s (wss://…/ahp is plain AHP)", rawURL, transportMode, transport.TIOPath)
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

// Dial connects to the host at rawURL and initializes the AHP session with
// the root catalogue as the initial subscription. rawURL is
// https://HOST:PORT/ (transport-io at /transport-io, Options.Transport
// choosing how), wss://HOST:PORT/ahp (plain AHP), or either with the
// daemon's base path (listener.base_path, or a proxy's location) before
// the endpoint: https://HOST/vm1/ (or /vm1) dials /vm1/transport-io,
// wss://HOST/vm1/ahp is dialled as given; a path that ends at /ahp or
// /transport-io names that endpoint. http:// and ws:// are the same
// without TLS. Errors say what a person can do about them (a 404 names
// the URLs to use). A host that reaches no decision on the credential
// (Undecided: HTTP 503, or "authorize failed") is dialled again until ctx
// ends (Options.OnDialRetry); its last answer is then the error.
func Dial(ctx context.Context, rawURL string, opts Options) (*Conn, error) {
	if opts.MaxMessageBytes <= 0 {
		opts.MaxMessageBytes = 16 << 20
	}
	opts = opts.withDefaults()
	if opts.Via != "" {
		opts.Dialer = nil // the stdio host dies with its pipe: nothing to redial
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
	if opts.Dialer != nil {
		mc, err := opts.Dialer(ctx)
		if err != nil {
			return nil, err
		}
		return dialed(ctx, mc, opts)
	}
	u, err := CheckURL(rawURL, opts.Transport)
	if err != nil {
		return nil, err
	}
	typed := u.Scheme // as given: the switch below rewrites u
	tio := false
	base, ep := splitEndpoint(u.Path)
	switch u.Scheme {
	case "wss", "ws":
		if ep == endpointTIO {
			// The transport-io WebSocket mapping, named by its path.
			tio = true
			u.Scheme = map[string]string{"wss": "https", "ws": "http"}[u.Scheme]
			if opts.Transport == "" || opts.Transport == TransportAuto {
				opts.Transport = TransportWebSocket
			}
			break
		}
	case "https", "http":
		if ep == endpointAHP && (opts.Transport == "" || opts.Transport == TransportAuto) {
			opts.Transport = TransportAHP // plain AHP, named by its path
		}
		if opts.Transport == TransportAHP {
			u.Scheme = map[string]string{"https": "wss", "http": "ws"}[u.Scheme]
			if ep != endpointAHP {
				u.Path = base + ahpPath
			}
		} else {
			// https://HOST/ and https://HOST/vm1/ (or /vm1): the
			// daemon's base path, transport-io beneath it.
			tio = true
			if ep != endpointTIO {
				u.Path = base + transport.TIOPath
			}
		}
	}
	if u.Path == "" || u.Path == "/" {
		// wss://HOST: plain AHP at its root path. Any other wss://
		// path is dialled as given (a proxy may map one of its own to
		// /ahp); a 404 there says which URLs to use (explainDial).
		u.Path = ahpPath
	}
	u.RawPath = "" // Path is what is dialled
	tlsConf := &tls.Config{}
	if opts.CertHash != "" {
		pin, err := tlscert.ParsePin(opts.CertHash)
		if err != nil {
			return nil, fmt.Errorf("--cert-hash: %w", err)
		}
		tlsConf.InsecureSkipVerify = true // the pin replaces chain verification
		tlsConf.VerifyPeerCertificate = tlscert.VerifyPin(pin)
	}
	// No keep-alive: every request here is a dial (an upgrade, whose
	// connection becomes the session's), and a refused one's connection
	// would otherwise idle in the pool for the Conn's life, on both ends
	// (undecided answers are tried again: one each).
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsConf, Proxy: http.ProxyFromEnvironment, DisableKeepAlives: true},
		// A WebSocket upgrade is not redirected: an answer other than
		// 101 (a redirect to the page at the base path: wss://HOST/vm1)
		// is the error, which explainDial words.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	header := http.Header{}
	if opts.Token != "" {
		header.Set("Authorization", "Bearer "+opts.Token)
	}
	redial := func(ctx context.Context) (transport.MessageConn, error) {
		var mc transport.MessageConn
		var err error
		if tio {
			mc, err = dialTransportIO(ctx, u, opts.Transport, tlsConf, header, hc, opts.Compress, memoryAt(opts.TransportMemory))
		} else {
			mc, err = transport.DialWebSocket(ctx, u.String(), header, hc, utf8Limit(opts.MaxMessageBytes), opts.Compress)
			if err != nil {
				err = explainDial(u, err)
			}
		}
		return mc, err
	}
	opts.Dialer = redial
	mc, err := dialUndecided(ctx, redial, opts.OnDialRetry)
	if err != nil {
		var he *transport.HTTPError
		switch {
		case opts.Token == "" && strings.Contains(err.Error(), "refused the token"):
			return nil, &refusalError{msg: fmt.Sprintf("%s wants a token and none was given: pass --token or --token-file, or set SIDECAR_TOKEN", u.Host), err: err}
		case (typed == "ws" || typed == "http") && (errors.As(err, &he) && he.StatusCode == http.StatusBadRequest || strings.Contains(err.Error(), "HTTP 400")):
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

// ahpPath is where the daemon serves plain AHP, under its base path.
const ahpPath = "/ahp"

// The endpoints a URL's path may end at (splitEndpoint).
const (
	endpointNone = iota // the path is the base path (or none): https://HOST/vm1/
	endpointAHP         // …/ahp
	endpointTIO         // …/transport-io
)

// splitEndpoint splits URL path p into the daemon's base path (no
// trailing slash: "" or "/vm1") and the endpoint it ends at, if any:
// "/vm1/ahp" is ("/vm1", endpointAHP), "/vm1/" and "/vm1" are ("/vm1",
// endpointNone), "/" is ("", endpointNone).
func splitEndpoint(p string) (base string, endpoint int) {
	switch {
	case strings.HasSuffix(p, ahpPath):
		return strings.TrimSuffix(p, ahpPath), endpointAHP
	case strings.HasSuffix(p, transport.TIOPath):
		return strings.TrimSuffix(p, transport.TIOPath), endpointTIO
	}
	return strings.TrimSuffix(p, "/"), endpointNone
}

// whichURLs says which URLs reach a sidecar at u's host under the base
// path u's path suggests (after a 404 or a page where an endpoint was
// expected): the daemon's listener.base_path, or the location of a proxy
// in front of it, comes before every endpoint.
func whichURLs(u *url.URL) string {
	base, _ := splitEndpoint(u.Path)
	root := fmt.Sprintf("https://%s/ (transport-io, also the web page) or wss://%s/ahp (plain AHP)", u.Host, u.Host)
	if base == "" {
		return "is it a sidecar? One answers at " + root + "; one served under a base path (listener.base_path, or a proxy's location /vm1/) at https://" + u.Host + "/vm1/ and wss://" + u.Host + "/vm1/ahp"
	}
	return fmt.Sprintf("for a sidecar under %s/ (its listener.base_path, or a proxy's location), use https://%s%s/ (transport-io, also the web page) or wss://%s%s/ahp (plain AHP); for one with no base path, %s", base, u.Host, base, u.Host, base, root)
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
		// Still ECONNREFUSED to errors.Is (Options.GiveUpWhenRefused).
		return &wordedError{msg: fmt.Sprintf("nothing is listening at %s (connection refused): is sidecar serve running?", u.Host), err: err}
	case errors.As(err, &he) && he.StatusCode == http.StatusUnauthorized && he.Reason == transport.ReasonExpired:
		return &refusalError{msg: fmt.Sprintf("%s refused the credential (HTTP 401): it expired; sign in again for a new one", u.Host), err: err}
	case errors.As(err, &he) && he.StatusCode == http.StatusUnauthorized && he.Reason == transport.ReasonRevoked:
		return &refusalError{msg: fmt.Sprintf("%s refused the token (HTTP 401): it was revoked (removed or changed in the tokens file); ask for a new one", u.Host), err: err}
	case errors.As(err, &he) && he.StatusCode == http.StatusUnauthorized:
		return &refusalError{msg: fmt.Sprintf("%s refused the token (HTTP 401): check --token, --token-file or SIDECAR_TOKEN", u.Host), err: err}
	case errors.As(err, &he) && he.StatusCode == http.StatusForbidden:
		return fmt.Errorf("%s refused the connection (HTTP 403): origin not allowed", u.Host)
	case errors.As(err, &he) && he.StatusCode == http.StatusNotFound:
		return fmt.Errorf("%s has no endpoint %s (HTTP 404): %s", u.Host, u.Path, whichURLs(u))
	case undecidedHTTP(err):
		// Still the 503 to errors.As (Undecided: worth another try).
		return &wordedError{msg: fmt.Sprintf("%s could not decide on the credential (HTTP 503): its identity provider may be unreachable", u.Host), err: err}
	case errors.As(err, &he) && he.StatusCode == http.StatusServiceUnavailable:
		return &wordedError{msg: fmt.Sprintf("%s answered HTTP 503 (unavailable): a proxy in front of the daemon with nothing behind it, or the daemon starting or stopping?", u.Host), err: err}
	case errors.As(err, &he) && he.StatusCode < 400:
		// A page (200) or a redirect to one (wss://HOST/vm1 of a
		// daemon under /vm1 redirects to its page at /vm1/).
		return fmt.Errorf("%s answered %s with HTTP %d, not a WebSocket upgrade: %s", u.Host, u.Path, he.StatusCode, whichURLs(u))
	case errors.As(err, &he):
		return fmt.Errorf("%s refused the connection: %v", u.Host, he)
	case strings.Contains(err.Error(), "certificate pin mismatch"):
		// From the mismatch on: QUIC wraps it as "CRYPTO_ERROR 0x12a (local): ...".
		msg := err.Error()
		msg = msg[strings.Index(msg, "certificate pin mismatch"):] // found: the case's condition
		return &pinError{msg: fmt.Sprintf("%s: %s; check --cert-hash (sidecar serve prints the current one)", u.Host, msg), err: err}
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
		mc: &switchConn{}, opts: opts, clientID: id,
		done:  make(chan struct{}),
		ready: make(chan struct{}),
		subs:  map[string]*Subscription{},
		dials: make(chan struct{}, maxDials),
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	l := c.startLink(mc)
	c.link = l
	c.mc.set(mc)
	close(c.ready)
	return c
}

// startLink runs the reader and writer of a new link over mc.
func (c *Conn) startLink(mc transport.MessageConn) *link {
	l := &link{mc: mc, pending: map[uint64]*call{},
		sched: delivery.NewScheduler(delivery.SchedulerConfig{WriterReleases: transport.WriteReleases(mc), Binary: transport.CarriesBinary(mc)})}
	l.ctx, l.cancel = context.WithCancel(c.ctx)
	c.wg.Add(2)
	go c.writeLoop(l)
	go c.readLoop(l)
	return l
}

// ClientID returns the client id sent in initialize.
func (c *Conn) ClientID() string { return c.clientID }

// LastHeard returns when the last message from the host was read, on
// any connection of the Conn (zero before the first): every action the
// client dispatches comes back from a live host (its echo), so input
// sent after it and no message since is input the host has not
// answered (attach shows so).
func (c *Conn) LastHeard() time.Time {
	if ns := c.heard.Load(); ns != 0 {
		return time.Unix(0, ns)
	}
	return time.Time{}
}

// Initialized returns the initialize result.
func (c *Conn) Initialized() rpc.InitializeResult { return c.init }

// Identity returns who the host authenticated this connection as
// (principal and role: "owner", "user" or "viewer"), from the latest
// initialize or reconnect result (docs/protocol.md "initialize"), and
// false when the host did not say (a host without the extension).
func (c *Conn) Identity() (rpc.Identity, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.identity == nil {
		return rpc.Identity{}, false
	}
	return *c.identity, true
}

// Transport names what carries the connection ("WebTransport",
// "WebSocket (transport-io)", "WebSocket (/ahp)", ...), for messages.
func (c *Conn) Transport() string { return transport.Describe(c.mc.get()) }

// Compressed reports whether the connection negotiated WebSocket
// permessage-deflate (Options.Compress offered it and the host accepted).
func (c *Conn) Compressed() bool { return transport.Compressed(c.mc.get()) }

// Done is closed when the connection has ended: closed by us, closed by
// the host, or lost and not resumed. It stays open while reconnecting.
// Err says why.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Err returns why the connection ended (nil while open or reconnecting).
func (c *Conn) Err() error {
	c.errMu.Lock()
	defer c.errMu.Unlock()
	return c.err
}

// Close closes the connection (also while it reconnects: that stops).
func (c *Conn) Close() error {
	c.fail(errClosedByUs, transport.CloseNormal, "")
	<-c.done
	return nil
}

var errClosedByUs = errors.New("client: connection closed")

// errLinkDropped closes the scheduler of a link given up on.
var errLinkDropped = errors.New("client: link dropped")

// fail ends the Conn with err: the current link is closed with code and
// reason, a reconnection in progress stops, and once every goroutine has
// returned, calls still waiting and every subscription end with err and
// Done closes.
func (c *Conn) fail(err error, code transport.CloseCode, reason string) {
	c.errMu.Lock()
	if c.err != nil {
		c.errMu.Unlock()
		return
	}
	c.err = err
	c.errMu.Unlock()
	c.mu.Lock()
	c.ended = true
	l := c.link
	c.mu.Unlock()
	if l != nil {
		l.sched.Close(err)
		_ = l.mc.Close(code, reason)
	}
	c.cancel()
	go c.finish()
}

// finish waits for every goroutine, then ends what still waits.
func (c *Conn) finish() {
	c.wg.Wait()
	err := c.Err()
	c.mu.Lock()
	subs := make([]*Subscription, 0, len(c.subs))
	for _, s := range c.subs {
		subs = append(subs, s)
	}
	c.mu.Unlock()
	for _, s := range subs {
		s.end(err)
	}
	close(c.done)
}

func (c *Conn) writeLoop(l *link) {
	defer c.wg.Done()
	// Run returns only once the scheduler is closed, always with the reason.
	err := l.sched.Run(l.ctx, l.mc)
	if errors.Is(err, errClosedByUs) || errors.Is(err, errLinkDropped) || errors.Is(err, context.Canceled) {
		return
	}
	var why error = &lostError{msg: "connection lost: " + err.Error(), err: err}
	lost := true
	if transport.CloseStatus(err) == transport.CloseGoingAway {
		// The server closed as it shuts down, and a write met it before
		// the reader did: the same story as the reader's.
		why = describeClose(err)
		lost = c.opts.ReconnectAfterShutdown
	}
	c.linkDown(l, why, lost, transport.CloseInternalError)
}

func (c *Conn) readLoop(l *link) {
	defer c.wg.Done()
	defer c.endLink(l, nil)
	for {
		raw, binary, err := transport.ReadMessageOrBinary(l.ctx, l.mc)
		var h *rpc.Header
		if err == nil && binary {
			// A data message in its binary form (delivery/bytestream).
			var perr error
			if h, perr = bytestream.ParseBinary(raw, transport.ReadLimit(l.mc)); perr != nil {
				transport.RecycleRead(l.mc, raw)
				err = transport.Violate(l.mc, perr)
			}
		}
		if err != nil {
			if l.ctx.Err() != nil {
				return // dropped by us
			}
			why := describeClose(err)
			lost := transport.CloseStatus(err) == -1 ||
				(c.opts.ReconnectAfterShutdown && errors.Is(why, ErrServerShutdown))
			var ve *transport.ViolationError
			if errors.As(err, &ve) {
				// The server sent what the transport forbids, and we
				// closed: a reconnect would meet the same server.
				why = fmt.Errorf("the server broke the protocol (closed with code %d): %w", ve.Code, err)
				lost = false
			}
			if c.opts.viaEnded != nil && c.Err() == nil && transport.CloseStatus(err) != transport.CloseGoingAway {
				// The --via command ending is the story (its stdout
				// closed: it exited, or was killed), unless it said it
				// was shutting down.
				if v := c.opts.viaEnded(); v != nil {
					why = v
				}
			}
			c.linkDown(l, why, lost, transport.CloseNormal)
			return
		}
		c.heard.Store(time.Now().UnixNano())
		if err := c.handle(l, raw, h); err != nil {
			c.mu.Lock()
			current := c.link == l
			c.mu.Unlock()
			if current {
				c.fail(err, transport.CloseProtocolError, err.Error())
			} else {
				c.endLink(l, err)
			}
			return
		}
	}
}

// endLink ends l: its scheduler and transport close (unless they are the
// Conn's, which fail closes), and calls waiting on it fail with why (a
// lost link when nil).
func (c *Conn) endLink(l *link, why error) {
	c.mu.Lock()
	if l.dead == nil {
		l.dead = why
		if why == nil {
			l.dead = errors.New("the transport ended")
		}
	}
	why = l.dead
	pend := l.pending
	l.pending = map[uint64]*call{}
	current := c.link == l
	c.mu.Unlock()
	for _, p := range pend {
		p.ch <- response{lost: why}
	}
	if !current || c.Err() == nil {
		l.sched.Close(fmt.Errorf("%w: %w", errLinkDropped, why))
		_ = l.mc.Close(transport.CloseInternalError, "connection lost")
		l.cancel()
	}
}

// linkDown handles the end of l, whose reader or writer failed with why:
// a transport that was lost (lost) on the link in use starts a
// reconnection when the Conn can resume; anything else ends the Conn
// (closing with code), or only l when it was not in use.
func (c *Conn) linkDown(l *link, why error, lost bool, code transport.CloseCode) {
	c.mu.Lock()
	if c.ended {
		c.mu.Unlock()
		return
	}
	if c.link != l {
		c.mu.Unlock()
		c.endLink(l, why) // a link in its reconnect handshake: the attempt fails
		return
	}
	if !lost || !c.canReconnectLocked() {
		c.mu.Unlock()
		c.fail(why, code, "")
		return
	}
	c.link = nil
	c.ready = make(chan struct{})
	subs := make([]*Subscription, 0, len(c.subs))
	for _, s := range c.subs {
		subs = append(subs, s)
	}
	c.mu.Unlock()
	lostAt := time.Now()
	c.endLink(l, why)
	for _, s := range subs {
		s.detach(why)
	}
	c.wg.Add(1)
	go c.reconnectLoop(lostAt, why)
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
		if se, ok := errors.AsType[*transportio.SessionError](err); ok && se.Remote && se.Code == transportio.CloseIdleTimeout {
			// The server's idle deadline passed first (we were
			// frozen, or the path dropped our side only).
			msg = "the server heard nothing from us: " + printable(se.Reason)
		}
		if msg == "" {
			msg = "the transport ended"
		}
		return &lostError{msg: "connection lost: " + msg, err: err}
	case transport.CloseGoingAway:
		return &closedError{msg: "the server is shutting down", err: err, is: ErrServerShutdown}
	case transport.CloseUnauthorized:
		// Final: the same credential would be refused (seed 002 §4).
		msg := "the server ended the session: its credential is no longer valid (" + printable(reason) + ")"
		switch reason {
		case transport.ReasonRevoked:
			msg = "the server ended the session: the token was revoked (removed or changed in the tokens file); ask for a new one"
		case transport.ReasonExpired:
			msg = "the server ended the session: the credential expired; sign in again for a new one"
		}
		return &closedError{msg: msg, err: err, is: ErrUnauthorized}
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
	// is, when set, is a sentinel the error also matches.
	is error
}

func (e *closedError) Error() string        { return e.msg }
func (e *closedError) Unwrap() error        { return e.err }
func (e *closedError) Is(target error) bool { return e.is != nil && target == e.is }

// lostError is a lost connection worded once; it unwraps to the cause.
type lostError struct {
	msg string
	err error
}

func (e *lostError) Error() string { return e.msg }
func (e *lostError) Unwrap() error { return e.err }

func (c *Conn) handle(l *link, raw []byte, h *rpc.Header) error {
	if h != nil {
		return c.handleData(l, raw, h)
	}
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
		p := l.pending[id]
		delete(l.pending, id)
		c.mu.Unlock()
		if p == nil {
			return nil
		}
		r := response{result: h.Result}
		if h.Error != nil {
			r.err = &rpc.Error{}
			if json.Unmarshal(h.Error, r.err) != nil {
				r.err = &rpc.Error{Code: rpc.CodeInternalError, Message: string(h.Error)}
			}
		}
		if p.inline != nil {
			p.inline(r)
		}
		p.ch <- r
		return nil
	}
	if !h.IsNotification() {
		return nil // the client serves no requests
	}
	c.mu.Lock()
	sub := c.subs[h.Channel]
	current := c.link == l
	c.mu.Unlock()
	if sub == nil || !current {
		return nil // late messages of a link given up on are ignored
	}
	return sub.receive(l, h, raw)
}

// handleData handles a data message that came in its binary form
// (bytestream.ParseBinary): the subscription's consumer takes the bytes
// when it reads them (a TCPConn); any other (a Subscribe to an ahp-tcp:
// channel) gets the text it stands for.
func (c *Conn) handleData(l *link, raw []byte, h *rpc.Header) error {
	c.mu.Lock()
	sub := c.subs[h.Channel]
	current := c.link == l
	c.mu.Unlock()
	if sub == nil || !current {
		transport.RecycleRead(l.mc, raw)
		return nil // late messages of a link given up on are ignored
	}
	if !sub.stream {
		text := bytestream.AppendBinaryText(make([]byte, 0, h.Binary.TextLen), h)
		transport.RecycleRead(l.mc, raw)
		return c.handle(l, text, nil)
	}
	return sub.receive(l, h, raw)
}

// currentLink returns the link in use, waiting while the Conn reconnects
// (until ctx ends), or the Conn's error once it has ended.
func (c *Conn) currentLink(ctx context.Context) (*link, error) {
	for {
		c.mu.Lock()
		l, ready := c.link, c.ready
		c.mu.Unlock()
		if err := c.Err(); err != nil {
			return nil, err
		}
		if l != nil {
			return l, nil
		}
		select {
		case <-ready:
		case <-c.done:
		case <-c.ctx.Done():
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Call sends a request and waits for its response; an Overloaded answer
// (-32050) is retried with exponential backoff and jitter until ctx ends.
// A JSON-RPC error comes
// back as *rpc.Error. While the Conn reconnects, Call waits for it to
// resume (bounded by ctx) before sending; a call in flight when the
// transport is lost returns an error matching ErrConnectionLost (the
// request may or may not have been applied: retry what is safe to retry).
func (c *Conn) Call(ctx context.Context, method string, params, result any) error {
	l, err := c.currentLink(ctx)
	if err != nil {
		return err
	}
	return c.callOn(ctx, l, method, params, result, nil)
}

// Overloaded answers (-32050: the host has as many requests in progress
// on the connection as it takes; seed 003 ingress: retryable) are sent
// again after a backoff from overloadedRetryMin doubling to
// overloadedRetryMax, each wait ±20% (jitter, so that the requests one
// burst got refused do not come back together), until the context ends.
const (
	overloadedRetryMin = 10 * time.Millisecond
	overloadedRetryMax = time.Second
)

// callOn is Call on link l; inline, when set, sees the response on the
// reader goroutine first. Every request path goes through it: an
// Overloaded answer is retried (overloadedRetryMin), and returned only
// once ctx or the Conn ends.
func (c *Conn) callOn(ctx context.Context, l *link, method string, params, result any, inline func(response)) error {
	var overloaded error // the last Overloaded answer
	for attempt := 1; ; attempt++ {
		err := c.callOnce(ctx, l, method, params, result, inline)
		var re *rpc.Error
		if !errors.As(err, &re) || re.Code != rpc.CodeOverloaded {
			if overloaded != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()) {
				// ctx ended while a retry was in flight: what the
				// caller should hear is that the host was overloaded.
				return overloaded
			}
			return err
		}
		overloaded = err
		t := time.NewTimer(jitter(overloadedWait(attempt)))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return err
		case <-c.done:
			t.Stop()
			return err
		}
	}
}

// overloadedWait is the wait, before jitter, after the attempt-th
// Overloaded answer (from 1).
func overloadedWait(attempt int) time.Duration {
	d := overloadedRetryMin
	for range attempt - 1 {
		if d >= overloadedRetryMax {
			break
		}
		d *= 2
	}
	return min(d, overloadedRetryMax)
}

// callOnce sends one request on l and waits for its response.
func (c *Conn) callOnce(ctx context.Context, l *link, method string, params, result any, inline func(response)) error {
	id := c.nextID.Add(1)
	text, err := rpc.Request(id, method, params)
	if err != nil {
		return err
	}
	p := &call{ch: make(chan response, 1), method: method, inline: inline}
	c.mu.Lock()
	if dead := l.dead; dead != nil {
		c.mu.Unlock()
		return &lostCallError{method: method, cause: dead}
	}
	l.pending[id] = p
	c.mu.Unlock()
	if err := l.sched.PushProtected(text); err != nil {
		c.mu.Lock()
		delete(l.pending, id)
		dead := l.dead
		c.mu.Unlock()
		if e := c.Err(); e != nil {
			return e
		}
		if dead != nil {
			return &lostCallError{method: method, cause: dead}
		}
		return err
	}
	select {
	case r := <-p.ch:
		if r.lost != nil {
			if e := c.Err(); e != nil && !c.reconnecting() {
				return e
			}
			return &lostCallError{method: method, cause: r.lost}
		}
		if r.err != nil {
			return r.err
		}
		if result != nil && len(r.result) > 0 {
			return json.Unmarshal(r.result, result)
		}
		return nil
	case <-ctx.Done():
		c.mu.Lock()
		delete(l.pending, id)
		c.mu.Unlock()
		return ctx.Err()
	}
}

// reconnecting reports whether the Conn is between a loss and its end or
// resumption.
func (c *Conn) reconnecting() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.link == nil && !c.ended
}

// clientCapabilities is what initialize declares (ClientCapabilities):
// tunnels in both directions (-L, and -R through tunnel/accept).
var clientCapabilities = json.RawMessage(`{"tunnels":{"hostToClient":{},"clientToHost":{}}}`)

func (c *Conn) initialize(ctx context.Context) error {
	name := c.opts.ClientName
	if name == "" {
		name = "sidecar"
	}
	err := c.Call(ctx, rpc.MethodInitialize, rpc.InitializeParams{
		Channel: rpc.RootChannel, ProtocolVersions: ProtocolVersions, ClientID: c.clientID,
		ClientInfo: &rpc.ClientInfo{Name: name}, Capabilities: clientCapabilities,
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
	c.mu.Lock()
	c.resume = c.init.Resume
	c.identity = c.init.Identity
	c.lastSeen = c.init.ServerSeq
	c.mu.Unlock()
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

// notify sends a control notification on the link in use; while the
// Conn reconnects it is dropped (ErrConnectionLost): what it said is
// carried by the reconnect (an unsubscribed channel is not asked for).
func (c *Conn) notify(method string, params any) error {
	text, err := rpc.Notification(method, params)
	if err != nil {
		return err
	}
	c.mu.Lock()
	l := c.link
	c.mu.Unlock()
	if l == nil {
		if e := c.Err(); e != nil {
			return e
		}
		return ErrConnectionLost
	}
	return l.sched.PushControl(text)
}
