package delivery

import "unicode/utf8"

// Reassembler joins the data of channel/frame notifications for one
// subscription and direction (seed 000 "Fragments"): at most one fragmented
// message is in progress, and its joined text is bounded by a maximum
// message size in UTF-16 bytes (seed 000 "Measuring Size": the unit of every
// size in windowed delivery), because windowed delivery limits each frame but
// not a whole message (seed "Limitations"). The size counted is that of the
// joined text, summed as each fragment's data is added. Its buffer holds
// UTF-8, so never more than 3/2 × that maximum in bytes (a BMP character
// above U+07FF: 3 UTF-8 bytes, 2 UTF-16 bytes). Like the windows it is bare
// state owned by one goroutine.
type Reassembler struct {
	max  UTF16Bytes
	size UTF16Bytes // UTF-16 bytes of buf
	buf  []byte
}

// NewReassembler returns a Reassembler that accepts joined messages of up
// to maxMessage UTF-16 bytes. maxMessage must be positive; it panics
// otherwise (a configuration bug).
func NewReassembler(maxMessage UTF16Bytes) *Reassembler {
	if maxMessage <= 0 {
		panic("delivery: NewReassembler: maxMessage must be positive")
	}
	return &Reassembler{max: maxMessage}
}

// Add adds the decoded data of one channel/frame notification. When final is
// true it returns the joined message, which the caller then owns, and
// starts over. Errors are *ViolationError: EmptyFragment for empty data,
// MessageTooLarge when the joined text would exceed the maximum (Got and
// Limit in UTF-16 bytes, data measured as by MeasureString), BadFragment for
// data that is not valid UTF-8 (a divided surrogate pair decoded as WTF-8).
// After an error the partial message is discarded. Release the frame's
// window bytes as it arrives, not when the message completes.
func (r *Reassembler) Add(data string, final bool) (message []byte, complete bool, err error) {
	if data == "" {
		r.Reset()
		return nil, false, &ViolationError{Kind: EmptyFragment}
	}
	size := MeasureString(data)
	switch {
	case size > r.max-r.size:
		got := r.size + size
		r.Reset()
		return nil, false, &ViolationError{Kind: MessageTooLarge, Got: got, Limit: r.max}
	case !utf8.ValidString(data):
		r.Reset()
		return nil, false, &ViolationError{Kind: BadFragment}
	}
	need := len(r.buf) + len(data)
	if need > cap(r.buf) {
		// Grow by doubling, but never past the most UTF-8 a message of
		// the maximum can take: memory held per subscription stays within
		// it. need is within it: valid UTF-8 takes at most 3/2 × its
		// UTF-16 bytes.
		nb := make([]byte, len(r.buf), min(max(2*cap(r.buf), need), r.maxBuf()))
		copy(nb, r.buf)
		r.buf = nb
	}
	r.buf = append(r.buf, data...)
	r.size += size
	if !final {
		return nil, false, nil
	}
	message = r.buf
	r.buf, r.size = nil, 0
	return message, true, nil
}

// maxBuf is the most UTF-8 bytes a message of r.max UTF-16 bytes can take.
func (r *Reassembler) maxBuf() int { return int(r.max / 2 * 3) }

// InProgress reports whether a fragmented message has been started and not
// finished. While it has, any other data message for the subscription and
// direction is a FragmentInterleaved violation (the caller checks that).
func (r *Reassembler) InProgress() bool { return len(r.buf) > 0 }

// Reset discards a partial message, as both peers do on reconnection.
func (r *Reassembler) Reset() { r.buf, r.size = nil, 0 }
