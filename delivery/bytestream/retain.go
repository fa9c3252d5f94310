package bytestream

import (
	"fmt"

	"github.com/sidecar-dev/sidecar/delivery"
)

// Retained is one direction of a byte stream as its sender keeps it for a
// reconnect (DESIGN.md §6, seed 001 "complete replay to the same retained
// socket, or explicit failure"): every data and end-of-stream message sent
// on the current connection that the peer has not released yet (credited),
// whole, in order. The peer's credit is cumulative and falls only on
// message boundaries (seed 000), so a message is released once the
// consumed count passes the stream's sent count at which it started.
//
// Bound: a message is sent only while the window has room, so what is
// retained never exceeds the window plus one message (windowBytes +
// maximumFrameBytes, UTF-16 bytes) once Credit has seen the consumed
// count: TestRetainedBound.
//
// Not safe for concurrent use: its owner's lock guards it.
type Retained struct {
	msgs []retainedMsg
	size delivery.UTF16Bytes // the messages' sizes
	// released is the offset of the first byte not yet released: the
	// peer has released every byte before it, and so has received it.
	released DecodedOffset
	// sent is the offset past the last byte ever sent, eofSent whether
	// tcp/eof was.
	sent    DecodedOffset
	eofSent bool
}

type retainedMsg struct {
	m       delivery.Message    // its text or binary form, and its size
	start   delivery.UTF16Bytes // the stream's sent count when it started
	end     DecodedOffset       // the offset past its bytes (end of stream: the final offset)
	eof     bool
	recycle bool // its buffer goes back to the pool once released
}

// Resend is a message to send again after a reconnect, in the form it was
// sent (a binary form is written as its text on a connection without
// them: delivery.Message.Form). Its buffer never goes back to the pool
// (see Retained.Resend).
type Resend struct {
	Msg delivery.Message
	// End is the offset past the message's bytes; EOF marks the end of
	// stream.
	End DecodedOffset
	EOF bool
}

// Sent records message m (its Size set) handed to the stream when its
// sent count was start: data whose bytes end at end, or (eof) the end of
// stream at end. recycle says its buffer came from Buffer and may go back
// once released.
func (r *Retained) Sent(m delivery.Message, start delivery.UTF16Bytes, end DecodedOffset, eof, recycle bool) {
	r.msgs = append(r.msgs, retainedMsg{m: m, start: start, end: end, eof: eof, recycle: recycle})
	r.size += m.Size
	if eof {
		r.eofSent = true
	} else {
		r.sent = max(r.sent, end)
	}
}

// Credit drops the messages the peer released: those that started below
// consumed, the stream's consumed count. Their buffers go back to the pool
// (when from Buffer): the peer has them, so the writer is done with them.
func (r *Retained) Credit(consumed delivery.UTF16Bytes) {
	n := 0
	for n < len(r.msgs) && r.msgs[n].start < consumed {
		m := r.msgs[n]
		r.size -= m.m.Size
		if !m.eof {
			r.released = max(r.released, m.end)
		}
		if m.recycle {
			RecycleMessage(m.m)
		}
		r.msgs[n] = retainedMsg{}
		n++
	}
	if n == len(r.msgs) {
		r.msgs = r.msgs[:0]
	} else if n > 0 {
		r.msgs = r.msgs[n:]
	}
}

// Size returns the UTF-16 bytes retained (the messages' sizes).
func (r *Retained) Size() delivery.UTF16Bytes { return r.size }

// Len returns the number of messages retained.
func (r *Retained) Len() int { return len(r.msgs) }

// Released returns the offset up to which the peer has released the
// bytes: what Resend can no longer send again.
func (r *Retained) Released() DecodedOffset { return r.released }

// Check reports whether a peer that has received every byte below
// received, and the end of stream if eof, can be resumed from r: the
// error Resend would return, without changing r.
func (r *Retained) Check(received DecodedOffset, eof bool) error {
	switch {
	case received > r.sent:
		return fmt.Errorf("%w: the peer says it received %d bytes, but only %d were sent", ErrProtocol, received, r.sent)
	case received < r.released:
		return fmt.Errorf("%w: the peer says it received %d bytes, but released %d", ErrProtocol, received, r.released)
	case eof && !r.eofSent:
		return fmt.Errorf("%w: the peer says it received the end of stream, which was not sent", ErrProtocol)
	}
	return nil
}

// Resend empties r for a new connection (its counters start at zero) and
// returns the messages to send again, in order, for a peer that has
// received every byte below received, and the end of stream if eof: each
// message with bytes at or past received (whole: the peer drops what it
// has, by the offset), then the end of stream if sent and the peer lacks
// it. A peer that
// claims bytes never sent, or lacks bytes it released, cannot be
// resumed: the error says which (the channel is then reset).
func (r *Retained) Resend(received DecodedOffset, eof bool) ([]Resend, error) {
	if err := r.Check(received, eof); err != nil {
		return nil, err
	}
	var out []Resend
	for i, m := range r.msgs {
		again := m.end > received
		if m.eof {
			again = !eof
		}
		if again {
			// Never recycled, even once credited on the new connection:
			// the lost connection's writer may still be reading it (a
			// write in progress at the cut), unordered with anything of
			// the new connection. For the same reason it goes without
			// its frame room (Framed): a FramedWriter writes a header
			// there.
			m.m.Framed = nil
			out = append(out, Resend{Msg: m.m, End: m.end, EOF: m.eof})
		}
		// The others are left to the collector too, for the same reason.
		r.msgs[i] = retainedMsg{}
	}
	r.msgs, r.size = r.msgs[:0], 0
	r.released = received
	return out, nil
}

// Drop releases everything retained (the channel ended), to the
// collector: the last message may still be on its way out, so its buffer
// must not be reused.
func (r *Retained) Drop() {
	clear(r.msgs)
	r.msgs, r.size = nil, 0
}
