package bytestream

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/sidecar-dev/sidecar/delivery"
	"github.com/sidecar-dev/sidecar/rpc"
)

// retainFixture sends three tcp/data messages of 1000 bytes each (offsets
// 0, 1000, 2000) on a stream whose snapshot took the first snap UTF-16
// bytes, and returns them with their sizes.
func retainFixture(t *testing.T, r *Retained, snap delivery.UTF16Bytes) (texts [][]byte, sizes []delivery.UTF16Bytes) {
	t.Helper()
	enc := NewEncoder(rpc.TCPStream, "ahp-tcp:/r1")
	sent := snap
	for i := range 3 {
		off := DecodedOffset(1000 * i)
		text := enc.AppendData(nil, off, bytes.Repeat([]byte{byte('a' + i)}, 1000))
		size := enc.DataSize(len(text))
		r.Sent(delivery.Message{Text: text, Size: size}, sent, off+1000, false, false)
		sent += size
		texts, sizes = append(texts, text), append(sizes, size)
	}
	return texts, sizes
}

// TestRetainedCredit: credit releases whole messages at their boundaries,
// with exact counts: a credit that covers the snapshot and the first
// message leaves the other two (2 × 2,864 UTF-16 bytes) and releases the
// stream up to byte 1,000.
func TestRetainedCredit(t *testing.T) {
	var r Retained
	const snap = 200
	_, sizes := retainFixture(t, &r, snap)
	// 1,000 bytes are 1,336 of base64; the envelope is 93 characters
	// with offset 0, 96 with 1000 and 2000; UTF-16 counts each twice.
	if sizes[0] != 2858 || sizes[1] != 2864 || sizes[2] != 2864 {
		t.Fatalf("sizes %v, want [2858 2864 2864]", sizes)
	}
	const all = 2858 + 2*2864
	if r.Size() != all || r.Len() != 3 {
		t.Fatalf("retained %d bytes in %d messages, want %d in 3", r.Size(), r.Len(), all)
	}
	r.Credit(snap) // the snapshot only: nothing released
	if r.Size() != all || r.Released() != 0 {
		t.Fatalf("after the snapshot's credit: %d retained, released %d", r.Size(), r.Released())
	}
	r.Credit(snap + sizes[0])
	if r.Size() != 2*2864 || r.Len() != 2 || r.Released() != 1000 {
		t.Fatalf("after the first message's credit: %d retained in %d, released %d; want 5728 in 2, 1000", r.Size(), r.Len(), r.Released())
	}
	r.Credit(snap + sizes[0]) // stale: nothing changes
	if r.Size() != 2*2864 {
		t.Fatalf("a repeated credit changed the retained bytes: %d", r.Size())
	}
	r.Credit(snap + all)
	if r.Size() != 0 || r.Len() != 0 || r.Released() != 3000 {
		t.Fatalf("after all credit: %d retained in %d, released %d", r.Size(), r.Len(), r.Released())
	}
}

// TestRetainedResend: a resume sends again every retained message with
// bytes at or past the peer's offset, whole (the peer drops the head it
// has), then tcp/eof if the peer lacks it; offsets that cannot be true are
// errors.
func TestRetainedResend(t *testing.T) {
	for _, tc := range []struct {
		name     string
		received DecodedOffset
		want     []int // indexes of the messages sent again
	}{
		{"peer has nothing", 0, []int{0, 1, 2}},
		{"mid first message", 999, []int{0, 1, 2}},
		{"first message whole", 1000, []int{1, 2}},
		{"mid second message", 1500, []int{1, 2}},
		{"all but the last byte", 2999, []int{2}},
		{"everything", 3000, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r Retained
			texts, sizes := retainFixture(t, &r, 0)
			again, err := r.Resend(tc.received, false)
			if err != nil {
				t.Fatal(err)
			}
			if len(again) != len(tc.want) {
				t.Fatalf("%d messages again, want %d", len(again), len(tc.want))
			}
			for i, k := range tc.want {
				if !bytes.Equal(again[i].Msg.Text, texts[k]) || again[i].Msg.Size != sizes[k] || again[i].End != DecodedOffset(1000*(k+1)) || again[i].EOF {
					t.Fatalf("message %d again is not message %d", i, k)
				}
			}
			if r.Size() != 0 || r.Len() != 0 || r.Released() != tc.received {
				t.Fatalf("after Resend: %d retained in %d, released %d", r.Size(), r.Len(), r.Released())
			}
		})
	}
	t.Run("eof", func(t *testing.T) {
		var r Retained
		_, _ = retainFixture(t, &r, 0)
		eof := NewEncoder(rpc.TCPStream, "ahp-tcp:/r1").EOF(3000)
		r.Sent(delivery.Message{Text: eof, Size: delivery.Measure(eof)}, 2858+2*2864, 3000, true, false)
		again, err := r.Resend(3000, false)
		if err != nil || len(again) != 1 || !again[0].EOF || !bytes.Equal(again[0].Msg.Text, eof) {
			t.Fatalf("peer without the eof: %v, %+v", err, again)
		}
		var r2 Retained
		_, _ = retainFixture(t, &r2, 0)
		r2.Sent(delivery.Message{Text: eof, Size: delivery.Measure(eof)}, 3*2776, 3000, true, false)
		if again, err := r2.Resend(3000, true); err != nil || len(again) != 0 {
			t.Fatalf("peer with the eof: %v, %d again", err, len(again))
		}
	})
	for _, tc := range []struct {
		name     string
		received DecodedOffset
		eof      bool
	}{
		{"beyond what was sent", 3001, false},
		{"below what it released", 999, false},
		{"an eof never sent", 3000, true},
	} {
		t.Run("refused: "+tc.name, func(t *testing.T) {
			var r Retained
			_, sizes := retainFixture(t, &r, 0)
			r.Credit(sizes[0])
			if _, err := r.Resend(tc.received, tc.eof); !errors.Is(err, ErrProtocol) {
				t.Fatalf("Resend(%d, %v) = %v, want ErrProtocol", tc.received, tc.eof, err)
			}
		})
	}
}

// TestRetainedBound: on a stream that sends only while its window has
// room (as delivery.Stream does) and whose peer credits at random message
// boundaries, what is retained never exceeds the window plus one message,
// and a resume from any offset the peer can have sends again exactly the
// bytes it lacks, in order, no gap.
func TestRetainedBound(t *testing.T) {
	const window, maxFrame = 64 << 10, 16 << 10
	rng := rand.New(rand.NewPCG(15, 1))
	enc := NewEncoder(rpc.TCPStream, "ahp-tcp:/bound")
	var r Retained
	var sent, consumed delivery.UTF16Bytes
	var boundaries []delivery.UTF16Bytes // message ends not yet credited
	var ends []DecodedOffset             // their stream offsets
	var off DecodedOffset
	worst := delivery.UTF16Bytes(0)
	for step := range 20000 {
		if sent-consumed < window && rng.IntN(3) > 0 {
			n := 1 + rng.IntN(enc.MaxPayload(off, maxFrame))
			text := enc.AppendData(nil, off, make([]byte, n))
			size := enc.DataSize(len(text))
			r.Credit(consumed) // what the source sees before each message
			r.Sent(delivery.Message{Text: text, Size: size}, sent, off+DecodedOffset(n), false, false)
			sent += size
			off += DecodedOffset(n)
			boundaries, ends = append(boundaries, sent), append(ends, off)
			worst = max(worst, r.Size())
			if r.Size() > window+maxFrame {
				t.Fatalf("step %d: %d UTF-16 bytes retained, above window+frame %d", step, r.Size(), window+maxFrame)
			}
		} else if len(boundaries) > 0 {
			k := rng.IntN(len(boundaries)) + 1
			consumed = boundaries[k-1]
			boundaries, ends = boundaries[k:], ends[k:]
		}
	}
	t.Logf("at most %d UTF-16 bytes retained (window %d + frame %d)", worst, window, maxFrame)
	// The peer has everything credited and perhaps more.
	r.Credit(consumed)
	received := r.Released()
	if len(ends) > 0 {
		received += DecodedOffset(rng.IntN(int(ends[len(ends)-1] - received)))
	}
	again, err := r.Resend(received, false)
	if err != nil {
		t.Fatal(err)
	}
	next := received
	for _, m := range again {
		p, data, err := ParseData(m.Msg.Text[len(`{"jsonrpc":"2.0","method":"tcp/data","params":`) : len(m.Msg.Text)-1])
		if err != nil {
			t.Fatal(err)
		}
		data, err = Trim(p.Offset, data, next)
		if err != nil {
			t.Fatalf("a gap after %d: %v", next, err)
		}
		next += DecodedOffset(len(data))
	}
	if next != off {
		t.Fatalf("resent up to %d, want %d", next, off)
	}
}

// TestRetainedFramed: a retained binary form goes back to the pool from
// the start of its frame room once credited, and is sent again without
// its room (Framed nil: the lost connection's writer may still be reading
// the buffer, room included, so no header may be written there).
func TestRetainedFramed(t *testing.T) {
	enc := NewEncoder(rpc.TCPStream, "ahp-tcp:/r1")
	var r Retained
	var sent delivery.UTF16Bytes
	var msgs []delivery.Message
	for i := range 2 {
		m := enc.Data(DecodedOffset(8000*i), bytes.Repeat([]byte{byte('a' + i)}, 8000), true)
		if m.Framed == nil {
			t.Fatal("Data built no frame room")
		}
		r.Sent(m, sent, DecodedOffset(8000*(i+1)), false, true)
		sent += m.Size
		msgs = append(msgs, m)
	}
	for msgBufs.Len() > 0 { // an empty pool: what Credit gives back is all there is
		msgBufs.Get(1 << 20) // takes one, whatever its size
	}
	r.Credit(msgs[0].Size)
	if n := msgBufs.Len(); n != 1 {
		t.Fatalf("the pool holds %d buffers after the credit, want 1", n)
	}
	if b := Buffer(4 << 10); cap(b) != cap(msgs[0].Framed) || &b[:1][0] != &msgs[0].Framed[0] {
		t.Fatal("the buffer given back is not the first message's from its frame room")
	}
	again, err := r.Resend(8000, false)
	if err != nil || len(again) != 1 {
		t.Fatalf("Resend: %v, %d messages", err, len(again))
	}
	if m := again[0].Msg; m.Framed != nil || !bytes.Equal(m.Binary, msgs[1].Binary) {
		t.Fatalf("sent again with Framed %d bytes and a binary form of %d, want none and the form", len(m.Framed), len(m.Binary))
	}
}
