package transportio

import (
	"context"
	"io"
	"sync"
	"sync/atomic"
)

// streamCarrier carries the emit lane over one byte stream per direction:
// stdin/stdout of `sidecar stdio`, or a child process's pipes on the client
// (`--via`). There are no call streams, no datagrams and no close frames: a
// close ends this side's write stream, and the peer reads that as the end
// of the session (WT_NO_ERROR). A slow reader blocks the writer and is never
// disconnected (Config.BlockOnFull).
type streamCarrier struct {
	r      io.ReadCloser
	w      io.WriteCloser
	remote string

	done chan struct{}
	once sync.Once
	err  atomic.Pointer[SessionError]
	wmu  sync.Mutex
}

// NewStreamCarrier returns the stdio mapping over r (the peer's emit stream)
// and w (ours). Closing the carrier closes both.
func NewStreamCarrier(r io.ReadCloser, w io.WriteCloser, remote string) Carrier {
	return &streamCarrier{r: r, w: w, remote: remote, done: make(chan struct{})}
}

func (c *streamCarrier) Kind() Kind            { return KindStdio }
func (c *streamCarrier) RemoteAddr() string    { return c.remote }
func (c *streamCarrier) Done() <-chan struct{} { return c.done }
func (c *streamCarrier) Err() *SessionError    { return c.err.Load() }
func (c *streamCarrier) Wait()                 {}

func (c *streamCarrier) end(e *SessionError) bool {
	first := false
	c.once.Do(func() {
		first = true
		c.err.Store(e)
		close(c.done)
		_ = c.w.Close()
		_ = c.r.Close()
	})
	return first
}

func (c *streamCarrier) Close(code CloseCode, reason string) error {
	c.end(&SessionError{Code: code, Reason: reason})
	return nil
}

func (c *streamCarrier) OpenEmit(context.Context) (io.Writer, error) { return stdioWriter{c}, nil }

func (c *streamCarrier) AcceptEmit(context.Context) (io.Reader, error) { return stdioReader{c}, nil }

type stdioReader struct{ c *streamCarrier }

func (x stdioReader) Read(p []byte) (int, error) {
	n, err := x.c.r.Read(p)
	if err == io.EOF {
		x.c.end(&SessionError{Code: CloseNoError, Reason: "the peer closed its end", Remote: true})
	} else if err != nil {
		x.c.end(&SessionError{Lost: true, Reason: err.Error()})
	}
	return n, err
}

type stdioWriter struct{ c *streamCarrier }

func (x stdioWriter) Write(p []byte) (int, error) {
	x.c.wmu.Lock()
	defer x.c.wmu.Unlock()
	n, err := x.c.w.Write(p)
	if err != nil {
		x.c.end(&SessionError{Lost: true, Reason: err.Error()})
	}
	return n, err
}
