package host

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	tcpadapter "github.com/sidecar-dev/sidecar/adapters/tcp"
	"github.com/sidecar-dev/sidecar/delivery"
	"github.com/sidecar-dev/sidecar/internal/bufpool"
	"github.com/sidecar-dev/sidecar/rpc"
)

// TCP channel bounds.
const (
	// tcpSubscribeLease is how long a created TCP connection waits for its
	// creator's windowed subscription; past it the socket is closed and the
	// URI freed (ahp.md §6b: bound the unsubscribed lifetime). Nothing is
	// read from the socket before the subscription.
	tcpSubscribeLease = 10 * time.Second
	// maxTCPID bounds the id part of an ahp-tcp: URI, so that a tcp/data
	// envelope always leaves room for data within a 1024-byte frame.
	maxTCPID = 128
	// maxTCPHost bounds the host of createTcpConnection (a DNS name is at
	// most 253 characters).
	maxTCPHost = 253
	// portsInterval is how often the listening ports are read.
	portsInterval = 3 * time.Second
)

// tcpScheme prefixes TCP channel URIs: ahp-tcp:/<id>.
const tcpScheme = "ahp-tcp:"

// tcpState is the server's TCP channel state: every open connection by
// URI, the dialer with the destination policy, and the listening ports.
type tcpState struct {
	dialer *tcpadapter.Dialer
	stop   chan struct{} // closed by shutdownTCP: ends the ports loop

	mu    sync.Mutex
	conns map[string]*tcpConn

	failLog openFailLog // createTcpConnection failures, rate-limited

	// ports is RootState.ports, guarded by the root's lock.
	ports []rpc.ListeningPort
}

func (s *Server) initTCP() {
	pol, err := tcpadapter.NewPolicy(s.cfg.TCP.Allow)
	if err != nil { // config.Load validated it; a hand-built config may not be
		s.log.Error("tcp.allow is invalid; every destination is refused", "error", err)
		pol, _ = tcpadapter.NewPolicy(nil)
	}
	s.tcp.dialer = &tcpadapter.Dialer{Policy: pol, Timeout: s.cfg.TCP.DialTimeout}
	s.tcp.conns = map[string]*tcpConn{}
	s.tcp.stop = make(chan struct{})
	s.wg.Add(1)
	go s.portsLoop()
}

// shutdownTCP stops the ports loop and closes every TCP connection.
func (s *Server) shutdownTCP() {
	s.tcp.failLog.stop(s.log.Info)
	s.tcp.mu.Lock()
	select {
	case <-s.tcp.stop:
	default:
		close(s.tcp.stop)
	}
	conns := make([]*tcpConn, 0, len(s.tcp.conns))
	for _, tc := range s.tcp.conns {
		conns = append(conns, tc)
	}
	s.tcp.mu.Unlock()
	for _, tc := range conns {
		tc.close("server shutting down")
	}
}

// tcpCapability is InitializeResult.tcpConnections: {} when TCP channels
// are offered, nil otherwise.
func (s *Server) tcpCapability() *struct{} { return &struct{}{} }

// tcpChannel returns the ahp-tcp: channel named uri, or nil.
func (s *Server) tcpChannel(uri string) channel {
	s.tcp.mu.Lock()
	defer s.tcp.mu.Unlock()
	if tc := s.tcp.conns[uri]; tc != nil && tc.sock != nil {
		return tc
	}
	return nil
}

// closeTCP closes every TCP connection created on c (the connection has
// ended: TCP channels are not resumable).
func (c *conn) closeTCP() {
	s := c.s
	s.tcp.mu.Lock()
	var mine []*tcpConn
	for _, tc := range s.tcp.conns {
		if tc.owner == c {
			mine = append(mine, tc)
		}
	}
	s.tcp.mu.Unlock()
	for _, tc := range mine {
		tc.close("client connection closed")
	}
}

// createTCPConnection is the TCP channel's createTcpConnection: check the
// limits, reserve the URI, resolve and dial under the policy. A failure is
// logged here, once: a destination the policy refuses at warn (someone
// tried to reach what they may not: a metadata address, another host),
// any other at info, with the system's own error as "cause".
func (c *conn) createTCPConnection(params json.RawMessage) (any, *rpc.Error) {
	r, e, dialErr := c.openTCP(params)
	if e != nil {
		log := c.log.Info
		if dialErr != nil && e.Code == rpc.CodePermissionDenied {
			log = c.log.Warn
		}
		if !c.s.tcp.failLog.first(c.id(), e.Code, log) {
			return r, e // counted: said once the window ends
		}
		args := []any{"client", c.id(), "code", e.Code, "error", e.Message}
		if cause := errors.Unwrap(dialErr); cause != nil {
			args = append(args, "cause", cause)
		}
		log("createTcpConnection failed", args...)
	}
	return r, e
}

// openFailWindow is how long the createTcpConnection failures of one
// client with one code that follow a logged one are only counted.
const openFailWindow = time.Second

// openFailLog keeps a client's failed createTcpConnection calls from
// flooding the log (a burst past tcp.max_per_client, a scan of refused
// ports): per client and error code, the first failure is logged with
// its message, the ones in the openFailWindow after it only counted, and
// the count logged when the window ends ("N more like it"): at most two
// lines a second per client and code. Its entries last a window each.
type openFailLog struct {
	window time.Duration // 0: openFailWindow

	mu      sync.Mutex
	windows map[openFailKey]*openFailCount
	stopped bool
}

type openFailKey struct {
	client string
	code   int64
}

type openFailCount struct {
	n     int
	timer *time.Timer
}

// first reports whether a failure of client with code is to be logged in
// full: yes unless one was within openFailWindow, in which case it is
// counted, and log gets the count when the window ends.
func (l *openFailLog) first(client string, code int64, log func(string, ...any)) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopped {
		return true
	}
	k := openFailKey{client, code}
	if w, ok := l.windows[k]; ok {
		w.n++
		return false
	}
	if l.windows == nil {
		l.windows = map[openFailKey]*openFailCount{}
	}
	window := cmp.Or(l.window, openFailWindow)
	w := &openFailCount{}
	w.timer = time.AfterFunc(window, func() {
		l.mu.Lock()
		n := w.n
		if l.windows[k] == w {
			delete(l.windows, k)
		}
		l.mu.Unlock()
		if n > 0 {
			log("createTcpConnection failed more times", "client", client, "code", code, "count", n, "within", window.String())
		}
	})
	l.windows[k] = w
	return true
}

// stop ends the windows at shutdown, logging their counts now.
func (l *openFailLog) stop(log func(string, ...any)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stopped = true
	for k, w := range l.windows {
		if w.timer.Stop() && w.n > 0 {
			log("createTcpConnection failed more times", "client", k.client, "code", k.code, "count", w.n)
		}
		delete(l.windows, k)
	}
}

// openTCP does createTCPConnection's work; dialErr is the dial's error
// (nil for a failure before dialing).
func (c *conn) openTCP(params json.RawMessage) (_ any, _ *rpc.Error, dialErr error) {
	var p tcpadapter.CreateParams
	if e := rpc.DecodeParams(params, &p); e != nil {
		return nil, e, nil
	}
	id, ok := strings.CutPrefix(p.Channel, tcpScheme+"/")
	if !ok || id == "" || len(id) > maxTCPID || strings.IndexFunc(id, func(r rune) bool { return r <= ' ' || r == 0x7f }) >= 0 {
		return nil, rpc.Errorf(rpc.CodeInvalidParams, `invalid params: "channel" must be ahp-tcp:/<id> (id of 1-%d characters without spaces)`, maxTCPID), nil
	}
	host := p.Host
	if host == "" {
		return nil, rpc.Missing("host"), nil
	}
	if len(host) > maxTCPHost || strings.ContainsAny(host, "/ \t\r\n@?#") {
		return nil, rpc.Errorf(rpc.CodeInvalidParams, `invalid params: "host" must be a DNS name or an IP address, not a URL`), nil
	}
	if p.Port == nil {
		return nil, rpc.Missing("port"), nil
	}
	if *p.Port < 1 || *p.Port > 65535 {
		return nil, rpc.Errorf(rpc.CodeInvalidParams, `invalid params: "port" must be between 1 and 65535`), nil
	}
	s := c.s
	cfg := s.cfg.TCP
	clientID := c.id()
	s.mu.Lock()
	closing := s.closing
	s.mu.Unlock()
	if closing {
		return nil, rpc.Errorf(rpc.CodeInternalError, "server is shutting down"), nil
	}
	s.tcp.mu.Lock()
	if _, exists := s.tcp.conns[p.Channel]; exists {
		s.tcp.mu.Unlock()
		return nil, rpc.Errorf(rpc.CodeAlreadyExists, "TCP connection already exists: %s", p.Channel), nil
	}
	total, mine := 0, 0
	for _, tc := range s.tcp.conns {
		total++
		if tc.clientID == clientID {
			mine++
		}
	}
	if total >= cfg.MaxTotal {
		s.tcp.mu.Unlock()
		return nil, rpc.Errorf(rpc.CodePermissionDenied, "TCP connection limit reached: %d open on this host (tcp.max_total); close one first", cfg.MaxTotal), nil
	}
	if mine >= cfg.MaxPerClient {
		s.tcp.mu.Unlock()
		return nil, rpc.Errorf(rpc.CodePermissionDenied, "TCP connection limit reached: %d open for this client (tcp.max_per_client); close one first", cfg.MaxPerClient), nil
	}
	tc := &tcpConn{
		s: s, id: p.Channel, owner: c, clientID: clientID,
		enc:    tcpadapter.NewEncoder(p.Channel),
		log:    s.log.Named("tcp").With("channel", p.Channel, "client", clientID),
		closed: make(chan struct{}),
		wake:   make(chan struct{}, 1),
		wqWake: make(chan struct{}, 1),
	}
	// Reserve the URI while dialing (outside the lock).
	s.tcp.conns[p.Channel] = tc
	s.tcp.mu.Unlock()

	ctx := c.ctx
	if ctx == nil {
		ctx = context.Background()
	}
	sock, err := s.tcp.dialer.Dial(ctx, host, *p.Port)
	if err != nil {
		s.tcp.mu.Lock()
		delete(s.tcp.conns, p.Channel)
		s.tcp.mu.Unlock()
		code := int64(rpc.CodeTCPConnectionOpenFailed)
		var oe *tcpadapter.OpenError
		if errors.As(err, &oe) && oe.Kind == tcpadapter.KindDenied {
			code = rpc.CodePermissionDenied
		}
		return nil, rpc.Errorf(code, "%s", err.Error()), err
	}
	// The connection may have ended (or the server begun to shut down)
	// while we dialed: then nobody will subscribe.
	s.mu.Lock()
	closing = s.closing
	s.mu.Unlock()
	tc.mu.Lock()
	gone := tc.isClosed || closing || c.ctx != nil && c.ctx.Err() != nil
	if !gone {
		s.tcp.mu.Lock()
		tc.sock = sock
		s.tcp.mu.Unlock()
		tc.lease = time.AfterFunc(tcpSubscribeLease, func() {
			tc.mu.Lock()
			subscribed := tc.sub != nil
			tc.mu.Unlock()
			if !subscribed {
				tc.close("not subscribed within " + tcpSubscribeLease.String())
			}
		})
	}
	tc.mu.Unlock()
	if gone {
		_ = sock.Close()
		tc.close("client connection closed while dialing")
		return nil, rpc.Errorf(rpc.CodeInternalError, "connection closed while dialing"), nil
	}
	tc.log.Debug("TCP connection opened", "host", host, "port", *p.Port, "remote", sock.RemoteAddr().String())
	s.wg.Add(2)
	go tc.readLoop()
	go tc.writeLoop()
	return nil, nil, nil
}

// tcpConn is one ahp-tcp:/<id> channel and its socket. It belongs to the
// connection that created it; only that connection's windowed subscription
// moves data.
//
// Socket to client: readLoop reads only when the subscription can start a
// message and every message read before was pulled, at most what the
// window's remaining credit lets out (and tcpReadAhead bytes), so a client
// that stops crediting stops the socket after one window; the Source hands
// the messages to the scheduler one by one. Client to socket: clientData
// queues decoded bytes (bounded by hostReceive's window) for writeLoop,
// which releases each message's credit once the socket took its bytes.
type tcpConn struct {
	s        *Server
	id       string // the channel URI
	owner    *conn
	clientID string
	enc      *tcpadapter.Encoder
	log      hclog.Logger
	sock     *net.TCPConn // nil while dialing; set under s.tcp.mu and tc.mu

	closeOnce sync.Once
	closed    chan struct{} // closed when the connection is closed or reset
	wake      chan struct{} // 1-slot: the reader may proceed (attached, slot taken)
	wqWake    chan struct{} // 1-slot: the write queue has items

	mu    sync.Mutex
	lease *time.Timer   // closes the connection if nobody subscribes
	sub   *subscription // the creator's windowed subscription
	// Socket to client.
	slots     []tcpSlot                // the next tcp/data messages, read but not yet pulled
	slotBytes delivery.UTF16Bytes      // their total size
	readOff   tcpadapter.DecodedOffset // bytes read from the socket
	eofRead   bool                     // the socket reached EOF: tcp/eof is due after slots
	eofSent   bool
	isClosed  bool
	// Client to socket.
	wq      []tcpWrite
	recvOff tcpadapter.DecodedOffset // bytes accepted from the client
	eofRecv bool                     // tcp/eof received: no more data
}

// tcpWrite is one queued client message: bytes to write (or the
// half-close, eof) and the release that credits its size once done.
type tcpWrite struct {
	data    []byte
	buf     []byte // data's buffer, back to tcpBufs once written
	eof     bool
	release func()
}

// tcpBufs recycles the buffers readLoop reads the socket into and those
// client tcp/data is decoded into (one per message, from clientData until
// writeLoop has written it). At most 8 are kept (bufpool: bounded).
var tcpBufs = bufpool.New(8, 16<<10, 1<<20)

func (tc *tcpConn) uri() string { return tc.id }

// lockedSnapshot implements channel: a TCP channel's state is empty.
func (tc *tcpConn) lockedSnapshot(fn func(rpc.Snapshot)) {
	fn(rpc.Snapshot{Resource: tc.id, State: json.RawMessage(`{}`), FromSeq: tc.s.journal.Seq()})
}

func (tc *tcpConn) windowedOnly() {}

// newSource implements sourceChannel: channel/snapshot {} first, then the
// socket's bytes and tcp/eof.
func (tc *tcpConn) newSource(sub *subscription) delivery.Source {
	text, _ := snapshotNotification(tc)
	return &tcpSource{tc: tc, sub: sub, snap: text}
}

// attach implements attachable: the creator's subscription starts the
// socket; anybody else's is answered with tcp/reset (only the creating
// client and transport may use a TCP channel).
func (tc *tcpConn) attach(sub *subscription) {
	if sub.c != tc.owner || !sub.windowed() {
		tc.log.Warn("subscription from another connection refused", "client", sub.c.id())
		if err := sub.c.sched.PushControl(tc.enc.Reset()); err != nil {
			go sub.c.fail(err)
		}
		return
	}
	tc.mu.Lock()
	if tc.sub == nil && !tc.isClosed {
		tc.sub = sub
	}
	lease := tc.lease
	tc.mu.Unlock()
	if lease != nil {
		lease.Stop()
	}
	signal(tc.wake)
}

// ownedBy implements ownedChannel.
func (tc *tcpConn) ownedBy(c *conn) bool { return tc.owner == c }

// releaseUnsubscribed implements unsubscribeReleaser: unsubscribe before
// any subscribe releases the socket at once (ahp.md §6b).
func (tc *tcpConn) releaseUnsubscribed(c *conn) {
	if tc.owner == c {
		tc.close("unsubscribed")
	}
}

// detach implements attachable: unsubscribe (or the connection's end)
// closes the socket.
func (tc *tcpConn) detach(sub *subscription) {
	tc.mu.Lock()
	mine := tc.sub == sub
	tc.mu.Unlock()
	if mine {
		reason := "unsubscribed"
		if sub.c.ctx != nil && sub.c.ctx.Err() != nil {
			reason = "client connection closed"
		}
		tc.close(reason)
	}
}

// clientData implements dataHandler: tcp/data and tcp/eof from the
// creator, in order, to the writer.
func (tc *tcpConn) clientData(sub *subscription, h *rpc.Header, release func()) {
	tc.mu.Lock()
	if sub != tc.sub || tc.isClosed {
		tc.mu.Unlock()
		release()
		return
	}
	tc.mu.Unlock()
	switch h.Method {
	case rpc.MethodTCPData:
		p, data, err := tcpadapter.AppendData(tcpBufs.Get(16<<10), h.Params)
		buf := data[:0] // the buffer, grown if it had to
		if err != nil {
			tcpBufs.Put(buf)
			release()
			tc.abort(err.Error(), true)
			return
		}
		tc.mu.Lock()
		if tc.eofRecv {
			tc.mu.Unlock()
			tcpBufs.Put(buf)
			release()
			tc.abort("protocol error: tcp/data after tcp/eof", true)
			return
		}
		data, err = tcpadapter.Trim(p.Offset, data, tc.recvOff)
		if err != nil {
			tc.mu.Unlock()
			tcpBufs.Put(buf)
			release()
			tc.abort(err.Error(), true)
			return
		}
		if len(data) == 0 { // a resend of bytes already taken
			tc.mu.Unlock()
			tcpBufs.Put(buf)
			release()
			return
		}
		tc.recvOff += tcpadapter.DecodedOffset(len(data))
		tc.wq = append(tc.wq, tcpWrite{data: data, buf: buf, release: release})
		tc.mu.Unlock()
		signal(tc.wqWake)
	case rpc.MethodTCPEOF:
		p, err := tcpadapter.ParseEOF(h.Params)
		tc.mu.Lock()
		switch {
		case err != nil:
		case tc.eofRecv:
			err = errors.New("protocol error: a second tcp/eof")
		case p.Offset != nil && *p.Offset != tc.recvOff:
			err = errors.New("protocol error: tcp/eof offset does not match the bytes received")
		}
		if err != nil {
			tc.mu.Unlock()
			release()
			tc.abort(err.Error(), true)
			return
		}
		tc.eofRecv = true
		tc.wq = append(tc.wq, tcpWrite{eof: true, release: release})
		tc.mu.Unlock()
		signal(tc.wqWake)
	default:
		release()
	}
}

// clientControl implements controlHandler: tcp/reset aborts at once.
func (tc *tcpConn) clientControl(sub *subscription, h *rpc.Header) {
	tc.mu.Lock()
	mine := sub == tc.sub
	tc.mu.Unlock()
	if mine && h.Method == rpc.MethodTCPReset {
		tc.abort("reset by the client", false)
	}
}

// tcpReadAhead bounds one socket read: up to this many bytes, cut into
// tcp/data messages, and never more than the window's remaining credit
// lets out (so one read is one system call for one or more messages, and
// a client that stops crediting still stops the socket after one window).
// 192 KiB is one message at the largest maximumFrameBytes (512 KiB UTF-16
// bytes: 256 KiB of base64 text).
const tcpReadAhead = 192 << 10

// tcpQueued bounds the tcp/data read from the socket but not yet pulled
// by the scheduler (UTF-16 bytes): two reads' worth, so the next read
// overlaps the sending of the previous one instead of waiting for it.
const tcpQueued = 2 * 2 * tcpReadAhead * 4 / 3

// readLoop reads the socket while the subscription's window has room for
// more than what is already read and queued (and the queue is below
// tcpQueued): the bytes read ahead are always within the credit.
func (tc *tcpConn) readLoop() {
	defer tc.s.wg.Done()
	for {
		sub, room, ok := tc.waitReadable()
		if !ok {
			return
		}
		_, _, lim := sub.out.Window()
		tc.mu.Lock()
		off := tc.readOff
		tc.mu.Unlock()
		per := tc.enc.MaxPayload(off, lim.MaximumFrameBytes)
		if per <= 0 {
			tc.abort("maximumFrameBytes too small for tcp/data", true)
			return
		}
		n := tcpReadSize(per, delivery.UTF16Bytes(2*tc.enc.DataLen(off, per)), room)
		// The buffer is held only while reading: a connection whose window
		// is full keeps none.
		buf := tcpBufs.Get(n)[:n]
		nr, err := tc.sock.Read(buf)
		if nr > 0 {
			var msgs []tcpSlot
			var total delivery.UTF16Bytes
			for p, o := buf[:nr], off; len(p) > 0; {
				k := min(len(p), tc.enc.MaxPayload(o, lim.MaximumFrameBytes))
				text := tc.enc.AppendData(tcpadapter.Buffer(tc.enc.DataLen(o, k)), o, p[:k])
				size := tc.enc.DataSize(len(text))
				msgs = append(msgs, tcpSlot{text: text, size: size})
				total += size
				o += tcpadapter.DecodedOffset(k)
				p = p[k:]
			}
			tcpBufs.Put(buf)
			tc.mu.Lock()
			if tc.isClosed {
				tc.mu.Unlock()
				return
			}
			tc.slots = append(tc.slots, msgs...)
			tc.slotBytes += total
			tc.readOff += tcpadapter.DecodedOffset(nr)
			tc.mu.Unlock()
			sub.out.Wake()
		}
		if nr <= 0 {
			tcpBufs.Put(buf)
		}
		if errors.Is(err, io.EOF) {
			tc.mu.Lock()
			tc.eofRead = true
			tc.mu.Unlock()
			sub.out.Wake()
			return
		}
		if err != nil {
			tc.abort("socket read failed: "+err.Error(), true)
			return
		}
	}
}

// tcpSlot is one tcp/data message read ahead and its size.
type tcpSlot struct {
	text []byte
	size delivery.UTF16Bytes
}

// tcpReadSize is how many bytes one socket read may take: whole messages
// of per bytes (each at most size UTF-16 bytes) while the window's
// remaining credit (room) lets them start, at least one, at most
// tcpReadAhead bytes.
func tcpReadSize(per int, size, room delivery.UTF16Bytes) int {
	msgs := 1
	if room > size {
		msgs = int((room + size - 1) / size) // the last may start below the window
	}
	return max(per, min(msgs*per, tcpReadAhead/per*per))
}

// waitReadable blocks until the reader may read, and returns the credit
// left once the messages already queued are counted; false once closed.
func (tc *tcpConn) waitReadable() (*subscription, delivery.UTF16Bytes, bool) {
	for {
		tc.mu.Lock()
		sub, queued, closed := tc.sub, tc.slotBytes, tc.isClosed
		tc.mu.Unlock()
		if closed {
			return nil, 0, false
		}
		var changed <-chan struct{}
		if sub != nil {
			sent, consumed, lim := sub.out.Window()
			room := lim.WindowBytes - (sent - consumed) - queued
			if room > 0 && queued < tcpQueued {
				return sub, room, true
			}
			changed = sub.out.Changed()
		}
		select {
		case <-changed:
		case <-tc.wake:
		case <-tc.closed:
			return nil, 0, false
		}
	}
}

// writeLoop writes client bytes to the socket in order, one writer per
// connection, and credits each message once the socket took it. The data
// messages queued together go out in one writev.
func (tc *tcpConn) writeLoop() {
	defer tc.s.wg.Done()
	var batch []tcpWrite
	var bufs net.Buffers
	for {
		select {
		case <-tc.wqWake:
		case <-tc.closed:
			return
		}
		for {
			tc.mu.Lock()
			if len(tc.wq) == 0 || tc.isClosed {
				tc.mu.Unlock()
				break
			}
			n := 0
			for n < len(tc.wq) && !tc.wq[n].eof {
				n++
			}
			if n == 0 { // the half-close, after everything before it
				w := tc.wq[0]
				tc.wq[0] = tcpWrite{}
				tc.wq = tc.wq[1:]
				tc.mu.Unlock()
				err := tc.sock.CloseWrite()
				w.release()
				if err != nil {
					tc.abort("half-close failed: "+err.Error(), true)
				}
				return
			}
			batch = append(batch[:0], tc.wq[:n]...)
			clear(tc.wq[:n])
			tc.wq = tc.wq[n:]
			tc.mu.Unlock()
			bufs = bufs[:0]
			for _, w := range batch {
				bufs = append(bufs, w.data)
			}
			all := bufs // WriteTo consumes bufs
			_, err := all.WriteTo(tc.sock)
			clear(bufs[:cap(bufs)])
			for i, w := range batch {
				w.release()
				tcpBufs.Put(w.buf)
				batch[i] = tcpWrite{}
			}
			if err != nil {
				tc.abort("socket write failed: "+err.Error(), true)
				return
			}
		}
	}
}

// close closes the connection (unsubscribe, the client's connection
// ended, the lease expired, shutdown) and frees its URI: gracefully once
// the client ended its direction with tcp/eof, else with an RST, so the
// destination never takes a stream cut short (the client gone mid-upload)
// for a complete one.
func (tc *tcpConn) close(reason string) {
	tc.mu.Lock()
	ended := tc.eofRecv
	tc.mu.Unlock()
	tc.end(reason, !ended, false)
}

// abort resets the connection at once: the socket is closed with an RST
// (SO_LINGER 0), queued bytes are dropped, and with tell the client gets
// tcp/reset.
func (tc *tcpConn) abort(reason string, tell bool) { tc.end(reason, true, tell) }

func (tc *tcpConn) end(reason string, reset, tell bool) {
	tc.mu.Lock()
	if tc.isClosed {
		tc.mu.Unlock()
		return
	}
	tc.isClosed = true
	sub := tc.sub
	wq := tc.wq
	lease := tc.lease
	tc.wq, tc.slots = nil, nil
	tc.mu.Unlock()
	tc.closeOnce.Do(func() { close(tc.closed) })
	if lease != nil {
		lease.Stop()
	}
	for _, w := range wq {
		w.release()
	}
	s := tc.s
	s.tcp.mu.Lock()
	if s.tcp.conns[tc.id] == tc {
		delete(s.tcp.conns, tc.id)
	}
	sock := tc.sock
	s.tcp.mu.Unlock()
	if sock != nil {
		if reset {
			_ = sock.SetLinger(0)
		}
		_ = sock.Close()
	}
	if reset { // routine (clients and destinations reset all the time): debug
		tc.log.Debug("TCP connection reset", "reason", reason)
	} else {
		tc.log.Debug("TCP connection closed", "reason", reason)
	}
	if tell && sub != nil {
		if err := sub.c.sched.PushControl(tc.enc.Reset()); err != nil && !errors.Is(err, delivery.ErrClosed) {
			go sub.c.fail(err)
		}
	}
	if sub != nil {
		sub.out.Wake()
	}
}

// tcpSource is the delivery.Source of a TCP subscription.
type tcpSource struct {
	tc   *tcpConn
	sub  *subscription
	snap []byte // channel/snapshot, sent first
}

// NextSized implements delivery.SizedSource (writer goroutine; never
// blocks): the snapshot, then the tcp/data read ahead, then tcp/eof.
func (src *tcpSource) NextSized() ([]byte, delivery.UTF16Bytes) {
	if src.snap != nil {
		t := src.snap
		src.snap = nil
		return t, delivery.Measure(t)
	}
	tc := src.tc
	tc.mu.Lock()
	defer tc.mu.Unlock()
	if tc.sub != src.sub || tc.isClosed {
		return nil, 0
	}
	if len(tc.slots) > 0 {
		t := tc.slots[0]
		tc.slots[0] = tcpSlot{}
		tc.slots = tc.slots[1:]
		tc.slotBytes -= t.size
		signal(tc.wake)
		return t.text, t.size
	}
	if tc.eofRead && !tc.eofSent {
		tc.eofSent = true
		eof := tc.enc.EOF(tc.readOff)
		return eof, delivery.Measure(eof)
	}
	return nil, 0
}

// Recycle implements delivery.Recycler: tcp/data buffers go back to the
// pool once written (the snapshot and tcp/eof are too small to keep).
func (src *tcpSource) Recycle(text []byte) { tcpadapter.Recycle(text) }

// Next implements delivery.Source.
func (src *tcpSource) Next() []byte {
	t, _ := src.NextSized()
	return t
}

// signal is a non-blocking send on a 1-slot channel.
func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// portsLoop reads the listening ports every portsInterval and publishes
// changes as root/portsChanged.
func (s *Server) portsLoop() {
	defer s.wg.Done()
	t := time.NewTicker(portsInterval)
	defer t.Stop()
	logged := false
	for {
		ctx, cancel := context.WithTimeout(context.Background(), portsInterval)
		ports, err := tcpadapter.ListeningPorts(ctx)
		cancel()
		switch {
		case err != nil && !logged:
			s.log.Warn("cannot read the listening ports; RootState.ports stays as it is", "error", err)
			logged = true
		case err == nil:
			s.root.setPorts(ports)
		}
		select {
		case <-t.C:
		case <-s.tcp.stop:
			return
		}
	}
}

// setPorts replaces RootState.ports and, when it changed, dispatches
// root/portsChanged with the full list.
func (r *root) setPorts(ports []rpc.ListeningPort) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.s.tcp.ports != nil && slices.Equal(r.s.tcp.ports, ports) {
		return
	}
	r.s.tcp.ports = ports
	action := rpc.RootPortsAction{Type: rpc.ActionRootPorts, Ports: ports}
	_, _ = r.s.journal.Append(rpc.RootChannel, hostAction(rpc.RootChannel, action))
}

// portsLocked returns RootState.ports (call with r.mu held), for the
// root's snapshot.
func (r *root) portsLocked() []rpc.ListeningPort { return r.s.tcp.ports }
