package delivery

import (
	"sync"
	"unicode/utf8"
)

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
	// budget, if not nil, is shared with the connection's other
	// Reassemblers; size is what this one has taken of it.
	budget *PartialBudget
}

// PartialBudget bounds the partial messages several Reassemblers hold
// together: those of one connection, across its subscriptions (config
// delivery.max_partial_bytes), in UTF-16 bytes of joined text, the data
// of every fragment received of a message not yet finished. Without it a
// peer could start a message on each of its subscriptions and leave each
// unfinished just below the maximum message size (16 subscriptions × 16
// MiB held per connection). A fragment that would take the total past
// the bound is a PartialBytesExceeded violation, which closes the
// connection; its data is not kept and its window bytes are not released
// (no credit for it). Safe for concurrent use.
type PartialBudget struct {
	limit UTF16Bytes
	mu    sync.Mutex
	used  UTF16Bytes
}

// NewPartialBudget returns a budget of limit UTF-16 bytes; limit must be
// positive (it panics otherwise: a configuration bug).
func NewPartialBudget(limit UTF16Bytes) *PartialBudget {
	if limit <= 0 {
		panic("delivery: NewPartialBudget: limit must be positive")
	}
	return &PartialBudget{limit: limit}
}

// Limit returns the bound.
func (b *PartialBudget) Limit() UTF16Bytes { return b.limit }

// Used returns the UTF-16 bytes of partial messages held now.
func (b *PartialBudget) Used() UTF16Bytes {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// take adds n to what is held if it stays within the limit; it returns
// the total with n, taken or not.
func (b *PartialBudget) take(n UTF16Bytes) (total UTF16Bytes, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if n > b.limit-b.used {
		return b.used + n, false
	}
	b.used += n
	return b.used, true
}

func (b *PartialBudget) give(n UTF16Bytes) {
	if n == 0 {
		return
	}
	b.mu.Lock()
	b.used -= n
	b.mu.Unlock()
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

// NewReassemblerIn is NewReassembler whose partial message counts against
// budget, shared with other Reassemblers (nil: none).
func NewReassemblerIn(maxMessage UTF16Bytes, budget *PartialBudget) *Reassembler {
	r := NewReassembler(maxMessage)
	r.budget = budget
	return r
}

// Add adds the decoded data of one channel/frame notification. When final is
// true it returns the joined message, which the caller then owns, and
// starts over. Errors are *ViolationError: EmptyFragment for empty data,
// MessageTooLarge when the joined text would exceed the maximum (Got and
// Limit in UTF-16 bytes, data measured as by MeasureString), BadFragment for
// data that is not valid UTF-8 (a divided surrogate pair decoded as WTF-8),
// PartialBytesExceeded when a fragment that does not finish its message
// would take the budget's partial messages past its limit (Got: their
// total with it, Limit: the budget's).
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
	if !final && r.budget != nil {
		if total, ok := r.budget.take(size); !ok {
			r.Reset()
			return nil, false, &ViolationError{Kind: PartialBytesExceeded, Got: total, Limit: r.budget.limit}
		}
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
	if !final {
		r.size += size
		return nil, false, nil
	}
	message = r.buf
	r.Reset() // gives back what the fragments before this one took
	return message, true, nil
}

// maxBuf is the most UTF-8 bytes a message of r.max UTF-16 bytes can take.
func (r *Reassembler) maxBuf() int { return int(r.max / 2 * 3) }

// InProgress reports whether a fragmented message has been started and not
// finished. While it has, any other data message for the subscription and
// direction is a FragmentInterleaved violation (the caller checks that).
func (r *Reassembler) InProgress() bool { return len(r.buf) > 0 }

// Reset discards a partial message, as both peers do on reconnection,
// and gives its bytes back to the budget.
func (r *Reassembler) Reset() {
	if r.budget != nil {
		r.budget.give(r.size)
	}
	r.buf, r.size = nil, 0
}
