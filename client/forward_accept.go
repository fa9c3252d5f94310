package client

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"time"
)

// A failed Accept (EMFILE: out of file descriptors, ECONNABORTED, ...) is
// retried, as net/http's Server.Serve does, after a wait of
// DefaultAcceptRetryMin that doubles with each failure in a row up to
// DefaultAcceptRetryMax (ForwarderOptions can change both); the next
// successful Accept starts again from the minimum. The connections that
// arrive meanwhile wait in the kernel's backlog.
const (
	DefaultAcceptRetryMin = 5 * time.Millisecond
	DefaultAcceptRetryMax = time.Second
	// acceptLogEvery: a failure that repeats is logged at most this often
	// (near the descriptor limit Accept fails and succeeds in turns, and
	// each success starts the backoff again at DefaultAcceptRetryMin); a
	// different one is logged at once.
	acceptLogEvery = time.Second
)

// retrying returns l with an Accept that retries failures (see
// DefaultAcceptRetryMin), for ServeLocal and ServeSOCKS alike.
func (fw *Forwarder) retrying(l net.Listener) *retryListener {
	return &retryListener{Listener: l, done: fw.done, log: fw.opts.Log,
		min: fw.opts.AcceptRetryMin, max: fw.opts.AcceptRetryMax, now: time.Now}
}

// retryListener is a net.Listener whose Accept returns only a connection
// or the end: the listener closed (net.ErrClosed) or done closed. Any
// other failure is logged ("accept on ADDR: ERR", rate-limited)
// and retried after a backoff (DefaultAcceptRetryMin to DefaultAcceptRetryMax) that
// done cuts short. One goroutine calls Accept.
type retryListener struct {
	net.Listener
	done     <-chan struct{} // closed at shutdown; nil: never
	log      io.Writer
	min, max time.Duration
	now      func() time.Time

	// The log's rate limit: the last line written, when, and how many
	// failures went unlogged since.
	lastMsg  string
	lastLog  time.Time
	unlogged int
}

func (r *retryListener) Accept() (net.Conn, error) {
	var delay time.Duration
	for {
		c, err := r.Listener.Accept()
		if err == nil && r.lastMsg != "" {
			fmt.Fprintf(r.log, "accepting on %s again\n", r.Addr())
			r.lastMsg, r.unlogged = "", 0
		}
		if err == nil || errors.Is(err, net.ErrClosed) {
			return c, err
		}
		r.logFailure(err)
		delay = min(max(2*delay, r.min), r.max)
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-r.done:
			t.Stop()
			return nil, fmt.Errorf("accept on %s: %w", r.Addr(), net.ErrClosed)
		}
	}
}

// logFailure writes "accept on ADDR: ERR (retrying)" for the
// first failure, for one different from the last line's, and for a
// repeated one at most every acceptLogEvery, saying how many went
// unlogged in between.
func (r *retryListener) logFailure(err error) {
	msg := unwrapSyscall(err).Error() // "too many open files", not the whole OpError
	now := r.now()
	if msg == r.lastMsg && now.Sub(r.lastLog) < acceptLogEvery {
		r.unlogged++
		return
	}
	more := ""
	if r.unlogged > 0 {
		more = fmt.Sprintf("; %d more since the last line", r.unlogged)
	}
	fmt.Fprintf(r.log, "accept on %s: %s (retrying%s)\n", r.Addr(), msg, more)
	r.lastMsg, r.lastLog, r.unlogged = msg, now, 0
}

func unwrapSyscall(err error) error {
	var se *os.SyscallError
	if errors.As(err, &se) {
		return se.Err
	}
	return err
}
