package transport

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// KeepaliveInterval and KeepaliveTimeout: an /ahp connection (either end)
// that has read nothing for KeepaliveInterval checks on its peer: it
// pings it and waits KeepaliveTimeout for the pong. A peer that hangs
// with its TCP connection open is otherwise never noticed. The
// transport-io mappings have keepalives of their own.
//
// A pong that does not come is not enough to give up: a slow peer (its
// reader busy, its terminal flooding) cannot answer before it has read
// what was sent before the ping, and when its socket is full the ping
// cannot even be written. So where the kernel says how the TCP
// connection fares (Linux, a connection over a CorkConn), the keepalive
// tells a dead peer from a slow one by it (keepalive): seed 003, "ordinary
// slowness never causes disconnect".
const (
	KeepaliveInterval = 15 * time.Second
	KeepaliveTimeout  = 15 * time.Second
)

// keepaliveInterval and keepaliveTimeout are what both ends use (tests
// shorten them).
var keepaliveInterval, keepaliveTimeout = KeepaliveInterval, KeepaliveTimeout

// tcpState is what the kernel knows of a connection's TCP socket
// (tcpStateOf).
type tcpState struct {
	unread   int           // received, not yet read by us: SIOCINQ (plus a CorkConn's read-ahead)
	queued   int           // written, not acknowledged by the peer, sent or not: SIOCOUTQ
	inFlight int           // segments sent and not acknowledged (tcpi_unacked)
	probes   int           // window or keepalive probes unanswered (tcpi_probes)
	sinceAck time.Duration // since the peer's TCP last acknowledged anything (tcpi_last_ack_recv)
	writable bool          // a small write would not wait (POLLOUT)
}

// owes reports whether the peer's TCP owes us an acknowledgement:
// segments of ours are in flight, or two probes of its closed window (or
// TCP keepalive probes) in a row went unanswered. One is not enough: a
// receiver answers a probe with an acknowledgement it rate-limits
// (net.ipv4.tcp_invalid_ratelimit, 500 ms), and a probe lost on the way
// is sent again only after the probe timer's backoff (up to 2 min).
func (s tcpState) owes() bool { return s.inFlight > 0 || s.probes >= 2 }

// keepalive checks on the peer while nothing is read (see
// KeepaliveInterval) until Close or a check that finds it gone, which
// closes the connection: ReadMessage then says why.
//
//   - Bytes from the peer wait unread on our side: it is alive, and we
//     are the slow one (a pong would wait behind them). No ping.
//   - Otherwise it pings, when the socket takes the ping at once and no
//     message is being written (a ping waiting behind data the peer does
//     not take would only time out, and coder/websocket closes the
//     connection under a control frame whose write outlives its context:
//     the ping's timeout, or 5 s), and waits timeout for the pong. A
//     ping whose pong does not come while bytes from the peer were read
//     since it was sent proves the peer alive all the same (a peer
//     answers a ping only when its socket takes the pong at once, and
//     not while it writes a message: answerPing).
//   - Meanwhile, and while the peer does not answer, the peer's TCP
//     decides. One that stopped acknowledging (silent) is gone: a live
//     peer's kernel acknowledges whether its program reads or not (a
//     full receive window answers each probe), a black hole (a laptop
//     asleep, a dead route, a host gone) acknowledges nothing. One that
//     acknowledges but has not taken what we wrote (its receive window
//     is full: it is slow), or whose bytes wait for us, is alive: the
//     write timeout for answers (delivery.write_timeout, 4008) governs
//     it, not the keepalive.
//   - A peer that acknowledges, has taken everything and does not
//     answer: the host keeps it (a reader busy with what it already
//     received looks just so); a client takes the host for gone and
//     reconnects (a middlebox or a relay that stalled acknowledges for
//     the host).
//
// Without the kernel's word (another system, a connection not over a
// CorkConn) a ping unanswered within timeout, with nothing read since, is
// a peer gone, as ever.
func (w *wsConn) keepalive(interval, timeout time.Duration) {
	t := time.NewTicker(min(interval, timeout) / 4)
	defer t.Stop()
	var pong chan error    // the ping out's result; nil when none is out
	var pingSent time.Time // when the ping out (or the last one) was sent
	noPong := fmt.Errorf("the peer stopped answering: no pong within %s of a ping (nothing read for %s)", timeout, interval)
	for {
		unanswered := false // a ping's wait just ended without a pong
		select {
		case <-w.done:
			return
		case err := <-pong:
			pong = nil
			if err == nil {
				w.lastRead.Store(time.Now().UnixNano())
				continue
			}
			unanswered = true
			if w.idle() < time.Since(pingSent) {
				// Read from the peer since the ping: alive, whatever
				// became of its pong (one the peer could not write at
				// once, answerPing, is never sent).
				continue
			}
		case <-t.C:
			if pong == nil && w.idle() < interval {
				w.owedSince = time.Time{}
				continue
			}
		}
		lost := noPong
		st, known := w.tcp()
		switch {
		case !known && unanswered:
		case !known:
			if pong == nil {
				pingSent = time.Now()
				pong = w.ping(timeout)
			}
			continue
		case w.silent(st, timeout):
			lost = fmt.Errorf("the peer stopped answering: its TCP acknowledged nothing for %s (nothing read for %s)", st.sinceAck.Round(time.Millisecond), interval)
		case pong != nil:
			continue // waiting for the pong
		case st.unread > 0:
			w.slow.Add(1)
			continue
		case unanswered:
			if st.queued == 0 && !w.hostEnd {
				break // lost
			}
			w.slow.Add(1)
			continue
		case st.writable && w.lockWritable():
			if w.owedSince.IsZero() {
				w.owedSince = time.Now() // the ping leaves at once: owed from now
			}
			pingSent = time.Now()
			pong = w.pingNow(timeout)
			continue
		default: // the socket is full: the peer has not taken what we wrote
			w.slow.Add(1)
			continue
		}
		select {
		case <-w.done:
			return
		default:
		}
		w.lost.Store(&lost)
		_ = w.c.CloseNow()
		return
	}
}

// ping sends a ping; its result (nil: the pong came; else why not) comes
// on the channel once the pong came, the connection closed or timeout
// passed. The ping's context bounds its write too, and coder/websocket
// closes the connection under a write that its context outlives: so that
// a ping written late (a busy machine, a message's write before it) is
// not taken for a dead peer, the write gets controlWriteBound at least
// (the library's own bound for a control frame), however short the wait
// for the pong. The ping's goroutine ends with the pong, the connection,
// or that context.
func (w *wsConn) ping(timeout time.Duration) chan error {
	res := make(chan error, 2) // the ping's result and the timer's
	late := time.AfterFunc(timeout, func() { res <- errNoPong })
	ctx, cancel := context.WithTimeout(context.Background(), max(timeout, controlWriteBound))
	go func() {
		defer cancel()
		err := w.c.Ping(ctx)
		late.Stop()
		res <- err
	}()
	return res
}

// controlWriteBound is how long coder/websocket lets a control frame's
// write take (a ping, a pong, a close) before it closes the connection.
const controlWriteBound = 5 * time.Second

// errNoPong is a ping's result when its timeout passed first.
var errNoPong = errors.New("no pong in time")

// pingNow sends a ping as ping does, with w.wmu held by the caller
// (lockWritable), which it releases once the ping frame has reached the
// socket: no message's write can come between the look that found the
// socket writable and the ping, so the ping's write does not wait.
func (w *wsConn) pingNow(timeout time.Duration) chan error {
	res := w.ping(timeout)
	w.unlockOnWrite(timeout, res)
	return res
}

// lockWritable takes w.wmu, when no message is being written, and keeps
// it when the socket (known: w.cork) takes a small write at once; it
// reports whether it holds it. The caller writes a control frame and
// releases it with unlockOnWrite.
func (w *wsConn) lockWritable() bool {
	if !w.wmu.TryLock() {
		return false
	}
	if st, ok := tcpStateOf(w.cork.Conn); !ok || !st.writable {
		w.wmu.Unlock()
		return false
	}
	select {
	case <-w.cork.wrote: // an earlier write's token
	default:
	}
	return true
}

// unlockOnWrite releases w.wmu once a write has reached the socket (the
// control frame the holder of lockWritable writes), the frame's write
// ended (res: a ping's result, kept for its reader; nil for a pong), the
// connection closed, or bound passed.
func (w *wsConn) unlockOnWrite(bound time.Duration, res chan error) {
	defer w.wmu.Unlock()
	t := time.NewTimer(bound)
	defer t.Stop()
	select {
	case <-w.cork.wrote:
	case err := <-res:
		res <- err
	case <-w.done:
	case <-t.C:
	}
}

// silent notes, at each look at the socket, since when the peer's TCP
// has owed an acknowledgement and given none (owedSince), and reports
// whether that is timeout already. An acknowledgement seen after that
// moment starts it again: a peer whose kernel answers, however slowly
// its window opens, is never silent.
func (w *wsConn) silent(st tcpState, timeout time.Duration) bool {
	now := time.Now()
	if !st.owes() {
		w.owedSince = time.Time{}
		return false
	}
	// The kernel counts in jiffies (up to 10 ms): an acknowledgement
	// that close to owedSince counts as after it.
	const slack = 10 * time.Millisecond
	if w.owedSince.IsZero() || now.Add(-st.sinceAck).Add(slack).After(w.owedSince) {
		w.owedSince = now
		return false
	}
	return now.Sub(w.owedSince) >= timeout
}

// idle is how long nothing was read: no message, and no bytes from the
// socket (bytes arriving are a live peer, however long its message).
func (w *wsConn) idle() time.Duration {
	last := time.Unix(0, w.lastRead.Load())
	if w.cork != nil {
		if t, _ := w.cork.readState(); t.After(last) {
			last = t
		}
	}
	return time.Since(last)
}

// tcp returns what the kernel knows of the connection's socket, when it
// says (a CorkConn over TCP, on Linux).
func (w *wsConn) tcp() (tcpState, bool) {
	if w.cork == nil {
		return tcpState{}, false
	}
	st, ok := tcpStateOf(w.cork.Conn)
	if ok {
		_, buffered := w.cork.readState()
		st.unread += buffered
	}
	return st, ok
}

// answerPing is the connection's OnPingReceived: the library writes the
// pong only when the socket takes it at once, and no message is being
// written (lockWritable; released once the pong leaves). A pong that
// waits behind data the peer does not take fails the read after 5 s
// (coder/websocket bounds a control frame's write so), which would end a
// connection to a slow peer; the peer's keepalive instead finds it alive
// by its TCP.
func (w *wsConn) answerPing(context.Context, []byte) bool {
	if w.cork == nil {
		return true
	}
	if _, known := tcpStateOf(w.cork.Conn); !known {
		return true
	}
	if !w.lockWritable() {
		return false
	}
	go w.unlockOnWrite(controlWriteBound, nil)
	return true
}
