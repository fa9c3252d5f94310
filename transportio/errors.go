package transportio

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// Local codes (§10.3): raised to the application and never transmitted.
var (
	ErrLaneUnavailable  = errors.New("WT_LANE_UNAVAILABLE: this mapping has no bidirectional streams or datagrams")
	ErrDatagramTooLarge = errors.New("WT_DATAGRAM_TOO_LARGE: payload exceeds the path's datagram size")
	ErrSessionClosed    = errors.New("WT_SESSION_CLOSED: the session closed while the operation was pending")
	ErrUnknownEvent     = errors.New("WT_UNKNOWN_EVENT: the event is not in the contract")
	ErrWrongShape       = errors.New("transportio: the event's contract shape does not allow this operation")
	ErrOriginsExhausted = errors.New("WT_TOO_MANY_STREAMS: origin space exhausted")
	ErrBadRefusal       = errors.New("transportio: a refusal reason must be 1 to 123 bytes of UTF-8")
)

// FrameError is a violation found while decoding a stream frame. Code is
// the WT_ name reported locally (WT_PROTOCOL_ERROR, WT_PAYLOAD_TOO_LARGE,
// WT_UNSUPPORTED_CODEC); on the emit stream every FrameError closes the
// session as WT_PROTOCOL_ERROR (§5.5), on a call stream it abandons the
// stream.
type FrameError struct {
	Code   string
	Reason string
}

func (e *FrameError) Error() string { return e.Code + ": " + e.Reason }

func frameErr(code, format string, a ...any) error {
	return &FrameError{Code: code, Reason: fmt.Sprintf(format, a...)}
}

// SessionError is how a session ended: the §10.2 code, its reason, whether
// the peer sent it, and whether the connection was lost with no code at all
// (§11: reported as WT_NO_ERROR).
type SessionError struct {
	Code   CloseCode
	Reason string
	Remote bool
	Lost   bool
}

func (e *SessionError) Error() string {
	who := "local"
	if e.Remote {
		who = "peer"
	}
	if e.Lost {
		if e.Reason == "" {
			return "transportio: connection lost"
		}
		return "transportio: connection lost: " + e.Reason
	}
	if e.Reason == "" {
		return fmt.Sprintf("transportio: session closed by %s: %s", who, e.Code)
	}
	return fmt.Sprintf("transportio: session closed by %s: %s: %s", who, e.Code, e.Reason)
}

// Is makes every SessionError match ErrSessionClosed.
func (e *SessionError) Is(target error) bool { return target == ErrSessionClosed }

// StatusError is a dial that the server answered with an HTTP status
// other than the upgrade's (101 on WebSocket, 200 on WebTransport), before
// any session: 401, 404, 426...; Err is the library's error.
type StatusError struct {
	StatusCode int
	Err        error
	// Reason is the why of a refusal the body states ("401 unauthorized:
	// expired" gives "expired"; at most MaxReasonBytes), "" when none.
	Reason string
}

// MaxReasonBytes bounds StatusError.Reason (the close reason's bound,
// seed 002 §4).
const MaxReasonBytes = 123

// ReasonFromBody returns the reason a refusal's body states: the text
// after "NNN word: " on its first line (the daemon's "401 unauthorized:
// expired"), printable ASCII only, at most MaxReasonBytes; "" when the
// body has no such line. body is what a dialer kept of the response
// (coder/websocket keeps its first KiB).
func ReasonFromBody(body io.Reader) string {
	if body == nil {
		return ""
	}
	b, _ := io.ReadAll(io.LimitReader(body, 1024))
	line, _, _ := strings.Cut(string(b), "\n")
	_, why, ok := strings.Cut(line, ": ")
	if !ok {
		return ""
	}
	why = strings.TrimSpace(why)
	if len(why) > MaxReasonBytes {
		why = why[:MaxReasonBytes]
	}
	for _, r := range why {
		if r < 0x20 || r > 0x7e {
			return ""
		}
	}
	return why
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("server answered HTTP %d: %v", e.StatusCode, e.Err)
}

func (e *StatusError) Unwrap() error { return e.Err }

// RefusalError is an authorize decision to refuse a peer (WT_UNAUTHORIZED).
type RefusalError struct{ Reason string }

func (e *RefusalError) Error() string { return "WT_UNAUTHORIZED: " + e.Reason }

// Refused is the refusal with nothing to say (§4).
var Refused error = &RefusalError{Reason: "refused"}

// Refuse returns the refusal with reason, a short code the client compares
// (§4). A reason that is not 1 to 123 bytes of UTF-8 is rejected here and
// never sent: Refuse then returns an error wrapping ErrBadRefusal, which a
// listener treats as a failed decision (WT_NO_ERROR, "authorize failed").
func Refuse(reason string) error {
	if len(reason) < 1 || len(reason) > MaxWebSocketCloseReason || !utf8.ValidString(reason) {
		return fmt.Errorf("%w (got %d bytes)", ErrBadRefusal, len(reason))
	}
	return &RefusalError{Reason: reason}
}

// CallError is a CALL_ERROR received from the responder (§6.4), or a call
// that failed locally with a WT_ code.
type CallError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func (e *CallError) Error() string { return e.Code + ": " + e.Message }

// TruncateReason cuts s to at most n bytes on a character boundary.
func TruncateReason(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}
