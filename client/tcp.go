package client

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/sidecar-dev/sidecar/delivery"
	"github.com/sidecar-dev/sidecar/delivery/bytestream"
	"github.com/sidecar-dev/sidecar/rpc"
	"github.com/sidecar-dev/sidecar/transport"
)

// TCP errors.
var (
	// ErrTCPNotOffered: the host's initialize result has no tcpConnections.
	ErrTCPNotOffered = errors.New("client: the host does not offer TCP connections")
	// ErrTCPReset: the connection was reset (tcp/reset from the host, or
	// Reset). It wraps syscall.ECONNRESET so callers can treat it like a
	// socket's reset.
	ErrTCPReset = fmt.Errorf("client: TCP connection reset by the host side: %w", syscall.ECONNRESET)
	// errTCPClosed: the TCPConn was closed locally.
	errTCPClosed = fmt.Errorf("client: TCP connection closed: %w", net.ErrClosed)
)

// TCPCloseLinger bounds how long Close waits for the host to write what
// was sent (all credit returned) before it unsubscribes, which closes the
// host's socket.
const TCPCloseLinger = 5 * time.Second

// TCPConn is a TCP connection the host opened for us (createTcpConnection
// on an ahp-tcp: channel, then a windowed subscription). It is a net.Conn
// with CloseWrite, like *net.TCPConn.
//
// Received bytes are credited only once the consumer has taken them: with
// WriteTo (which io.Copy uses) once the destination writer returned, with
// Read at the next Read. So a consumer that stops reading stops the host
// from reading the remote socket after one window. Write blocks while the
// host's window and the subscription's bounded send queue are full.
//
// When the Conn loses its transport and reconnects, the connection resumes
// with it, no byte lost or duplicated either way: what was sent and not
// yet credited by the host is kept (at most the window plus one message)
// and sent again from where the host's reconnect result says it stopped,
// and the host does the same (docs/protocol.md "reconnect"); Read and
// Write wait meanwhile. A connection the host did not keep (offsets that
// do not match) fails with an error matching ErrNotKept, and one whose
// Conn gave up (past the host's grace) with the Conn's error
// (ErrConnectionLost); either way its socket on the host is reset.
//
// One goroutine may read and another write at the same time; Close may be
// called from any goroutine. Deadlines: only the read deadline is honoured.
type TCPConn struct {
	c      *Conn
	sub    *Subscription
	enc    *bytestream.Encoder
	remote *net.TCPAddr
	ctx    context.Context // canceled by Close and on reset: unblocks Write
	cancel context.CancelFunc

	rmu  sync.Mutex
	held []*Message // the messages buf comes from, released when used up
	buf  []byte     // received bytes not yet taken (in dbuf, or in view)
	dbuf []byte     // decode buffer, reused once buf is used up
	// view, when set, is the buffer a large binary tcp/data was read
	// into, which buf is a part of (takeView): handed back to the
	// transport once buf is used up.
	view    []byte
	recvOff bytestream.DecodedOffset
	rerr    error // sticky: io.EOF, ErrTCPReset

	dmu      sync.Mutex
	deadline time.Time

	wmu     sync.Mutex
	sendOff bytestream.DecodedOffset
	wclosed bool

	closeOnce sync.Once
	mu        sync.Mutex
	reset     bool

	tune tcpTuner
}

// Receive-window tuning (what TCP stacks and QUIC do with their receive
// windows): a TCPConn starts with Options.TCPReceive, small enough that a
// forwarded connection nobody reads holds little, and doubles its window
// (and frame size, up to Options.TCPReceiveMax and what the host allows)
// by subscribing again whenever a whole window was consumed, in either
// direction, within tuneRTTs round trips (after the first tuneAfter
// bytes): then the window, not the network or the reader, is what limits
// the transfer.
const tuneRTTs = 4

// windowLimited reports whether a whole window consumed in took, with
// round trips of rtt, means the window alone limits the transfer: within
// one and a half round trips (a window takes one round trip to go and be
// credited, whatever the path could carry; took counts from when the
// window came into force: tuneEpoch.inForce). Then the window grows
// fourfold rather than twofold: as a Grow itself takes a round trip,
// during which the window cannot grow again, that keeps the growth near
// TCP's slow start (doubling each round trip), so a 1 Gbit/s path with
// 50 ms round trips is filled within a second.
func windowLimited(took, rtt time.Duration) bool { return took < rtt+rtt/2 }

// tuneAfter is how much a direction must have consumed (UTF-16 bytes;
// about 768 KiB of stream bytes) before its window may grow when the
// reader's backlog cannot be seen (SetBacklog: an upload, whose reader is
// on the host): twice what the socket buffers of a loopback destination
// that never reads absorb (the host's send buffer, 256 KiB:
// adapters/tcp.LoopbackSendBuffer, and the destination's receive buffer,
// 128 KiB by default), so that such a reader, whose first bytes vanish into
// those buffers at once, does not look fast; yet small enough that an
// upload over a long link reaches its rate within a second (a 6 s upload
// over 100 Mbit/s with 10 ms each way: 8.2 MiB/s, 7.1 with 8 MiB here).
const tuneAfter = 2 << 20

// tuneMinRTT is the least round trip the tuning assumes: below it (a
// loopback host) timer and scheduling noise would make every window look
// slow.
const tuneMinRTT = 50 * time.Microsecond

// tcpTuner is the state of one TCPConn's window tuning.
type tcpTuner struct {
	mu  sync.Mutex
	rtt time.Duration // the least subscribe round trip seen (dial, then each Grow)
	// rttFixed keeps rtt as set (tests: SetTuneRTT).
	rttFixed bool
	cur      delivery.Limits // the limits last offered
	max      delivery.Limits
	growing  bool
	in, out  tuneEpoch                  // received bytes released, sent bytes credited
	backlog  func() int                 // bytes our reader has not taken yet (SetBacklog)
	onGrow   func(next delivery.Limits) // tests: each offer, before Grow
}

// tuneEpoch is where a direction's current measurement began.
type tuneEpoch struct {
	start time.Time
	base  delivery.UTF16Bytes
	// inForce is when the window measured came into force: start, or
	// when the limits offered at start were granted (the offer's own round
	// trip went by at the old window). windowLimited times the window
	// from there.
	inForce time.Time
}

func (tu *tcpTuner) init(rtt time.Duration, cur, maxLimits delivery.Limits) {
	now := time.Now()
	tu.rtt, tu.cur, tu.max = max(rtt, tuneMinRTT), cur, maxLimits
	tu.in = tuneEpoch{start: now, inForce: now}
	tu.out = tuneEpoch{start: now, inForce: now}
}

// maybeGrow takes a direction's count of bytes consumed (UTF-16 bytes)
// and starts growing the limits when a whole window went by fast enough.
func (t *TCPConn) maybeGrow(e *tuneEpoch, consumed delivery.UTF16Bytes) {
	tu := &t.tune
	tu.mu.Lock()
	next, ok := tu.offer(e, consumed, time.Now())
	if !ok {
		tu.mu.Unlock()
		return
	}
	tu.growing = true
	if tu.onGrow != nil {
		tu.onGrow(next)
	}
	tu.mu.Unlock()
	go func() {
		ctx, cancel := context.WithTimeout(t.ctx, 10*time.Second)
		defer cancel()
		start := time.Now()
		err := t.sub.Grow(ctx, next)
		rtt := time.Since(start)
		in, out := t.sub.Limits()
		tu.mu.Lock()
		defer tu.mu.Unlock()
		tu.granted(next, in, out, rtt, err, time.Now())
	}()
}

// offer decides, with tu.mu held, whether a direction's count of bytes
// consumed (UTF-16 bytes) at now calls for larger limits, and which: a
// whole window went by within tuneRTTs round trips of the epoch's start,
// and the reader's backlog (SetBacklog) does not say it is the
// bottleneck. It restarts the epoch when a window went by.
func (tu *tcpTuner) offer(e *tuneEpoch, consumed delivery.UTF16Bytes, now time.Time) (next delivery.Limits, ok bool) {
	after := delivery.UTF16Bytes(tuneAfter)
	var backlog func() int
	if e == &tu.in && tu.backlog != nil {
		after, backlog = 0, tu.backlog // the reader's own backlog tells a stall
	}
	if consumed < after {
		// The epochs start once the socket buffers are full.
		*e = tuneEpoch{start: now, base: consumed, inForce: now}
		return next, false
	}
	if consumed-e.base < tu.cur.WindowBytes {
		return next, false
	}
	fast := now.Sub(e.start) < tuneRTTs*tu.rtt
	limited := windowLimited(now.Sub(e.inForce), tu.rtt)
	*e = tuneEpoch{start: now, base: consumed, inForce: now}
	grow := delivery.UTF16Bytes(2)
	if limited {
		grow = 4 // the window alone limits the transfer: the path takes far more
	}
	next = delivery.Limits{
		WindowBytes:       min(grow*tu.cur.WindowBytes, tu.max.WindowBytes),
		MaximumFrameBytes: min(max(tu.cur.MaximumFrameBytes, grow*tu.cur.WindowBytes/tcpFramesPerWindow), tu.max.MaximumFrameBytes),
	}
	if fast && backlog != nil && backlog() > int(tu.cur.WindowBytes/8) {
		// Taken fast, but into a socket buffer its reader is not
		// emptying (more than about a third of a window's stream bytes
		// wait there): the reader is the bottleneck, not the window.
		fast = false
	}
	if !fast || tu.growing || next == tu.cur || next.WindowBytes < tu.cur.WindowBytes {
		return next, false
	}
	return next, true
}

// granted records, with tu.mu held, the answer at now to the offer of
// next, which took rtt: the limits in force (in: clientReceive, out:
// hostReceive) and the least round trip seen, or, when the host refused
// (an *rpc.Error), that the limits stay. From now on each direction's
// window is timed from now (tuneEpoch.inForce).
func (tu *tcpTuner) granted(next, in, out delivery.Limits, rtt time.Duration, err error, now time.Time) {
	tu.growing = false
	if err == nil && !tu.rttFixed {
		// The least round trip seen: the dial's subscribe may have
		// met a busy host or link, a later one an idle one.
		tu.rtt = max(min(tu.rtt, rtt), tuneMinRTT)
	}
	var re *rpc.Error
	if errors.As(err, &re) {
		tu.max = tu.cur // the host would not: stop trying
		return
	}
	if err != nil {
		return // lost meanwhile: a later window may try again
	}
	tu.cur = in
	tu.in.inForce, tu.out.inForce = now, now
	if in.WindowBytes < next.WindowBytes || out.WindowBytes < next.WindowBytes {
		tu.max = in // the host's maximum reached
	}
}

// tcpFramesPerWindow: a grown frame size is at most a window over this,
// so that several messages are always in flight.
const tcpFramesPerWindow = 8

// DialTCP asks the host to connect to host:port and returns the stream.
// A refusal is an *rpc.Error: CodePermissionDenied (not allowed by the
// host's policy, or a limit), CodeTCPConnectionOpenFailed (refused,
// unreachable, timed out); its Message says what happened in words a
// person can act on.
func (c *Conn) DialTCP(ctx context.Context, host string, port int) (*TCPConn, error) {
	if c.init.TCPConnections == nil {
		return nil, ErrTCPNotOffered
	}
	if c.opts.Ordinary {
		return nil, errors.New("client: TCP connections need windowed delivery (do not use --ordinary)")
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	uri := "ahp-tcp:/" + hex.EncodeToString(b[:])
	if err := c.createTCP(ctx, rpc.CreateTCPConnectionParams{Channel: uri, Host: host, Port: &port}); err != nil {
		return nil, err
	}
	return c.openTCP(ctx, uri, host, port)
}

// AcceptTCP subscribes to uri, the ahp-tcp: channel of a connection a
// reverse forward's listener accepted on the host (tunnel/accept,
// docs/protocol.md "Tunnels"), and returns its stream, which behaves as
// DialTCP's; peer is the connecting program's address on the host.
func (c *Conn) AcceptTCP(ctx context.Context, uri string, peer rpc.TunnelAddress) (*TCPConn, error) {
	if c.opts.Ordinary {
		return nil, errors.New("client: TCP connections need windowed delivery (do not use --ordinary)")
	}
	return c.openTCP(ctx, uri, peer.Host, peer.Port)
}

// openTCP subscribes to the TCP channel uri, created already, whose far
// end is host:port.
func (c *Conn) openTCP(ctx context.Context, uri, host string, port int) (*TCPConn, error) {
	t, err := c.subscribeStream(ctx, uri, rpc.TCPStream)
	if err != nil {
		return nil, err
	}
	t.remote = &net.TCPAddr{Port: port}
	if a, err := netip.ParseAddr(host); err == nil {
		t.remote.IP = a.AsSlice()
	}
	return t, nil
}

// subscribeStream subscribes (windowed) to uri, a byte-stream channel
// the host has created for us (a TCP connection, a file), and returns
// the stream.
func (c *Conn) subscribeStream(ctx context.Context, uri string, methods rpc.StreamMethods) (*TCPConn, error) {
	recv := c.opts.TCPReceive
	start := time.Now()
	sub, err := c.subscribe(ctx, uri, recv, true)
	if err != nil {
		_ = c.notify(rpc.MethodUnsubscribe, rpc.ChannelParams{Channel: uri})
		return nil, err
	}
	if !sub.Windowed {
		_ = sub.Unsubscribe()
		return nil, errors.New("client: the host declined windowed delivery for a byte-stream channel")
	}
	t := &TCPConn{c: c, sub: sub, enc: bytestream.NewEncoder(methods, uri), remote: &net.TCPAddr{}}
	t.tune.init(time.Since(start), sub.ClientReceive, c.opts.TCPReceiveMax)
	t.ctx, t.cancel = context.WithCancel(context.Background())
	return t, nil
}

// SetBacklog gives the window tuning a way to see how many received bytes
// the final reader has not taken yet, e.g. the unsent bytes of the local
// socket WriteTo writes to (TCPBacklog). With it, the receive window grows
// from the first bytes on, but never while that backlog is more than a
// third of a window (a stalled reader whose socket buffers still absorb
// data looks fast otherwise); without it, only after tuneAfter bytes.
func (t *TCPConn) SetBacklog(f func() int) {
	t.tune.mu.Lock()
	t.tune.backlog = f
	t.tune.mu.Unlock()
}

// Limits returns the limits in use: clientReceive (what the host sends
// us) and hostReceive (what we send); they grow while the window limits a
// transfer (see tuneRTTs).
func (t *TCPConn) Limits() (clientReceive, hostReceive delivery.Limits) { return t.sub.Limits() }

// maxDials bounds the createTcpConnection calls one Conn has in progress:
// half the host's default bound on requests in progress (16,
// delivery.max_concurrent_requests), so a burst of connections (a browser
// through -L) queues here instead of being refused.
const maxDials = 8

// createTCP calls createTcpConnection, at most maxDials at once; an
// Overloaded answer (the host's bound may be lower than ours, or other
// requests fill it) is retried by Call, with backoff.
func (c *Conn) createTCP(ctx context.Context, p rpc.CreateTCPConnectionParams) error {
	select {
	case c.dials <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	case <-c.done:
		return c.Err()
	}
	defer func() { <-c.dials }()
	return c.Call(ctx, rpc.MethodCreateTCPConnection, p, nil)
}

// Channel returns the ahp-tcp: URI.
func (t *TCPConn) Channel() string { return t.sub.Channel }

// next returns the next bytes received, or the sticky error. The previous
// messages are released first (their bytes were taken). Call with rmu held.
func (t *TCPConn) next() ([]byte, error) {
	for len(t.buf) == 0 {
		if t.view != nil {
			transport.RecycleRead(t.c.mc, t.view)
			t.view = nil
		}
		if len(t.held) > 0 {
			t.releaseHeld()
			if in, _ := t.sub.parts(); in != nil {
				_, released := in.Counters()
				t.maybeGrow(&t.tune.in, released)
			}
		}
		if t.rerr != nil {
			return nil, t.rerr
		}
		ctx := context.Background()
		t.dmu.Lock()
		deadline := t.deadline
		t.dmu.Unlock()
		if !deadline.IsZero() {
			var cancel context.CancelFunc
			ctx, cancel = context.WithDeadline(ctx, deadline)
			defer cancel()
		}
		m, err := t.sub.Next(ctx)
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				return nil, os.ErrDeadlineExceeded
			}
			if t.isReset() {
				return nil, ErrTCPReset
			}
			if errors.Is(err, errUnsubscribed) {
				return nil, errTCPClosed
			}
			return nil, fmt.Errorf("client: TCP connection lost: %w", err)
		}
		if data, ok := t.takeView(m); ok {
			t.buf = data
			continue
		}
		if need := decodedBound(m); cap(t.dbuf) < need {
			t.dbuf = make([]byte, 0, max(need, t.batchBytes()))
		}
		t.buf = t.take(m, t.dbuf[:0])
		t.dbuf = t.buf[:0]
	}
	return t.buf, nil
}

// viewMinBytes is the least data a binary tcp/data carries for its bytes
// to be taken where the transport read them (takeView) rather than
// copied into the decode buffer: half of what WriteTo gathers for one
// Write, so a smaller message still goes out with those queued behind it.
const viewMinBytes = tcpWriteBatch / 2

// takeView takes a binary tcp/data message of at least viewMinBytes
// without copying its bytes: they stay in the buffer the transport read
// the message into (t.view, handed back once they are all taken), and the
// message is held until then like one take decoded. It reports false for
// any other message (and for a gap, which take reports).
func (t *TCPConn) takeView(m *Message) ([]byte, bool) {
	if m.Method != rpc.MethodTCPData || m.binary == nil || !m.whole || len(m.binary.Data) < viewMinBytes {
		return nil, false
	}
	off := bytestream.DecodedOffset(m.binary.Offset)
	data, err := bytestream.Trim(&off, m.binary.Data, t.recvOff)
	if err != nil {
		return nil, false
	}
	t.recvOff += bytestream.DecodedOffset(len(data))
	t.sub.streamRecv.Store(uint64(t.recvOff))
	t.view = m.Raw
	m.Raw, m.Params, m.whole, m.binary = nil, nil, false, nil
	t.held = append(t.held, m)
	return data, true
}

// take handles one received message: tcp/data is decoded and appended to
// dst (which is returned) and the message held until its bytes are taken;
// tcp/eof and tcp/reset set the sticky error. Call with rmu held.
func (t *TCPConn) take(m *Message, dst []byte) []byte {
	switch m.Method {
	case rpc.MethodTCPData:
		p, out, err := bytestream.AppendMessageData(dst, m.Params, m.binary)
		if err == nil {
			var data []byte
			data, err = bytestream.Trim(p.Offset, out[len(dst):], t.recvOff)
			out = append(out[:len(dst)], data...) // a resend: drop the head
		}
		if err != nil {
			m.Release()
			t.rerr = err
			t.Reset()
			return dst
		}
		t.recvOff += bytestream.DecodedOffset(len(out) - len(dst))
		t.sub.streamRecv.Store(uint64(t.recvOff))
		if m.whole {
			// Decoded: the text is not needed any more, only its credit.
			raw := m.Raw
			m.Raw, m.Params, m.whole, m.binary = nil, nil, false, nil
			transport.RecycleRead(t.c.mc, raw)
		}
		t.held = append(t.held, m)
		return out
	case rpc.MethodTCPEOF:
		if t.rerr == nil {
			t.sub.streamEOF.Store(true)
		}
		t.rerr = io.EOF
	case rpc.MethodTCPReset:
		t.markReset()
		t.rerr = ErrTCPReset
	}
	// channel/snapshot {} and anything we do not know are dropped.
	m.Release()
	return dst
}

// releaseHeld releases the messages whose bytes were all taken.
func (t *TCPConn) releaseHeld() {
	for i, m := range t.held {
		m.Release()
		t.held[i] = nil
	}
	t.held = t.held[:0]
}

// Read reads received bytes; io.EOF after the host's tcp/eof, ErrTCPReset
// after a reset.
func (t *TCPConn) Read(p []byte) (int, error) {
	t.rmu.Lock()
	defer t.rmu.Unlock()
	data, err := t.next()
	if err != nil {
		return 0, err
	}
	n := copy(p, data)
	t.buf = data[n:]
	return n, nil
}

// tcpWriteBatch bounds the received bytes WriteTo gathers for one Write.
const tcpWriteBatch = 64 << 10

// batchBytes is the decode buffer's size (decoded bytes) unless one
// message needs more: a quarter of the stream bytes the receive window
// holds, at most tcpWriteBatch. A connection whose reader stalled keeps
// this buffer full and the rest of its window as received text; sized
// from the window, that is little for the small window such a connection
// keeps, while a bulk transfer's larger one gathers up to tcpWriteBatch.
func (t *TCPConn) batchBytes() int {
	in, _ := t.sub.Limits()
	return int(min(in.WindowBytes*3/32, tcpWriteBatch))
}

// sameArray reports whether a and b are slices of one array (they end at
// the same element of their capacity).
func sameArray(a, b []byte) bool {
	return cap(a) > 0 && cap(b) > 0 && &a[:cap(a)][cap(a)-1] == &b[:cap(b)][cap(b)-1]
}

// decodedBound is at least the bytes m's data decodes to: base64 takes 4
// characters for 3 bytes (the envelope is counted too).
func decodedBound(m *Message) int {
	if m.binary != nil {
		return len(m.binary.Data)
	}
	return len(m.Raw) / 4 * 3
}

// WriteTo writes received bytes to w until tcp/eof (nil), a reset or an
// error, releasing messages once w has taken their bytes. The messages
// already queued when one arrives go to w in the same Write (up to
// tcpWriteBatch bytes): one system call for many messages.
func (t *TCPConn) WriteTo(w io.Writer) (int64, error) {
	t.rmu.Lock()
	defer t.rmu.Unlock()
	var total int64
	for {
		data, err := t.next()
		if err == io.EOF {
			return total, nil
		}
		if err != nil {
			return total, err
		}
		// Gather what is queued behind it (data is in dbuf: appending
		// overwrites nothing still needed; a view goes out alone).
		// Only messages that fit: the buffer keeps its size.
		for t.view == nil && len(data) < tcpWriteBatch && t.rerr == nil {
			m := t.sub.q.popIf(func(m *Message) bool { return decodedBound(m) <= cap(data)-len(data) })
			if m == nil {
				break
			}
			data = t.take(m, data)
		}
		if t.view == nil && !sameArray(data, t.dbuf) {
			t.dbuf = data[:0]
		} // else keep dbuf from its start: data may begin past what a Read took
		n, err := w.Write(data)
		total += int64(n)
		t.buf = data[n:]
		if err != nil {
			return total, err
		}
	}
}

// Write sends p as tcp/data messages that each fit the host's
// maximumFrameBytes whole.
func (t *TCPConn) Write(p []byte) (int, error) {
	t.wmu.Lock()
	defer t.wmu.Unlock()
	if t.wclosed {
		return 0, fmt.Errorf("client: write after CloseWrite: %w", net.ErrClosed)
	}
	written := 0
	for len(p) > 0 {
		if t.isReset() {
			return written, ErrTCPReset
		}
		// Grow and the path's rate may change it meanwhile.
		n := t.enc.MaxPayload(t.sendOff, t.sub.FrameBytes())
		if n <= 0 {
			return written, errors.New("client: hostReceive.maximumFrameBytes too small for tcp/data")
		}
		n = min(n, len(p))
		// The binary form where the link carries it: the bytes as they
		// are, never base64 built for the transport to decode again.
		if err := t.sendLocked(t.enc.Data(t.sendOff, p[:n], t.sub.Binary()), n); err != nil {
			return written, err
		}
		written += n
		p = p[n:]
	}
	t.tuneOut()
	return written, nil
}

// sendLocked sends m, the data message carrying the next n stream bytes
// (t.wmu held), and advances the offset once it is queued.
func (t *TCPConn) sendLocked(m delivery.Message, n int) error {
	end := t.sendOff + bytestream.DecodedOffset(n)
	if err := t.sub.sendStream(t.ctx, m, end, false, true); err != nil {
		if t.isReset() {
			return ErrTCPReset
		}
		if errors.Is(err, context.Canceled) {
			return errTCPClosed
		}
		return err
	}
	t.sendOff = end
	return nil
}

// tuneOut lets the tuning grow the window of what the client sends. The
// credited total is its statistic (how fast a window's worth went by),
// not pacing: the Scheduler sends what sendStream queued as the stream's
// Room allows.
func (t *TCPConn) tuneOut() {
	if _, consumed, _ := t.sub.Window(); consumed > 0 {
		t.maybeGrow(&t.tune.out, consumed)
	}
}

// writePayload sends what ReadFrom read in place as one message, or
// through Write when it no longer fits one (the frame bound shrank).
func (t *TCPConn) writePayload(pl bytestream.Payload) (int, error) {
	t.wmu.Lock()
	n := pl.Len()
	if t.wclosed || n > t.enc.MaxPayload(t.sendOff, t.sub.FrameBytes()) {
		t.wmu.Unlock()
		defer pl.Release()
		return t.Write(pl.Bytes())
	}
	defer t.wmu.Unlock()
	if t.isReset() {
		pl.Release()
		return 0, ErrTCPReset
	}
	if err := t.sendLocked(pl.Message(t.sendOff), n); err != nil {
		return 0, err
	}
	t.tuneOut()
	return n, nil
}

// tcpReadBuffer bounds what ReadFrom reads from r at a time (one system
// call for one or more tcp/data messages): the stream bytes of one message
// at the largest maximumFrameBytes a host may allow (512 KiB UTF-16 bytes:
// 256 KiB of base64 text, 192 KiB decoded).
const tcpReadBuffer = 192 << 10

// ReadFrom copies r to the connection (io.Copy uses it), reading each
// time straight into the message that carries the bytes (no copy on the
// way to the transport). What one read may take starts at 4 KiB and, each
// time a read fills it, doubles up to one message's stream bytes at the
// host's current maximumFrameBytes (at most tcpReadBuffer), so a
// connection whose local side sends little (a download) holds little and
// a bulk upload sends whole messages.
func (t *TCPConn) ReadFrom(r io.Reader) (int64, error) {
	size := t.readBufferSize(4 << 10)
	var total int64
	for {
		pl, err := t.enc.ReadPayload(r, size, t.sub.Binary())
		n := pl.Len()
		if n == size {
			size = t.readBufferSize(2 * size)
		}
		if n > 0 {
			w, werr := t.writePayload(pl)
			total += int64(w)
			if werr != nil {
				return total, werr
			}
		}
		if err == io.EOF {
			return total, nil
		}
		if err != nil {
			return total, err
		}
	}
}

// readBufferSize is ReadFrom's next buffer size (decoded bytes) for a
// wanted one: at most one message's payload at the host's current
// maximumFrameBytes (with the longest offset), at most tcpReadBuffer.
func (t *TCPConn) readBufferSize(want int) int {
	per := t.enc.MaxPayload(bytestream.DecodedOffset(1)<<52, t.sub.FrameBytes())
	return max(4<<10, min(want, per, tcpReadBuffer))
}

// CloseWrite sends tcp/eof after everything written: the host half-closes
// its socket once it has written those bytes. Reading goes on.
func (t *TCPConn) CloseWrite() error {
	t.wmu.Lock()
	defer t.wmu.Unlock()
	if t.wclosed {
		return nil
	}
	t.wclosed = true
	if t.isReset() {
		return ErrTCPReset
	}
	eof := t.enc.EOF(t.sendOff)
	return t.sub.sendStream(t.ctx, delivery.Message{Text: eof, Size: delivery.Measure(eof)}, t.sendOff, true, false)
}

// Close ends the connection gracefully: tcp/eof if not sent yet, then,
// once the host has written every byte sent (bounded by TCPCloseLinger),
// unsubscribe, which closes the host's socket.
func (t *TCPConn) Close() error {
	t.closeOnce.Do(func() {
		if !t.isReset() {
			_ = t.CloseWrite()
			t.waitFlushed(TCPCloseLinger)
		}
		t.cancel()
		_ = t.sub.Unsubscribe()
	})
	return nil
}

// Reset aborts the connection at once: tcp/reset (a control message,
// which overtakes queued data), then unsubscribe. The host closes its
// socket with an RST.
func (t *TCPConn) Reset() {
	t.closeOnce.Do(func() {
		already := t.isReset()
		t.markReset()
		if !already {
			_ = t.c.notify(rpc.MethodTCPReset, rpc.ChannelParams{Channel: t.sub.Channel})
		}
		_ = t.sub.Unsubscribe()
	})
}

func (t *TCPConn) markReset() {
	t.mu.Lock()
	t.reset = true
	t.mu.Unlock()
	t.cancel()
}

func (t *TCPConn) isReset() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.reset
}

// waitFlushed waits until the send queue is empty and the host has
// credited everything sent, at most d; across a reconnect too (what the
// host lacks is sent again once resumed).
func (t *TCPConn) waitFlushed(d time.Duration) {
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		var changed <-chan struct{}
		if _, out := t.sub.parts(); out != nil {
			t.sub.src.mu.Lock()
			queued := len(t.sub.src.items)
			t.sub.src.mu.Unlock()
			if queued == 0 && out.Idle() {
				return
			}
			changed = out.Changed()
		} else {
			changed = t.c.resumedCh() // reconnecting
		}
		select {
		case <-changed:
		case <-timer.C:
			return
		case <-t.c.done:
			return
		case <-t.ctx.Done():
			return
		}
	}
}

// resumedCh returns a channel closed once the Conn has a link (at once
// unless it is reconnecting).
func (c *Conn) resumedCh() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ready
}

// LocalAddr returns 0.0.0.0:0 as a *net.TCPAddr (what SOCKS servers
// report as the bound address): the socket is on the host.
func (t *TCPConn) LocalAddr() net.Addr { return &net.TCPAddr{IP: net.IPv4zero} }

// RemoteAddr returns the destination (its IP when it was given as one).
func (t *TCPConn) RemoteAddr() net.Addr { return t.remote }

// SetDeadline sets the read deadline (write deadlines are not supported).
func (t *TCPConn) SetDeadline(d time.Time) error { return t.SetReadDeadline(d) }

// SetReadDeadline bounds the next Reads; it takes effect from the next
// call on.
func (t *TCPConn) SetReadDeadline(d time.Time) error {
	t.dmu.Lock()
	t.deadline = d
	t.dmu.Unlock()
	return nil
}

// SetWriteDeadline is accepted and ignored: Write blocks only while the
// host's window is full.
func (t *TCPConn) SetWriteDeadline(time.Time) error { return nil }

var _ net.Conn = (*TCPConn)(nil)
