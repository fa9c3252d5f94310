package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"syscall"
	"time"

	"github.com/sidecar-dev/sidecar/transport"
	"github.com/sidecar-dev/sidecar/transportio"
)

// Sentinel errors of the client's reconnection (docs/protocol.md
// "reconnect"); match them with errors.Is.
var (
	// ErrConnectionLost: the transport was lost. A call in flight when it
	// happened fails with an error matching it (retryable: the request
	// may or may not have reached the host); so does every error of a
	// connection that gave up reconnecting (*ReconnectError).
	ErrConnectionLost = errors.New("client: connection lost")
	// ErrUnauthorized: the host refused our credentials when dialling
	// (HTTP 401, WT_UNAUTHORIZED). Never retried. A Dialer of one's own
	// wraps it to make reconnection stop.
	ErrUnauthorized = errors.New("client: the host refused the token")
	// ErrCertificateMismatch: the host presented a certificate other than
	// the pinned one (--cert-hash): its certificate was renewed or
	// replaced, or it is not our host. Never retried.
	ErrCertificateMismatch = errors.New("client: the host's certificate does not match the pin")
	// ErrResumeExpired: the host holds nothing to resume for our
	// clientId (-32008, kind "expired": its grace ended, or it
	// restarted). Never retried.
	ErrResumeExpired = errors.New("client: nothing to resume on the host")
	// ErrResumeRefused: the host refused to resume our state (-32009,
	// kind "refused": another principal, or a wrong resume token).
	// Never retried.
	ErrResumeRefused = errors.New("client: the host refused to resume the session")
	// ErrGraceEnded: the host's grace period (resume.graceMs, counted
	// from the loss) ended before a reconnect succeeded.
	ErrGraceEnded = errors.New("client: the host's grace period ended")
	// ErrServerShutdown: the host closed the connection because it is
	// shutting down (close code 1001, or transport-io's "server shutting
	// down"). It ends the Conn unless Options.ReconnectAfterShutdown is
	// set; then it is the cause of the reconnection that follows.
	ErrServerShutdown = errors.New("client: the server is shutting down")
	// ErrHostGone: a reconnect attempt's dial was refused (ECONNREFUSED):
	// nothing listens at the host's address, so the process that held our
	// state is gone. It ends the reconnection only with
	// Options.GiveUpWhenRefused.
	ErrHostGone = errors.New("client: the host's address refuses connections: its daemon is gone (or a tunnel or proxy in front of it is down)")
	// ErrNotKept: a subscription the host did not keep across a
	// reconnect (listed in missing, or absent from windows.items: a
	// disposed terminal, a TCP channel). Only that subscription ends.
	ErrNotKept = errors.New("client: subscription not kept across the reconnect")
)

// ReconnectError is why a connection gave up reconnecting: Reason is one
// of ErrUnauthorized, ErrResumeExpired, ErrResumeRefused, ErrGraceEnded,
// ErrHostGone (or the host's error to reconnect, for one that does not
// support it),
// Cause what the last attempt (or the loss itself) failed with. It
// matches ErrConnectionLost, Reason and Cause with errors.Is.
type ReconnectError struct {
	Reason   error
	Cause    error
	Attempts int // reconnect attempts made
}

func (e *ReconnectError) Error() string {
	// Worded for a person: the package prefix of our sentinels is left
	// out, and the cause is the last attempt's.
	msg := fmt.Sprintf("connection lost and not resumed after %d attempt(s): %s", e.Attempts, strings.TrimPrefix(e.Reason.Error(), "client: "))
	if e.Cause != nil && e.Cause != e.Reason {
		msg += " (last attempt: " + strings.TrimPrefix(e.Cause.Error(), "client: ") + ")"
	}
	return msg
}

func (e *ReconnectError) Unwrap() []error {
	return []error{ErrConnectionLost, e.Reason, e.Cause}
}

// refusalError is a dial refusal worded for a person that still matches
// ErrUnauthorized and the transport's error.
type refusalError struct {
	msg string
	err error
}

func (e *refusalError) Error() string   { return e.msg }
func (e *refusalError) Unwrap() []error { return []error{ErrUnauthorized, e.err} }

// pinError is a certificate pin mismatch worded for a person that still
// matches ErrCertificateMismatch and the transport's error.
type pinError struct {
	msg string
	err error
}

func (e *pinError) Error() string   { return e.msg }
func (e *pinError) Unwrap() []error { return []error{ErrCertificateMismatch, e.err} }

// lostCallError is a call that was in flight when the transport was lost.
type lostCallError struct {
	method string
	cause  error
}

func (e *lostCallError) Error() string {
	return fmt.Sprintf("%s: connection lost while in flight (it may or may not have reached the host): %v", e.method, e.cause)
}

func (e *lostCallError) Unwrap() []error { return []error{ErrConnectionLost, e.cause} }

// wordedError is an error worded for a person that still matches the
// one it words.
type wordedError struct {
	msg string
	err error
}

func (e *wordedError) Error() string { return e.msg }
func (e *wordedError) Unwrap() error { return e.err }

// dialRefused reports whether a dial failed because the host's address
// refused the connection (ECONNREFUSED), not for a path that does not
// answer or a refusal of our credentials.
func dialRefused(err error) bool { return errors.Is(err, syscall.ECONNREFUSED) }

// Undecided reports whether a dial failed because the host reached no
// decision on the credential, not because it refused it: /ahp answered
// HTTP 503 "authorize failed: try again" (transport.ReasonTryAgain; a
// proxy's 503 is not this), transport-io closed the session as
// WT_NO_ERROR with reason "authorize failed" (transportio.Authorize), as
// a daemon whose OIDC issuer cannot be reached does. Trying again later
// may succeed.
func Undecided(err error) bool {
	return undecidedHTTP(err) || undecidedSession(err)
}

func undecidedHTTP(err error) bool {
	var he *transport.HTTPError
	return errors.As(err, &he) && he.StatusCode == http.StatusServiceUnavailable && he.Reason == transport.ReasonTryAgain
}

func undecidedSession(err error) bool {
	var se *transportio.SessionError
	return errors.As(err, &se) && se.Code == transportio.CloseNoError && se.Reason == transportio.ReasonAuthorizeFailed
}

// Waits between the first connection's tries while the host cannot
// decide on the credential (dialUndecided): doubled from the first to
// the last, each with jitter.
const (
	undecidedFirstWait = 250 * time.Millisecond
	undecidedMaxWait   = 2 * time.Second
)

// dialUndecided dials, and dials again while the host cannot decide on
// the credential (Undecided), waiting between tries, until ctx ends: an
// identity provider that is down for a moment is no reason to fail a
// command. A try starts only while what is left of ctx covers the wait
// and as long again as the last try took. Any other error is returned
// as it is; when ctx ends first, the last undecided answer, saying how
// long it was tried, wrapping ctx's error too. tell, when set, hears of
// each wait.
func dialUndecided(ctx context.Context, dial func(context.Context) (transport.MessageConn, error), tell func(err error, wait, left time.Duration)) (transport.MessageConn, error) {
	start := time.Now()
	wait := undecidedFirstWait
	var undecided error // the last undecided answer
	for {
		began := time.Now()
		mc, err := dial(ctx)
		switch {
		case err == nil:
			return mc, nil
		case Undecided(err):
			undecided = err
		case undecided != nil && ctx.Err() != nil:
			// This try was cut short by the end: the host's answer
			// until then is what to tell.
			return nil, gaveUp(undecided, start, ctx.Err())
		default:
			return nil, err
		}
		w := jitter(wait)
		var left time.Duration
		if dl, ok := ctx.Deadline(); ok {
			if left = time.Until(dl); left < w+time.Since(began) {
				return nil, gaveUp(undecided, start, context.DeadlineExceeded)
			}
		}
		if tell != nil {
			tell(err, w, left)
		}
		t := time.NewTimer(w)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, gaveUp(undecided, start, ctx.Err())
		case <-t.C:
		}
		wait = min(2*wait, undecidedMaxWait)
	}
}

// gaveUp is the error of a first connection given up on while the host
// could not decide: the last answer (still Undecided to errors.As) and
// why it stopped (errors.Is: context.DeadlineExceeded or Canceled).
func gaveUp(undecided error, start time.Time, why error) error {
	return &undecidedError{err: undecided, why: why, after: time.Since(start).Round(100 * time.Millisecond)}
}

type undecidedError struct {
	err, why error
	after    time.Duration
}

func (e *undecidedError) Error() string {
	if e.after < 100*time.Millisecond {
		return e.err.Error()
	}
	return fmt.Sprintf("%v; no decision after trying for %v", e.err, e.after)
}

func (e *undecidedError) Unwrap() []error { return []error{e.err, e.why} }
