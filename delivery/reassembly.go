package delivery

import "unicode/utf8"

// Reassembler joins the data of channel/frame notifications for one
// subscription and direction (seed 000 "Fragments"): at most one fragmented
// message is in progress, and its joined text is bounded by a maximum
// message size, because windowed delivery limits each frame but not a whole
// message (seed "Limitations"). Its buffer never holds more than that
// maximum. Like the windows it is bare state owned by one goroutine.
type Reassembler struct {
	max int
	buf []byte
}

// NewReassembler returns a Reassembler that accepts joined messages of up
// to maxMessage bytes of UTF-8 text. maxMessage must be positive; it panics
// otherwise (a configuration bug).
func NewReassembler(maxMessage int) *Reassembler {
	if maxMessage <= 0 {
		panic("delivery: NewReassembler: maxMessage must be positive")
	}
	return &Reassembler{max: maxMessage}
}

// Add adds the decoded data of one channel/frame notification. When final is
// true it returns the joined message, which the caller then owns, and
// starts over. Errors are *ViolationError: EmptyFragment for empty data,
// BadFragment for data that is not valid UTF-8 (a divided surrogate pair
// decoded as WTF-8), MessageTooLarge when the joined text would exceed the
// maximum (Got and Limit in UTF-8 bytes). After an error the partial message
// is discarded. Release the frame's window bytes as it arrives, not when
// the message completes.
func (r *Reassembler) Add(data string, final bool) (message []byte, complete bool, err error) {
	switch {
	case data == "":
		r.Reset()
		return nil, false, &ViolationError{Kind: EmptyFragment}
	case len(data) > r.max-len(r.buf):
		got := len(r.buf) + len(data)
		r.Reset()
		return nil, false, &ViolationError{Kind: MessageTooLarge, Got: UTF16Bytes(got), Limit: UTF16Bytes(r.max)}
	case !utf8.ValidString(data):
		r.Reset()
		return nil, false, &ViolationError{Kind: BadFragment}
	}
	need := len(r.buf) + len(data)
	if need > cap(r.buf) {
		// Grow by doubling, but never past the maximum: memory held per
		// subscription stays within it.
		nb := make([]byte, len(r.buf), min(max(2*cap(r.buf), need), r.max))
		copy(nb, r.buf)
		r.buf = nb
	}
	r.buf = append(r.buf, data...)
	if !final {
		return nil, false, nil
	}
	message = r.buf
	r.buf = nil
	return message, true, nil
}

// InProgress reports whether a fragmented message has been started and not
// finished. While it has, any other data message for the subscription and
// direction is a FragmentInterleaved violation (the caller checks that).
func (r *Reassembler) InProgress() bool { return len(r.buf) > 0 }

// Reset discards a partial message, as both peers do on reconnection.
func (r *Reassembler) Reset() { r.buf = nil }
