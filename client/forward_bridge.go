package client

import (
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
)

// OpenError is a channel that could not open: the host refused
// createTcpConnection (an *rpc.Error: not allowed by its policy, a limit,
// the destination refused or unreachable) or did not answer in time.
// Message says what happened in words a person can act on, escaped as
// every peer's text is (printable); Err is the cause.
type OpenError struct {
	Dest    string // host:port as asked for
	Message string
	Err     error
}

func (e *OpenError) Error() string { return "open failed: " + e.Message }
func (e *OpenError) Unwrap() error { return e.Err }

// LocalError is a failure of the local end of a bridged connection
// (Bridge): reading in or writing out failed (the process that reads our
// output went away: EPIPE). The channel was reset.
type LocalError struct {
	Op  string // "read" or "write"
	Err error
}

func (e *LocalError) Error() string { return "local " + e.Op + ": " + e.Err.Error() }
func (e *LocalError) Unwrap() error { return e.Err }

// Bridge forwards one connection whose local end is a pair of byte
// streams rather than a socket, as ssh -W does with its standard input
// and output: what in yields goes to host:port (dialled by the host,
// under its policy, like ServeLocal's destinations), and what comes back
// is written to out. It is the channel of one accepted connection, with
// everything a -L connection has: it opens within OpenTimeout (waiting
// for the connection to the host to resume, if it is down), resumes
// across a lost connection with no byte lost or duplicated, and holds at
// most its windows.
//
// Half-closes go through: in's end of file becomes a half-close of the
// destination's socket (tcp/eof), and the destination's end of file
// closes out. Bridge returns nil once both directions have ended so and
// the host has taken every byte sent (bounded by TCPCloseLinger).
//
// Anything else resets the channel, closes out, and returns at once, so
// that whoever reads out can tell a transfer cut short from a complete
// one only by the error: an *OpenError (nothing was sent); an error
// matching ErrTCPReset (the destination reset its connection); one
// matching ErrNotKept (the host did not keep the channel across a
// reconnect); the Conn's error when it gave up (ErrConnectionLost); a
// *LocalError when reading in or writing out failed; ctx's error when ctx
// ended (ctx bounds the whole connection, not just the open). A Read of
// in or a Write to out still blocked then is left to return on its own
// (standard input cannot be interrupted): its goroutine ends with it, and
// what it read is dropped.
//
// Close resets a bridged connection as it resets the others (Bridge
// returns an error matching net.ErrClosed).
//
// An out with a method CloseWithError(error) error is closed on a
// failure with that, given the error Bridge returns: the caller can say
// why before whoever reads out sees its end (ssh ends its ProxyCommand
// as soon as it does, and the reason would be lost).
func (fw *Forwarder) Bridge(ctx context.Context, in io.Reader, out io.WriteCloser, host string, port int) error {
	dest := net.JoinHostPort(host, strconv.Itoa(port))
	remote, err := fw.dialTCP(ctx, host, port, false)
	if err != nil {
		switch {
		case ctx.Err() != nil:
			err = ctx.Err()
		case fw.conn.Err() != nil:
			err = fw.conn.Err()
		default:
			err = &OpenError{Dest: dest, Message: fw.openMessage(err), Err: err}
		}
		closeWithError(out, err)
		return err
	}
	defer fw.untrackChannel(remote)
	return fw.bridge(ctx, in, out, remote)
}

// closeWithError closes out after a failure err (Bridge).
func closeWithError(out io.WriteCloser, err error) {
	if c, ok := out.(interface{ CloseWithError(error) error }); ok {
		_ = c.CloseWithError(err)
		return
	}
	_ = out.Close()
}

// bridge pipes in to remote and remote to out until both directions
// ended (nil), or the first failure (the channel reset, out closed).
func (fw *Forwarder) bridge(ctx context.Context, in io.Reader, out io.WriteCloser, remote *TCPConn) error {
	lin := &localReader{r: in}
	lout := &localWriter{w: out}
	up := make(chan error, 1)
	go func() {
		_, err := remote.ReadFrom(lin)
		if err == nil {
			err = remote.CloseWrite()
		}
		up <- lin.wrap(err)
	}()
	down := make(chan error, 1)
	go func() {
		_, err := remote.WriteTo(lout)
		if err == nil {
			if cerr := out.Close(); cerr != nil {
				err = &LocalError{Op: "write", Err: cerr}
			}
		}
		down <- lout.wrap(err)
	}()
	for pending := 2; pending > 0; pending-- {
		var err error
		select {
		case err = <-up:
		case err = <-down:
		case <-ctx.Done():
			err = ctx.Err()
		case <-fw.done:
		}
		select {
		case <-fw.done:
			// Closed: Close's reset of the channel is what a copy
			// failed with, if one did.
			err = fmt.Errorf("client: forwarder closed: %w", net.ErrClosed)
		default:
		}
		if err != nil {
			remote.Reset()
			closeWithError(out, err)
			return err
		}
	}
	return remote.Close()
}

// localReader is the local end's reader; it keeps the error it returned,
// so that a failure of its own can be told from the channel's (ReadFrom
// stops at the first error of either).
type localReader struct {
	r   io.Reader
	mu  sync.Mutex
	err error
}

func (l *localReader) Read(p []byte) (int, error) {
	n, err := l.r.Read(p)
	if err != nil && err != io.EOF {
		l.mu.Lock()
		l.err = err
		l.mu.Unlock()
	}
	return n, err
}

// wrap is err, which ReadFrom returned, or a *LocalError when the reader
// failed.
func (l *localReader) wrap(err error) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil && l.err != nil {
		return &LocalError{Op: "read", Err: l.err}
	}
	return err
}

// localWriter is localReader's twin for the writer (WriteTo stops at the
// first error of either).
type localWriter struct {
	w   io.Writer
	mu  sync.Mutex
	err error
}

func (l *localWriter) Write(p []byte) (int, error) {
	n, err := l.w.Write(p)
	if err != nil {
		l.mu.Lock()
		l.err = err
		l.mu.Unlock()
	}
	return n, err
}

func (l *localWriter) wrap(err error) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil && l.err != nil {
		return &LocalError{Op: "write", Err: l.err}
	}
	return err
}
