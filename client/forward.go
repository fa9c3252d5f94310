package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"time"

	textsafe "github.com/sidecar-dev/sidecar/internal/printable"

	"github.com/sidecar-dev/sidecar/rpc"
)

// DefaultForwardOpenTimeout is ForwarderOptions.OpenTimeout's default: it
// bounds createTcpConnection plus the subscription for one accepted
// connection (the host's own dial is bounded by its tcp.dial_timeout).
const DefaultForwardOpenTimeout = 30 * time.Second

// DefaultForwardMaxOpening is ForwarderOptions.MaxOpening's default: the
// local connections whose channel is opening at once. Opens take a round
// trip or two; the bound is reached in a burst the host opens slowly, or
// while the connection to the host is down and new connections wait for
// it to resume; each holds a socket and a goroutine meanwhile.
const DefaultForwardMaxOpening = 64

// ForwarderOptions configure a Forwarder. The zero value works.
type ForwarderOptions struct {
	// Log gets one line (one Write, ending in "\n") for each thing a
	// person should hear about: a channel that could not open and why, a
	// SOCKS client refused or a handshake that failed, an Accept that
	// failed and is retried. Peer text in a line (the host's messages, a
	// SOCKS client's destination) has its control characters escaped.
	// Lines carry no program name: prefix them if you need one. nil:
	// io.Discard.
	Log io.Writer
	// OpenTimeout bounds opening the channel of one accepted connection,
	// waiting for the connection to the host to resume included; one that
	// fails to open in time is reset, with a line. 0:
	// DefaultForwardOpenTimeout.
	OpenTimeout time.Duration
	// MaxOpening bounds the accepted connections whose channels are
	// opening at once (while the connection to the host is down they all
	// wait for it to resume). Past it a -L listener stops accepting (later
	// connections wait in the kernel's listen backlog, none is refused) and
	// a SOCKS request waits for a slot within OpenTimeout.
	// 0: DefaultForwardMaxOpening.
	MaxOpening int
	// SOCKSHandshakeTimeout bounds a SOCKS client's handshake, from its
	// first byte to its request; a client that stalls in it is closed,
	// with a line. 0: DefaultSOCKSHandshakeTimeout.
	SOCKSHandshakeTimeout time.Duration
	// AcceptRetryMin and AcceptRetryMax bound the wait after a failed
	// Accept (out of file descriptors, say): it starts at AcceptRetryMin
	// and doubles with each failure in a row up to AcceptRetryMax. 0:
	// DefaultAcceptRetryMin and DefaultAcceptRetryMax.
	AcceptRetryMin, AcceptRetryMax time.Duration
}

func (o ForwarderOptions) withDefaults() ForwarderOptions {
	if o.Log == nil {
		o.Log = io.Discard
	}
	if o.OpenTimeout <= 0 {
		o.OpenTimeout = DefaultForwardOpenTimeout
	}
	if o.MaxOpening <= 0 {
		o.MaxOpening = DefaultForwardMaxOpening
	}
	if o.SOCKSHandshakeTimeout <= 0 {
		o.SOCKSHandshakeTimeout = DefaultSOCKSHandshakeTimeout
	}
	if o.AcceptRetryMin <= 0 {
		o.AcceptRetryMin = DefaultAcceptRetryMin
	}
	if o.AcceptRetryMax <= 0 {
		o.AcceptRetryMax = DefaultAcceptRetryMax
	}
	return o
}

// Forwarder forwards local TCP connections through one Conn, one TCP
// channel (DialTCP) per connection, as ssh -L and ssh -D do: ServeLocal
// forwards every connection a listener accepts to one destination,
// ServeSOCKS runs a SOCKS5 proxy whose CONNECTs name the destination.
// Destinations are resolved and dialled by the host, under its tcp.allow
// policy.
//
// Each forwarded connection is piped both ways until both directions have
// ended: an end of file becomes a half-close on the other side, and a
// reset on either side (or a channel that fails, or the Conn lost for
// good) resets the other, so that a transfer cut short never looks
// complete to a local reader. While the Conn reconnects, connections
// carry on once it resumed (their channels resume with it: TCPConn), and
// connections accepted meanwhile wait to open (ForwarderOptions.MaxOpening,
// OpenTimeout). A connection whose channel cannot open is reset with a
// line in ForwarderOptions.Log saying why.
//
// Close stops accepting and resets every connection still open; Wait
// waits for their goroutines. Closing the Conn is left to its owner: a
// Forwarder does not close it, and goes on serving (every open failing)
// after it has ended, until Close. Its methods are safe for concurrent
// use.
type Forwarder struct {
	conn *Conn
	opts ForwarderOptions

	wg      sync.WaitGroup  // accept loops and connection handlers
	done    chan struct{}   // closed by Close: ends accept loops' retry waits
	opening chan struct{}   // a slot per channel opening (MaxOpening)
	ctx     context.Context // ends with Close: opens in flight fail
	cancel  context.CancelFunc

	mu        sync.Mutex
	closed    bool
	listeners []net.Listener
	active    map[*net.TCPConn]struct{} // local connections not yet released
	channels  map[*TCPConn]struct{}     // channels open

	rev reverse // ServeRemote's forwards

	// openFailed rate-limits the "open failed" lines: the same line
	// (same port, destination and reason) once per openFailedEvery, the
	// repeats counted and told with the next; at most openFailedKeys
	// lines tracked at once.
	openFailed struct {
		sync.Mutex
		lines map[string]*heldLine
		other int // lines held because openFailedKeys were tracked already
	}
}

// heldLine is one "open failed" line's rate limit: when it was last
// printed, and how many times it was held back since.
type heldLine struct {
	last time.Time
	held int
}

// openFailedEvery is the least time between two identical "open
// failed" lines: a burst of connections a host refuses (a limit, say)
// prints one a second with the count of those held back, not one each.
// openFailedKeys bounds the distinct lines tracked.
const (
	openFailedEvery = time.Second
	openFailedKeys  = 64
)

// logOpenFailed prints an "open failed" line, the same one at most once
// per openFailedEvery; repeats held back are counted on the next one
// printed, or on a line of their own at Close.
func (fw *Forwarder) logOpenFailed(format string, args ...any) {
	o := &fw.openFailed
	o.Lock()
	defer o.Unlock()
	now := time.Now()
	line := fmt.Sprintf(format, args...)
	if o.lines == nil {
		o.lines = map[string]*heldLine{}
	}
	for k, h := range o.lines { // forget lines quiet for a while
		if now.Sub(h.last) >= openFailedEvery && h.held == 0 {
			delete(o.lines, k)
		}
	}
	h := o.lines[line]
	switch {
	case h != nil && now.Sub(h.last) < openFailedEvery:
		h.held++
		return
	case h == nil && len(o.lines) >= openFailedKeys:
		o.other++
		return
	case h == nil:
		h = &heldLine{}
		o.lines[line] = h
	}
	if h.held > 0 {
		line += fmt.Sprintf(" (and %d more like it since the last such line)", h.held)
	}
	h.last, h.held = now, 0
	fw.log("%s", line)
}

// flushOpenFailed prints the count of "open failed" lines still held.
func (fw *Forwarder) flushOpenFailed() {
	o := &fw.openFailed
	o.Lock()
	defer o.Unlock()
	n := o.other
	for _, h := range o.lines {
		n += h.held
	}
	if n > 0 {
		fw.log("%d more forwarded connection(s) failed to open (repeated lines held back: one a second at most)", n)
	}
	o.lines, o.other = nil, 0
}

// NewForwarder returns a Forwarder whose channels go through conn, which
// must be initialized and offer TCP connections
// (Initialized().TCPConnections).
func NewForwarder(conn *Conn, opts ForwarderOptions) *Forwarder {
	ctx, cancel := context.WithCancel(context.Background())
	opts = opts.withDefaults()
	return &Forwarder{
		conn:     conn,
		opts:     opts,
		done:     make(chan struct{}),
		opening:  make(chan struct{}, opts.MaxOpening),
		ctx:      ctx,
		cancel:   cancel,
		active:   map[*net.TCPConn]struct{}{},
		channels: map[*TCPConn]struct{}{},
	}
}

// ServeLocal forwards every connection l accepts to host:port as the host
// sees it (ssh -L): it starts l's accept loop and returns at once. l must
// yield *net.TCPConn connections (a TCP listener). The Forwarder owns l
// from now on: Close closes it. After Close, ServeLocal closes l and
// returns net.ErrClosed.
func (fw *Forwarder) ServeLocal(l net.Listener, host string, port int) error {
	if !fw.add(l) {
		return net.ErrClosed
	}
	go fw.acceptLocal(l, host, port)
	return nil
}

// add registers l and counts its accept loop in wg, unless fw is closed
// (then it closes l).
func (fw *Forwarder) add(l net.Listener) bool {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	if fw.closed {
		_ = l.Close()
		return false
	}
	fw.listeners = append(fw.listeners, l)
	fw.wg.Add(1)
	return true
}

// Close stops forwarding: it closes the listeners (an accept loop waiting
// after a failed Accept ends at once), resets every local connection
// still open (an RST, not a FIN: a local reader cannot take a transfer cut
// short for a complete one) and their channels (tcp/reset), and makes
// channels still opening fail. It returns how many local connections it
// reset, those still opening included. It does not wait: Wait does. Close
// after the first returns 0.
func (fw *Forwarder) Close() (reset int) {
	fw.mu.Lock()
	if fw.closed {
		fw.mu.Unlock()
		return 0
	}
	fw.closed = true
	close(fw.done)
	ls := fw.listeners
	fw.listeners = nil
	fw.mu.Unlock()
	for _, l := range ls {
		_ = l.Close()
	}
	fw.flushOpenFailed()
	n := fw.closeActive()
	// The channels too: a handler may wait on the host, not on the local
	// socket just closed (an upload into a destination that does not
	// read, a download from one that sends nothing).
	fw.cancel()
	fw.mu.Lock()
	chans := make([]*TCPConn, 0, len(fw.channels))
	for c := range fw.channels {
		chans = append(chans, c)
	}
	fw.mu.Unlock()
	for _, c := range chans {
		c.Reset()
	}
	return n
}

// Wait waits until every accept loop and connection handler has ended
// (after Close, or once the listeners fail), or ctx ends (then it returns
// ctx's error).
func (fw *Forwarder) Wait(ctx context.Context) error {
	drained := make(chan struct{})
	go func() {
		fw.wg.Wait()
		close(drained)
	}()
	select {
	case <-drained:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// log writes one line to the Log: format and args, then "\n".
func (fw *Forwarder) log(format string, args ...any) {
	_, _ = io.WriteString(fw.opts.Log, fmt.Sprintf(format, args...)+"\n")
}

// ending reports whether fw is closed or the connection to the host has
// ended. A channel that fails then failed because of it: that gets no
// line of its own (Close needs none, and the connection's end is its
// owner's to say, once).
func (fw *Forwarder) ending() bool {
	select {
	case <-fw.done:
		return true
	default:
	}
	return fw.conn != nil && fw.conn.Err() != nil
}

// release stops tracking local connection c, whose handler has ended,
// unless it was reset while fw is ending: closeActive counts those among
// the connections reset, whichever of the handler and closeActive got
// there first.
func (fw *Forwarder) release(c *net.TCPConn, wasReset bool) {
	if wasReset && fw.ending() {
		return
	}
	fw.track(c, false)
}

// armReset sets SO_LINGER 0 on an accepted local connection: should this
// process die (SIGKILL, OOM), the kernel closes the socket with an RST,
// so the local program gets ECONNRESET, not the EOF of a complete
// download. A graceful close disarms it first (disarmReset).
func armReset(c *net.TCPConn) { _ = c.SetLinger(0) }

// disarmReset restores the default close (SO_LINGER off): bytes still
// queued go out, then a FIN.
func disarmReset(c *net.TCPConn) { _ = c.SetLinger(-1) }

// resetTCP closes c with an RST instead of a FIN: its reader gets
// ECONNRESET, never the EOF of a complete answer.
func resetTCP(c *net.TCPConn) {
	_ = c.SetLinger(0)
	_ = c.Close()
}

func (fw *Forwarder) track(c *net.TCPConn, add bool) {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	if add {
		fw.active[c] = struct{}{}
	} else {
		delete(fw.active, c)
	}
}

// trackChannel registers an open channel so that Close resets it, or, if
// fw is closed already, resets it and reports false.
func (fw *Forwarder) trackChannel(c *TCPConn) bool {
	fw.mu.Lock()
	closed := fw.closed
	if !closed {
		fw.channels[c] = struct{}{}
	}
	fw.mu.Unlock()
	if closed {
		c.Reset()
	}
	return !closed
}

func (fw *Forwarder) untrackChannel(c *TCPConn) {
	fw.mu.Lock()
	delete(fw.channels, c)
	fw.mu.Unlock()
}

// closeActive resets every local connection still open and returns how
// many there were.
func (fw *Forwarder) closeActive() int {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	for c := range fw.active {
		resetTCP(c)
	}
	return len(fw.active)
}

// acquire takes one of MaxOpening slots for a channel to open, waiting
// for one; false once the forwarder is closing or ctx ends.
func (fw *Forwarder) acquire(ctx context.Context) bool {
	select {
	case fw.opening <- struct{}{}:
		return true
	case <-fw.done:
		return false
	case <-ctx.Done():
		return false
	}
}

func (fw *Forwarder) releaseSlot() { <-fw.opening }

// dialTCP opens the channel of one accepted connection, within
// OpenTimeout, and registers it (trackChannel). While the connection to
// the host is down it waits for the resume; an open lost in flight (the
// connection dropped under it) is made again once resumed, with a new
// channel (the host drops the one it may have made). At most MaxOpening
// open at once: with held, the caller holds a slot (acquire) and releases
// it after; else dialTCP waits for one, within OpenTimeout.
func (fw *Forwarder) dialTCP(ctx context.Context, host string, port int, held bool) (*TCPConn, error) {
	ctx, cancel := context.WithTimeout(ctx, fw.opts.OpenTimeout)
	defer cancel()
	stop := context.AfterFunc(fw.ctx, cancel)
	defer stop()
	if !held {
		if !fw.acquire(ctx) {
			return nil, fmt.Errorf("client: no channel opened within %v: %d connections were opening", fw.opts.OpenTimeout, cap(fw.opening))
		}
		defer fw.releaseSlot()
	}
	var remote *TCPConn
	for {
		var err error
		remote, err = fw.conn.DialTCP(ctx, host, port)
		if err == nil {
			break
		}
		if errors.Is(err, ErrConnectionLost) && ctx.Err() == nil && fw.conn.Err() == nil {
			continue // the Conn reconnects: DialTCP waits for it
		}
		return nil, err
	}
	if !fw.trackChannel(remote) {
		return nil, fmt.Errorf("client: forwarder closed: %w", net.ErrClosed)
	}
	return remote, nil
}

func (fw *Forwarder) acceptLocal(l net.Listener, host string, port int) {
	defer fw.wg.Done()
	dest := net.JoinHostPort(host, strconv.Itoa(port))
	rl := fw.retrying(l)
	for {
		// A slot first: past MaxOpening channels opening, accepting
		// pauses and later connections wait in the kernel's backlog
		// rather than being refused.
		if !fw.acquire(context.Background()) {
			return // the forwarder is closing
		}
		c, err := rl.Accept()
		if err != nil {
			fw.releaseSlot()
			return // closed: the forwarder is closing
		}
		local, ok := c.(*net.TCPConn)
		if !ok {
			fw.releaseSlot()
			fw.log("%s: accepted a %T, not a TCP connection: closed", l.Addr(), c)
			_ = c.Close()
			continue
		}
		armReset(local)
		fw.track(local, true)
		fw.wg.Add(1) // acceptLocal's own count is held: never Add from zero during Wait
		go func() {
			defer fw.wg.Done()
			wasReset := true
			defer func() { fw.release(local, wasReset) }()
			remote, err := fw.dialTCP(context.Background(), host, port, true)
			fw.releaseSlot()
			if err != nil {
				if !fw.ending() { // else it failed because fw is closing
					fw.logOpenFailed("%s -> %s: open failed: %s", l.Addr(), printable(dest), fw.openMessage(err))
				}
				// A reset: a client that only reads must not take the
				// end for an empty answer.
				resetTCP(local)
				return
			}
			defer fw.untrackChannel(remote)
			wasReset = pipe(local, remote)
		}()
	}
}

// openMessage is what a person reads when a channel cannot open, escaped
// (printable): the host's message may repeat the destination a SOCKS
// client named, control characters included.
func (fw *Forwarder) openMessage(err error) string {
	var re *rpc.Error
	if errors.As(err, &re) {
		return printable(re.Message)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		if fw.conn != nil && fw.conn.reconnecting() {
			return fmt.Sprintf("the connection to the host did not resume within %s", fw.opts.OpenTimeout)
		}
		return fmt.Sprintf("the host did not answer within %s", fw.opts.OpenTimeout)
	}
	return printable(err.Error())
}

// pipe copies both ways until both directions ended. EOF becomes a
// half-close on the other side; a reset on either side resets the other,
// as does a channel that fails. It reports whether local was reset.
func pipe(local *net.TCPConn, remote *TCPConn) (wasReset bool) {
	if TCPBacklog(local) >= 0 {
		remote.SetBacklog(func() int { return TCPBacklog(local) })
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
		case errors.Is(err, ErrTCPReset):
			abort(false)
		default: // the local side reset, or the channel failed
			abort(true)
		}
	}()
	_, err := remote.WriteTo(local)
	switch {
	case err == nil:
		_ = local.CloseWrite()
	case errors.Is(err, ErrTCPReset):
		abort(false)
	default:
		abort(true)
	}
	<-done
	_ = remote.Close()
	if !wasReset {
		disarmReset(local)
	}
	_ = local.Close()
	return wasReset
}

// printable is printable.String: peer text made safe for the terminal.
func printable(s string) string { return textsafe.String(s) }
