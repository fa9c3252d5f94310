package delivery

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestReassemblerSeed(t *testing.T) {
	r := NewReassembler(1 << 20)
	var d1, d2 decodedFrame
	if err := json.Unmarshal([]byte(seedFrame1), &d1); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(seedFrame2), &d2); err != nil {
		t.Fatal(err)
	}
	if d1.Params.Data != seedFirst {
		t.Fatalf("first data %q", d1.Params.Data)
	}
	msg, complete, err := r.Add(d1.Params.Data, false)
	if msg != nil || complete || err != nil || !r.InProgress() {
		t.Fatalf("first: %q %v %v", msg, complete, err)
	}
	msg, complete, err = r.Add(d2.Params.Data, true)
	if !complete || err != nil || string(msg) != seedAction || r.InProgress() {
		t.Fatalf("last: %q %v %v", msg, complete, err)
	}
	if Measure(msg) != 284 {
		t.Fatalf("joined measures %d", Measure(msg))
	}
	// The returned message is the caller's: the next message does not
	// overwrite it.
	if _, _, err := r.Add("xyz", false); err != nil {
		t.Fatal(err)
	}
	if string(msg) != seedAction {
		t.Fatal("returned message was overwritten")
	}
}

func TestReassemblerErrors(t *testing.T) {
	r := NewReassembler(20) // UTF-16 bytes: ten ASCII characters
	if _, _, err := r.Add("abc", false); err != nil {
		t.Fatal(err)
	}
	_, _, err := r.Add("", true)
	wantViolation(t, err, EmptyFragment, 0, 0)
	if r.InProgress() {
		t.Fatal("partial kept after error")
	}

	if _, _, err := r.Add("0123456", false); err != nil {
		t.Fatal(err)
	}
	if msg, ok, err := r.Add("789", true); err != nil || !ok || string(msg) != "0123456789" {
		t.Fatalf("exactly the maximum: %q %v %v", msg, ok, err)
	}
	if _, _, err := r.Add("0123456", false); err != nil {
		t.Fatal(err)
	}
	_, _, err = r.Add("7890", true)
	wantViolation(t, err, MessageTooLarge, 22, 20)
	if r.InProgress() || r.buf != nil {
		t.Fatal("partial kept after MessageTooLarge")
	}
	_, _, err = r.Add("01234567890", true)
	wantViolation(t, err, MessageTooLarge, 22, 20)

	_, _, err = r.Add("\xed\xa0\xbd", false) // half a surrogate pair, as WTF-8
	wantViolation(t, err, BadFragment, 0, 0)

	if _, _, err := r.Add("ab", false); err != nil {
		t.Fatal(err)
	}
	r.Reset()
	if r.InProgress() {
		t.Fatal("Reset kept the partial")
	}
	if msg, ok, _ := r.Add("cd", true); !ok || string(msg) != "cd" {
		t.Fatalf("after Reset: %q", msg)
	}
}

// The maximum is in UTF-16 bytes, whatever the UTF-8 the message takes:
// ASCII is 1 UTF-8 byte and 2 UTF-16 bytes, "€" (U+20AC) 3 and 2, "😀" 4
// and 4.
func TestReassemblerMaxIsUTF16(t *testing.T) {
	r := NewReassembler(1000)

	// 600 ASCII characters: 600 UTF-8 bytes, under 1000, but 1200 UTF-16
	// bytes, over it.
	if _, _, err := r.Add(strings.Repeat("a", 300), false); err != nil {
		t.Fatal(err)
	}
	_, _, err := r.Add(strings.Repeat("a", 300), true)
	wantViolation(t, err, MessageTooLarge, 1200, 1000)

	// 500 × "€": 1500 UTF-8 bytes, over 1000, but exactly 1000 UTF-16
	// bytes: accepted, and the buffer grew to hold it.
	euro := strings.Repeat("€", 250)
	if _, _, err := r.Add(euro, false); err != nil {
		t.Fatal(err)
	}
	msg, ok, err := r.Add(euro, true)
	if err != nil || !ok || string(msg) != euro+euro {
		t.Fatalf("500 × €: %d bytes %v %v", len(msg), ok, err)
	}
	if cap(msg) > 1500 {
		t.Fatalf("buffer cap %d beyond 1500, the most UTF-8 1000 UTF-16 bytes take", cap(msg))
	}

	// One more character of any kind is over.
	if _, _, err := r.Add(euro+euro, false); err != nil {
		t.Fatal(err)
	}
	_, _, err = r.Add("😀", true)
	wantViolation(t, err, MessageTooLarge, 1004, 1000)
}

// An Inbound bounds the reassembled message by maxMessage in UTF-16 bytes
// (config delivery.max_message_bytes), counting the fragments' data.
func TestInboundMaxMessageIsUTF16(t *testing.T) {
	const ch = "ahp-terminal:/t"
	limits := Limits{WindowBytes: 1 << 20, MaximumFrameBytes: 1024}
	s := NewScheduler(SchedulerConfig{})
	frames := func(in *Inbound, msg []byte) ([]byte, error) {
		t.Helper()
		f := NewFragmenter(ch, msg)
		for !f.Done() {
			frame, size, final, err := f.Next(nil, 1024)
			if err != nil {
				t.Fatal(err)
			}
			var d decodedFrame
			if err := json.Unmarshal(frame, &d); err != nil {
				t.Fatal(err)
			}
			if err := in.Receive(size); err != nil {
				t.Fatal(err)
			}
			m, complete, err := in.Frame(d.Params.Data, final, size)
			if err != nil || complete {
				return m, err
			}
		}
		t.Fatal("no final fragment")
		return nil, nil
	}
	wrap := func(text string) []byte {
		return []byte(`{"jsonrpc":"2.0","method":"action","params":{"channel":"` + ch + `","d":"` + text + `"}}`)
	}

	ascii := wrap(strings.Repeat("a", 3000)) // UTF-8 ≈ 3080, UTF-16 ≈ 6160
	if len(ascii) >= 4000 || Measure(ascii) <= 4000 {
		t.Fatalf("ascii: %d UTF-8, %d UTF-16 bytes", len(ascii), Measure(ascii))
	}
	_, err := frames(s.NewInbound(ch, limits, 4000), ascii)
	var v *ViolationError
	if !errors.As(err, &v) || v.Kind != MessageTooLarge || v.Limit != 4000 || v.Channel != ch {
		t.Fatalf("%d UTF-16 bytes over a 4000 maximum: %v, want MessageTooLarge 4000 on %s", Measure(ascii), err, ch)
	}

	euro := wrap(strings.Repeat("€", 1900)) // UTF-8 ≈ 5780, UTF-16 ≈ 3960
	if len(euro) <= 4000 || Measure(euro) > 4000 {
		t.Fatalf("euro: %d UTF-8, %d UTF-16 bytes", len(euro), Measure(euro))
	}
	msg, err := frames(s.NewInbound(ch, limits, 4000), euro)
	if err != nil || !bytes.Equal(msg, euro) {
		t.Fatalf("%d UTF-16 bytes within a 4000 maximum: %d bytes, %v", Measure(euro), len(msg), err)
	}
}

func TestNewReassemblerPanicsOnBadMax(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("no panic")
		}
	}()
	NewReassembler(0)
}

// fuzzMax is the small maximum message used by FuzzReassembler.
const fuzzMax = 64

// FuzzReassembler feeds arbitrary frame sequences. The input is a sequence
// of records: a header byte (bit 0: final, bits 1-7: data length) and then
// that many data bytes. It checks against a simple model, and that the
// buffer never holds more than the UTF-8 of a message of the maximum.
func FuzzReassembler(f *testing.F) {
	rec := func(final bool, data string) []byte {
		h := byte(len(data)) << 1
		if final {
			h |= 1
		}
		return append([]byte{h}, data...)
	}
	f.Add(rec(true, "{}"))
	f.Add(append(rec(false, seedFirst[:40]), rec(true, seedFirst[40:])...))
	f.Add(append(rec(false, "abc"), rec(true, "")...))
	f.Add(append(append(rec(false, "😀é"), rec(false, "\xf0\x9f")...), 0x01))
	f.Add(bytes.Repeat(rec(false, "0123456789abcdef"), 5))
	f.Fuzz(func(t *testing.T, in []byte) {
		r := NewReassembler(fuzzMax)
		var model []byte
		for len(in) > 0 {
			final := in[0]&1 == 1
			n := min(int(in[0]>>1), len(in)-1)
			data := string(in[1 : 1+n])
			in = in[1+n:]

			msg, complete, err := r.Add(data, final)
			var v *ViolationError
			switch {
			case data == "":
				if !errors.As(err, &v) || v.Kind != EmptyFragment {
					t.Fatalf("empty data: %v", err)
				}
				model = nil
			case Measure(model)+MeasureString(data) > fuzzMax:
				if !errors.As(err, &v) || v.Kind != MessageTooLarge || v.Got != Measure(model)+MeasureString(data) {
					t.Fatalf("over max: %v", err)
				}
				model = nil
			case !utf8.ValidString(data):
				if !errors.As(err, &v) || v.Kind != BadFragment {
					t.Fatalf("invalid data %q: %v", data, err)
				}
				model = nil
			default:
				if err != nil {
					t.Fatalf("Add(%q): %v", data, err)
				}
				model = append(model, data...)
				if complete != final {
					t.Fatalf("complete %v, final %v", complete, final)
				}
				if final {
					if !bytes.Equal(msg, model) {
						t.Fatalf("joined %q, want %q", msg, model)
					}
					model = nil
				}
			}
			if len(r.buf) > fuzzMax*3/2 || cap(r.buf) > fuzzMax*3/2 || r.size != Measure(r.buf) {
				t.Fatalf("buffer len %d cap %d size %d: beyond %d UTF-8 bytes, or not its UTF-16 size %d", len(r.buf), cap(r.buf), r.size, fuzzMax*3/2, Measure(r.buf))
			}
			if r.InProgress() != (len(model) > 0) {
				t.Fatalf("InProgress %v, model %q", r.InProgress(), model)
			}
		}
	})
}

// TestPartialBudgetAcrossInbounds: the partial messages of one
// connection's Inbounds share SchedulerConfig.PartialBytes: they fill it
// to exactly the bound, the next unfinished fragment is a
// PartialBytesExceeded violation that is neither kept nor released (no
// credit for it), and a finished, failed or discarded message gives its
// bytes back.
func TestPartialBudgetAcrossInbounds(t *testing.T) {
	limits := Limits{WindowBytes: 1 << 20, MaximumFrameBytes: 4096}
	s := NewScheduler(SchedulerConfig{PartialBytes: 10000})
	a := s.NewInbound("ahp-terminal:/a", limits, 8000)
	b := s.NewInbound("ahp-terminal:/b", limits, 8000)
	c := s.NewInbound("ahp-terminal:/c", limits, 8000)
	frag := strings.Repeat("x", 1000) // 2000 UTF-16 bytes
	add := func(in *Inbound, data string, final bool) ([]byte, bool, error) {
		t.Helper()
		size := MeasureString(data)
		if err := in.Receive(size); err != nil {
			t.Fatal(err)
		}
		return in.Frame(data, final, size)
	}
	used := func(want UTF16Bytes) {
		t.Helper()
		if got := s.PartialBytes(); got != want {
			t.Fatalf("PartialBytes = %d, want %d", got, want)
		}
	}
	for _, in := range []*Inbound{a, a, b, b, c} {
		if _, _, err := add(in, frag, false); err != nil {
			t.Fatal(err)
		}
	}
	used(10000)
	_, releasedBefore := c.Counters()
	_, _, err := add(c, "y", false)
	wantViolation(t, err, PartialBytesExceeded, 10002, 10000)
	if _, released := c.Counters(); released != releasedBefore {
		t.Fatalf("the fragment beyond the bound was released (%d -> %d): credit for it", releasedBefore, released)
	}
	used(8000) // c's partial message was discarded with it
	msg, complete, err := add(a, "z", true)
	if err != nil || !complete || string(msg) != frag+frag+"z" {
		t.Fatalf("finishing a: %d bytes, complete %v, %v", len(msg), complete, err)
	}
	used(4000)
	b.Discard()
	used(0)
	if _, complete, err := add(b, frag, false); err != nil || complete {
		t.Fatalf("a fragment after Discard: complete %v, %v", complete, err)
	}
	used(0)
	if received, released := b.Counters(); received != released {
		t.Fatalf("a fragment after Discard: received %d, released %d", received, released)
	}
	if _, _, err := add(a, frag, false); err != nil {
		t.Fatal(err)
	}
	used(2000)
	_, _, err = a.Frame("", false, 0) // any other violation gives back too
	wantViolation(t, err, EmptyFragment, 0, 0)
	used(0)
}

// A Scheduler without PartialBytes bounds each message only.
func TestPartialBudgetOff(t *testing.T) {
	s := NewScheduler(SchedulerConfig{})
	in := s.NewInbound("ahp-terminal:/a", Limits{WindowBytes: 1 << 20, MaximumFrameBytes: 4096}, 1<<20)
	for range 100 {
		if _, _, err := in.Frame(strings.Repeat("x", 1000), false, 2000); err != nil {
			t.Fatal(err)
		}
	}
	if got := s.PartialBytes(); got != 0 {
		t.Fatalf("PartialBytes = %d, want 0", got)
	}
}

// TestAccept: the one receiving path of host and client. A whole message
// counts and is handed on as it came; fragments count, are released
// until the last, and the reassembled text comes back parsed; a whole
// message inside a fragmented one, a reassembled text that is no
// notification or is another channel's, and data past the window are
// violations of the subscription's channel.
func TestAccept(t *testing.T) {
	parse := func(text []byte) (string, string, bool) {
		s := string(text)
		ch, body, ok := strings.Cut(s, "|")
		return body, ch, ok && body != ""
	}
	s := NewScheduler(SchedulerConfig{})
	in := s.NewInbound("c", Limits{WindowBytes: 4096, MaximumFrameBytes: 1024}, 1<<20)
	if _, text, complete, err := Accept(in, 100, nil, parse); err != nil || !complete || text != nil {
		t.Fatalf("whole: %q %v %v", text, complete, err)
	}
	if _, _, complete, err := Accept(in, 200, &Fragment{Data: "c|hel"}, parse); err != nil || complete {
		t.Fatalf("first fragment: complete %v %v", complete, err)
	}
	if h, text, complete, err := Accept(in, 300, &Fragment{Data: "lo", Final: true}, parse); err != nil || !complete || h != "hello" || string(text) != "c|hello" {
		t.Fatalf("final fragment: %q %q %v %v", h, text, complete, err)
	}
	if received, released := in.Counters(); received != 600 || released != 200 {
		t.Fatalf("received %d, released %d; want 600 and the first fragment's 200", received, released)
	}
	in.Release(400) // the consumer took the two messages
	_, _, _, _ = Accept(in, 10, &Fragment{Data: "c|x"}, parse)
	_, _, _, err := Accept(in, 10, nil, parse)
	wantViolation(t, err, FragmentInterleaved, 0, 0)
	for _, c := range []struct {
		data string
		kind ViolationKind
	}{{"other|x", ChannelMismatch}, {"no bar", BadFragment}} {
		in := s.NewInbound("c", Limits{WindowBytes: 4096, MaximumFrameBytes: 1024}, 1<<20)
		_, _, _, err := Accept(in, 10, &Fragment{Data: c.data, Final: true}, parse)
		var v *ViolationError
		if !errors.As(err, &v) || v.Kind != c.kind || v.Channel != "c" {
			t.Errorf("%q: %v, want %v on c", c.data, err, c.kind)
		}
	}
	full := s.NewInbound("c", Limits{WindowBytes: 1024, MaximumFrameBytes: 1024}, 1<<20)
	_, _, _, _ = Accept(full, 1024, nil, parse)
	if _, _, _, err := Accept(full, 1024, nil, parse); err == nil {
		t.Fatal("data past the window + one frame accepted")
	}
}
