package delivery

import (
	"bytes"
	"encoding/json"
	"errors"
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
	r := NewReassembler(10)
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
	wantViolation(t, err, MessageTooLarge, 11, 10)
	if r.InProgress() || r.buf != nil {
		t.Fatal("partial kept after MessageTooLarge")
	}
	_, _, err = r.Add("01234567890", true)
	wantViolation(t, err, MessageTooLarge, 11, 10)

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
// buffer never holds more than the maximum.
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
			case len(model)+len(data) > fuzzMax:
				if !errors.As(err, &v) || v.Kind != MessageTooLarge || v.Got != UTF16Bytes(len(model)+len(data)) {
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
			if len(r.buf) > fuzzMax || cap(r.buf) > fuzzMax {
				t.Fatalf("buffer len %d cap %d beyond %d", len(r.buf), cap(r.buf), fuzzMax)
			}
			if r.InProgress() != (len(model) > 0) {
				t.Fatalf("InProgress %v, model %q", r.InProgress(), model)
			}
		}
	})
}
