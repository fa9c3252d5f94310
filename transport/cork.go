package transport

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sidecar-dev/sidecar/internal/bufpool"
)

// CorkConn is a net.Conn whose writes can be held back and sent together:
// between Cork and Uncork, Write appends to a buffer, and Uncork sends it
// in one system call. It sits under TLS, so that a WebSocket message
// (which coder/websocket hands to TLS in 4 KiB pieces through its bufio
// writer, one TLS record and one write(2) each) leaves in one write of
// all its records. The buffer is bounded (corkMaxBytes: past it the
// buffer is sent at once) and returned to a pool on Uncork, so an idle
// connection holds none.
//
// Writes from other goroutines while corked (a pong, a close frame) join
// the buffer in order; every Write is safe for concurrent use, as
// net.Conn requires.
type CorkConn struct {
	net.Conn
	mu     sync.Mutex
	corked bool
	buf    []byte // nil while nothing is held back
	// writing is set while a write to the socket is under way (mu held):
	// Close does not wait for one, which may be blocked on a full socket.
	writing atomic.Bool
	// closed is set by Close: later writes fail and Cork holds nothing.
	closed atomic.Bool

	// Reads are read ahead, readAheadBytes at a time: TLS reads a record
	// (at most 16 KiB) per Read, and one system call per record was a
	// fifth of a bulk receiver's CPU. Read is not called concurrently
	// (crypto/tls holds its input lock), rmu only makes sure.
	rmu        sync.Mutex
	rbuf       []byte
	rpos, rend int

	// lastRead (unix nanoseconds) is when a socket read last returned
	// bytes, buffered how many of those were read ahead and not yet
	// taken: the keepalive (websocket.go) reads both without rmu, which
	// a blocked Read holds.
	lastRead atomic.Int64
	buffered atomic.Int64

	// wrote gets a token (never blocking) after each write that reached
	// the socket: the keepalive waits on it for its ping frame to leave
	// (websocket.go sendPing).
	wrote chan struct{}
}

// readAheadBytes is what one Read asks the socket for when the caller
// wants less (allocated on the first read; one per connection).
const readAheadBytes = 64 << 10

// Read implements net.Conn: from what was read ahead, else one socket
// read of up to readAheadBytes (a caller asking for as much reads
// directly).
func (c *CorkConn) Read(p []byte) (int, error) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	if c.rpos < c.rend {
		n := copy(p, c.rbuf[c.rpos:c.rend])
		c.rpos += n
		c.buffered.Store(int64(c.rend - c.rpos))
		return n, nil
	}
	if len(p) >= readAheadBytes {
		n, err := c.Conn.Read(p)
		if n > 0 {
			c.lastRead.Store(time.Now().UnixNano())
		}
		return n, err
	}
	if c.rbuf == nil {
		c.rbuf = make([]byte, readAheadBytes)
	}
	n, err := c.Conn.Read(c.rbuf)
	if n <= 0 {
		return 0, err
	}
	c.lastRead.Store(time.Now().UnixNano())
	m := copy(p, c.rbuf[:n])
	c.rpos, c.rend = m, n
	c.buffered.Store(int64(n - m))
	return m, nil // an error comes again with the next socket read
}

// readState says when a socket read last returned bytes (zero: never)
// and how many read ahead wait to be taken.
func (c *CorkConn) readState() (last time.Time, buffered int) {
	if ns := c.lastRead.Load(); ns != 0 {
		last = time.Unix(0, ns)
	}
	return last, int(c.buffered.Load())
}

// corkMaxBytes bounds what a CorkConn holds back (UTF-8 bytes on the wire).
const corkMaxBytes = 512 << 10

// corkBufs keeps at most 2 free cork buffers (bufpool: bounded).
var corkBufs = bufpool.New(2, 64<<10, corkMaxBytes+64<<10)

// NotSentLowat bounds the unsent bytes the kernel queues on a CorkConn's
// TCP socket (Linux TCP_NOTSENT_LOWAT): 128 KiB, a few messages.
const NotSentLowat = 128 << 10

// NewCorkConn wraps c, and bounds its socket's unsent bytes to
// NotSentLowat.
func NewCorkConn(c net.Conn) *CorkConn {
	setNotSentLowat(c, NotSentLowat)
	return &CorkConn{Conn: c, wrote: make(chan struct{}, 1)}
}

// Cork holds back the writes that follow until Uncork.
func (c *CorkConn) Cork() {
	c.mu.Lock()
	c.corked = !c.closed.Load()
	c.mu.Unlock()
}

// Uncork sends what was held back, in one write, and lets writes through
// again. It returns the write's error.
func (c *CorkConn) Uncork() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.corked = false
	return c.flushLocked()
}

func (c *CorkConn) flushLocked() error {
	if c.buf == nil {
		return nil
	}
	b := c.buf
	c.buf = nil
	_, err := c.socketWrite(b)
	corkBufs.Put(b)
	return err
}

// socketWrite writes p to the socket (c.mu held), marked as under way for
// Close, and signals it.
func (c *CorkConn) socketWrite(p []byte) (int, error) {
	c.writing.Store(true)
	n, err := c.Conn.Write(p)
	c.writing.Store(false)
	c.signalWrote()
	return n, err
}

// signalWrote leaves a token in wrote, if there is room (c.mu held).
func (c *CorkConn) signalWrote() {
	select {
	case c.wrote <- struct{}{}:
	default:
	}
}

// Write implements net.Conn.
func (c *CorkConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed.Load() {
		return 0, net.ErrClosed
	}
	if !c.corked {
		return c.socketWrite(p)
	}
	if c.buf != nil && len(c.buf)+len(p) > corkMaxBytes {
		if err := c.flushLocked(); err != nil {
			return 0, err
		}
	}
	if len(p) > corkMaxBytes {
		return c.socketWrite(p)
	}
	if c.buf == nil {
		c.buf = corkBufs.Get(max(len(p), 64<<10))
	}
	c.buf = append(c.buf, p...)
	return len(p), nil
}

// closeFlushWait bounds how long Close spends sending what is held back.
const closeFlushWait = 500 * time.Millisecond

// Close implements net.Conn. What is held back (the last messages of a
// run, a close frame, TLS's close_notify: whatever was written while
// corked) is sent first, under a write deadline of closeFlushWait. A
// write to the socket under way (perhaps blocked on a full socket) is not
// waited for: closing the socket ends it; another goroutine only adding
// to the held bytes is (bounded by the same deadline, should it go on to
// write). coder/websocket closes the connection itself once it has
// answered a peer's close frame, so without the flush a close that found
// frames held lost them and the answer with them (the peer saw the TCP
// connection end, not a close). Later writes fail with net.ErrClosed.
func (c *CorkConn) Close() error {
	c.closed.Store(true)
	if !c.mu.TryLock() {
		if c.writing.Load() {
			return c.Conn.Close() // ends the write; nothing more goes
		}
		_ = c.Conn.SetWriteDeadline(time.Now().Add(closeFlushWait))
		c.mu.Lock()
	}
	if c.buf != nil {
		_ = c.Conn.SetWriteDeadline(time.Now().Add(closeFlushWait))
		_ = c.flushLocked()
	}
	c.corked = false
	c.mu.Unlock()
	return c.Conn.Close()
}

// CorkListener returns a listener whose connections are *CorkConn.
func CorkListener(ln net.Listener) net.Listener { return corkListener{ln} }

type corkListener struct{ net.Listener }

func (l corkListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return NewCorkConn(c), nil
}

type corkKey struct{}

// CorkContext is an http.Server ConnContext: it records the connection's
// *CorkConn (under TLS or not) in the context of its requests, where the
// WebSocket handlers find it.
func CorkContext(ctx context.Context, c net.Conn) context.Context {
	if nc, ok := c.(interface{ NetConn() net.Conn }); ok {
		c = nc.NetConn()
	}
	if cc, ok := c.(*CorkConn); ok {
		return context.WithValue(ctx, corkKey{}, cc)
	}
	return ctx
}

// corkFrom returns the *CorkConn recorded by CorkContext, or nil.
func corkFrom(ctx context.Context) *CorkConn {
	cc, _ := ctx.Value(corkKey{}).(*CorkConn)
	return cc
}
