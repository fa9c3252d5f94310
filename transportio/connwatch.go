package transportio

import (
	"bufio"
	"net"
	"net/http"
	"sync"
)

// ConnWatch is an http.ResponseWriter that hands websocket.Accept (its
// Hijack) the connection beneath wrapped so that the first error a read
// of it returned is kept: Err. Wrap the handler's writer in it before
// Accept (StatusRecorder may go around it) and give Err to the reader.
//
// It tells a cut connection from a peer that broke the protocol:
// coder/websocket (v1.8.15) hands the inflater the bytes of a client's
// frame that a read error cut short still masked, so a WebSocket cut
// mid-way through a compressed message reads as data that does not
// inflate (flate.CorruptInputError) before it reads as the error.
type ConnWatch struct {
	http.ResponseWriter
	conn *watchedConn
}

// Hijack implements http.Hijacker: the writer's connection (reached
// through http.ResponseController), its reads watched.
func (w *ConnWatch) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, brw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	w.conn = &watchedConn{Conn: c}
	return w.conn, brw, nil
}

// Unwrap returns the writer beneath.
func (w *ConnWatch) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Err returns the first error a read of the hijacked connection
// returned (io.EOF included), or nil: none yet, or not hijacked.
func (w *ConnWatch) Err() error {
	if w.conn == nil {
		return nil
	}
	return w.conn.readErr()
}

// watchedConn is a net.Conn that keeps its first read error.
type watchedConn struct {
	net.Conn
	mu  sync.Mutex
	err error
}

func (c *watchedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if err != nil {
		c.mu.Lock()
		if c.err == nil {
			c.err = err
		}
		c.mu.Unlock()
	}
	return n, err
}

func (c *watchedConn) readErr() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}
