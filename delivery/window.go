package delivery

import "fmt"

// ViolationKind says which rule of seed 000 a peer (or this side) broke.
type ViolationKind int

const (
	// CreditBeyondSent: channel/credit consumedBytes above the sent bytes.
	// Got is consumedBytes, Limit is sent bytes.
	CreditBeyondSent ViolationKind = iota + 1
	// FrameTooLarge: a data message or fragment above maximumFrameBytes.
	// Got is its size, Limit is maximumFrameBytes.
	FrameTooLarge
	// WindowExceeded: a data message or fragment arrived while the data
	// outstanding (received − last credit sent) was already at or above
	// windowBytes. Got is that outstanding amount, Limit is windowBytes.
	WindowExceeded
	// SendOnFullWindow: this side tried to send while outstanding was at or
	// above windowBytes (a bug in the caller). Got is outstanding, Limit is
	// windowBytes.
	SendOnFullWindow
	// FragmentInterleaved: another data message for the subscription and
	// direction while a fragmented message was in progress.
	FragmentInterleaved
	// MessageTooLarge: a joined fragmented message above the configured
	// maximum. Got is the UTF-16 bytes of the joined text, Limit the maximum.
	MessageTooLarge
	// ChannelMismatch: the channel inside a joined message differs from the
	// channel of its fragments.
	ChannelMismatch
	// EmptyFragment: a channel/frame with empty data.
	EmptyFragment
	// BadFragment: a channel/frame whose data is not valid text, for example
	// one that divides a surrogate pair.
	BadFragment
	// InvalidSize: a size of zero or less given to a window (a bug in the
	// caller: every JSON-RPC message has a positive size). Got is the size.
	InvalidSize
	// PartialBytesExceeded: a fragment that would take the partial
	// (unfinished) fragmented messages of one connection, across its
	// subscriptions, above their bound (PartialBudget). Got is what they
	// would hold with it, Limit the bound; both UTF-16 bytes.
	PartialBytesExceeded
)

var violationNames = [...]string{
	CreditBeyondSent:     "credit beyond sent",
	FrameTooLarge:        "frame too large",
	WindowExceeded:       "window exceeded",
	SendOnFullWindow:     "send on full window",
	FragmentInterleaved:  "fragment interleaved",
	MessageTooLarge:      "message too large",
	ChannelMismatch:      "channel mismatch",
	EmptyFragment:        "empty fragment",
	BadFragment:          "bad fragment",
	InvalidSize:          "invalid size",
	PartialBytesExceeded: "partial messages over the connection's bound",
}

func (k ViolationKind) String() string {
	if k > 0 && int(k) < len(violationNames) {
		return violationNames[k]
	}
	return fmt.Sprintf("ViolationKind(%d)", int(k))
}

// ViolationError is a broken windowed-delivery rule, with the numbers. The
// seed leaves the reaction open; sidecar logs it and closes the connection
// (DESIGN §4). The windows in this package do not know their channel and
// leave Channel empty: the caller fills it in (errors.As, then set Channel).
type ViolationError struct {
	Kind    ViolationKind
	Channel string
	Got     UTF16Bytes
	Limit   UTF16Bytes
}

func (e *ViolationError) Error() string {
	on := ""
	if e.Channel != "" {
		on = " on " + e.Channel
	}
	var detail string
	switch e.Kind {
	case CreditBeyondSent:
		detail = fmt.Sprintf("consumedBytes %d > sent %d", e.Got, e.Limit)
	case FrameTooLarge:
		detail = fmt.Sprintf("size %d > maximumFrameBytes %d", e.Got, e.Limit)
	case WindowExceeded, SendOnFullWindow:
		detail = fmt.Sprintf("outstanding %d >= windowBytes %d", e.Got, e.Limit)
	case MessageTooLarge:
		detail = fmt.Sprintf("joined %d > maximum %d", e.Got, e.Limit)
	case InvalidSize:
		detail = fmt.Sprintf("size %d <= 0", e.Got)
	case PartialBytesExceeded:
		detail = fmt.Sprintf("partial messages would hold %d > maximum %d", e.Got, e.Limit)
	default:
		if e.Got == 0 && e.Limit == 0 {
			return "delivery: " + e.Kind.String() + on
		}
		detail = fmt.Sprintf("got %d, limit %d", e.Got, e.Limit)
	}
	return "delivery: " + e.Kind.String() + on + ": " + detail
}

// SendWindow is the sender's accounting for one direction of one
// subscription (seed 000 "Window and Credit"): sent bytes, consumed bytes
// (the highest channel/credit received) and the limits. It is bare
// arithmetic: no goroutines, no locks, no I/O; the connection's writer owns
// it. The zero value is not usable; call NewSendWindow.
type SendWindow struct {
	limits   Limits
	sent     UTF16Bytes
	consumed UTF16Bytes
}

// NewSendWindow returns a window with both counters at zero. l should have
// passed Validate (Negotiate does that).
func NewSendWindow(l Limits) *SendWindow { return &SendWindow{limits: l} }

// SetLimits changes the limits after a repeated subscribe; the counters
// continue (seed: "only the limits change"). Data sent under larger limits
// may leave outstanding above the new ones until credit arrives.
func (w *SendWindow) SetLimits(l Limits) { w.limits = l }

// Limits returns the current limits.
func (w *SendWindow) Limits() Limits { return w.limits }

// CanStart reports whether a data message or fragment may be sent now:
// outstanding < WindowBytes. The one that starts may go past the window.
func (w *SendWindow) CanStart() bool { return w.Outstanding() < w.limits.WindowBytes }

// Remaining returns WindowBytes − outstanding, the credit left; it is zero or
// negative once the window is full or overshot.
func (w *SendWindow) Remaining() UTF16Bytes { return w.limits.WindowBytes - w.Outstanding() }

// Outstanding returns sent − consumed. While the limits do not shrink it
// stays below WindowBytes + MaximumFrameBytes.
func (w *SendWindow) Outstanding() UTF16Bytes { return w.sent - w.consumed }

// Sent returns the total size of data messages and fragments sent.
func (w *SendWindow) Sent() UTF16Bytes { return w.sent }

// Consumed returns the highest consumedBytes received.
func (w *SendWindow) Consumed() UTF16Bytes { return w.consumed }

// Debit records a data message or fragment of n UTF-16 bytes as sent. It
// refuses, leaving the counters unchanged, with a *ViolationError of kind
// InvalidSize (n <= 0), FrameTooLarge (n > MaximumFrameBytes) or
// SendOnFullWindow (!CanStart() before it). Those are bugs in the caller,
// which must check CanStart and size frames first; they are returned, not
// panicked, so the caller can close the connection with a log line.
func (w *SendWindow) Debit(n UTF16Bytes) error {
	switch {
	case n <= 0:
		return &ViolationError{Kind: InvalidSize, Got: n}
	case n > w.limits.MaximumFrameBytes:
		return &ViolationError{Kind: FrameTooLarge, Got: n, Limit: w.limits.MaximumFrameBytes}
	case !w.CanStart():
		return &ViolationError{Kind: SendOnFullWindow, Got: w.Outstanding(), Limit: w.limits.WindowBytes}
	}
	w.sent += n
	return nil
}

// Credit applies a channel/credit consumedBytes value, which is cumulative.
// A value at or below the previous one is ignored (false, nil), as the seed
// requires. A value above Sent() is a *ViolationError of kind
// CreditBeyondSent and changes nothing. Otherwise it returns (true, nil).
func (w *SendWindow) Credit(consumedBytes UTF16Bytes) (advanced bool, err error) {
	if consumedBytes <= w.consumed {
		return false, nil
	}
	if consumedBytes > w.sent {
		return false, &ViolationError{Kind: CreditBeyondSent, Got: consumedBytes, Limit: w.sent}
	}
	w.consumed = consumedBytes
	return true, nil
}

// RecvWindow is the receiver's accounting for one direction of one
// subscription: bytes received, bytes released by the consumer, and the
// last consumedBytes sent in channel/credit. Like SendWindow it is bare
// arithmetic owned by one goroutine. The zero value is not usable; call
// NewRecvWindow.
type RecvWindow struct {
	limits   Limits
	received UTF16Bytes
	released UTF16Bytes
	credited UTF16Bytes // last consumedBytes sent (MarkCredited)
}

// NewRecvWindow returns a window with all counters at zero.
func NewRecvWindow(l Limits) *RecvWindow { return &RecvWindow{limits: l} }

// SetLimits changes the limits after a repeated subscribe; counters continue.
func (w *RecvWindow) SetLimits(l Limits) { w.limits = l }

// Receive records a data message or fragment of n UTF-16 bytes, measured on
// the text received. It refuses, leaving the counters unchanged, with a
// *ViolationError of kind InvalidSize (n <= 0), FrameTooLarge
// (n > MaximumFrameBytes) or WindowExceeded: before this message, received
// minus the last credit we sent was already at or above WindowBytes. The
// sender's consumed bytes can be no more than the credit we sent, so such a
// sender started a message on a full window. Credit still in flight is
// counted as not yet known to the sender, so there are no false alarms.
func (w *RecvWindow) Receive(n UTF16Bytes) error {
	switch {
	case n <= 0:
		return &ViolationError{Kind: InvalidSize, Got: n}
	case n > w.limits.MaximumFrameBytes:
		return &ViolationError{Kind: FrameTooLarge, Got: n, Limit: w.limits.MaximumFrameBytes}
	case w.received-w.credited >= w.limits.WindowBytes:
		return &ViolationError{Kind: WindowExceeded, Got: w.received - w.credited, Limit: w.limits.WindowBytes}
	}
	w.received += n
	return nil
}

// Release records that the consumer has released n more bytes; n may cover
// part of a message or fragment, and fragments are released as they arrive
// (the seed forbids waiting for a whole message). Released never exceeds
// Received: a larger n is clamped, and n <= 0 is ignored.
func (w *RecvWindow) Release(n UTF16Bytes) {
	if n <= 0 {
		return
	}
	w.released = min(w.released+n, w.received)
}

// Received returns the total size of data messages and fragments received.
func (w *RecvWindow) Received() UTF16Bytes { return w.received }

// Released returns the total released by the consumer.
func (w *RecvWindow) Released() UTF16Bytes { return w.released }

// CreditDue returns the consumedBytes value to send in channel/credit, and
// true when one should go out now: something was released since the last
// credit, and either the consumer has caught up (released == received, so
// the sender may be waiting for exactly this) or at least
// WindowBytes/creditDivisor (a sixteenth of the window) has been released
// since the last credit. Credit is therefore coalesced, never one message
// per released byte. After sending, call MarkCredited.
func (w *RecvWindow) CreditDue() (UTF16Bytes, bool) {
	if w.released <= w.credited {
		return 0, false
	}
	if w.released == w.received || w.released-w.credited >= w.limits.WindowBytes/creditDivisor {
		return w.released, true
	}
	return 0, false
}

// MarkCredited records that consumedBytes v was sent in channel/credit.
// Values at or below the previous one are ignored; values above Released
// are clamped to it (credit for data not released would let the sender run
// past our window).
func (w *RecvWindow) MarkCredited(v UTF16Bytes) {
	v = min(v, w.released)
	if v > w.credited {
		w.credited = v
	}
}
