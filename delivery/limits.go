package delivery

import (
	"errors"
	"fmt"
)

// Limits are the negotiated limits for one direction of one windowed
// subscription (seed 000 "Negotiation"): flowControl.receive in subscribe,
// clientReceive and hostReceive in its result. The receiver of the data
// offers them; the sender obeys them.
type Limits struct {
	// WindowBytes is the soft target for outstanding data (sent − consumed).
	// A data message or fragment may start only while outstanding is below
	// it; the one that starts may go past it.
	WindowBytes UTF16Bytes `json:"windowBytes"`
	// MaximumFrameBytes is the hard limit on each JSON-RPC data message,
	// including a whole channel/frame notification.
	MaximumFrameBytes UTF16Bytes `json:"maximumFrameBytes"`
}

// MinimumFrameBytes is the smallest MaximumFrameBytes either peer may use.
// The seed requires it ("MUST be at least 1024") so that every channel/frame
// envelope with an ordinary channel URI leaves room for data.
const MinimumFrameBytes UTF16Bytes = 1024

// maxCharBytes is the largest size one character of a message can take in
// the data of a channel/frame: a raw control character, which is escaped
// as \u00XX (6 code units). Characters of valid JSON text take at most 4
// (\" \\ \n, or a surrogate pair). Using the worst case means a fragmenter
// given MinFrameBudget always makes progress, whatever bytes it is given.
const maxCharBytes UTF16Bytes = 12

// creditDivisor sets how much released data a receiver batches before it
// sends channel/credit while it is not caught up: WindowBytes/creditDivisor.
// It bounds the rate of credit messages (a peer that releases byte by byte
// must not cause one control message per byte) while returning credit long
// before the sender stalls on a full window.
const creditDivisor = 16

// finalMember is what final adds to a channel/frame notification.
const finalMember = `,"final":true`

// LimitsError reports a limit value that the seed does not allow.
type LimitsError struct {
	Field string     // JSON member name: "windowBytes" or "maximumFrameBytes"
	Got   UTF16Bytes // the value given
	Min   UTF16Bytes // the smallest value allowed
}

func (e *LimitsError) Error() string {
	return fmt.Sprintf("delivery: %s %d < %d", e.Field, e.Got, e.Min)
}

// Validate reports whether l is allowed by the seed: WindowBytes > 0 and
// MaximumFrameBytes >= MinimumFrameBytes. The error is a *LimitsError naming
// the first bad field.
func (l Limits) Validate() error {
	if l.WindowBytes <= 0 {
		return &LimitsError{Field: "windowBytes", Got: l.WindowBytes, Min: 1}
	}
	if l.MaximumFrameBytes < MinimumFrameBytes {
		return &LimitsError{Field: "maximumFrameBytes", Got: l.MaximumFrameBytes, Min: MinimumFrameBytes}
	}
	return nil
}

// ErrDecline is wrapped by every error from Negotiate: the offer is declined
// and the subscription uses ordinary delivery (the result omits flowControl).
var ErrDecline = errors.New("delivery: windowed delivery declined")

// MinFrameBudget is the smallest budget for which Fragmenter.Next is sure to
// make progress on channel, whatever the message holds: the final frame's
// envelope plus the largest escaped character. Negotiate declines limits
// whose MaximumFrameBytes is below it.
func MinFrameBudget(channel string) UTF16Bytes {
	return FrameOverhead(channel, true) + maxCharBytes
}

// Negotiate returns the accepted limits for one direction of a subscription
// on channel: each value is min(offered, hostMax), so it never exceeds the
// offer. It returns an error wrapping ErrDecline (and the *LimitsError, if
// any) when the offer or hostMax is invalid, or when a channel/frame
// fragment on channel that carries one character cannot fit within the
// accepted MaximumFrameBytes (seed: the server MUST decline then).
// Call it once for clientReceive and once for hostReceive.
func Negotiate(channel string, offered, hostMax Limits) (Limits, error) {
	if err := offered.Validate(); err != nil {
		return Limits{}, fmt.Errorf("%w: offered limits: %w", ErrDecline, err)
	}
	if err := hostMax.Validate(); err != nil {
		return Limits{}, fmt.Errorf("%w: host maximum limits: %w", ErrDecline, err)
	}
	acc := Limits{
		WindowBytes:       min(offered.WindowBytes, hostMax.WindowBytes),
		MaximumFrameBytes: min(offered.MaximumFrameBytes, hostMax.MaximumFrameBytes),
	}
	if need := MinFrameBudget(channel); acc.MaximumFrameBytes < need {
		return Limits{}, fmt.Errorf("%w: maximumFrameBytes %d cannot carry a channel/frame fragment for %q (needs %d)",
			ErrDecline, acc.MaximumFrameBytes, channel, need)
	}
	return acc, nil
}
