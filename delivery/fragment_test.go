package delivery

import (
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"unicode/utf8"

	"pgregory.net/rapid"
)

func TestAppendFrameSeed(t *testing.T) {
	rest := seedAction[len(seedFirst):]
	if !strings.HasPrefix(seedAction, seedFirst) {
		t.Fatal("seedFirst is not a prefix of seedAction")
	}
	f1 := AppendFrame(nil, seedChannel, []byte(seedFirst), false)
	f2 := AppendFrame(nil, seedChannel, []byte(rest), true)
	if string(f1) != seedFrame1 {
		t.Errorf("first fragment:\n got %s\nwant %s", f1, seedFrame1)
	}
	if string(f2) != seedFrame2 {
		t.Errorf("last fragment:\n got %s\nwant %s", f2, seedFrame2)
	}
	if a, b := Measure(f1), Measure(f2); a != 360 || b != 374 || a+b != 734 {
		t.Errorf("sizes %d + %d = %d, want 360 + 374 = 734", a, b, a+b)
	}
	for _, final := range []bool{false, true} {
		env := AppendFrame(nil, seedChannel, nil, final)
		if got := FrameOverhead(seedChannel, final); got != Measure(env) {
			t.Errorf("FrameOverhead(%v) = %d, text %s measures %d", final, got, env, Measure(env))
		}
	}
	if got := FrameOverhead(seedChannel, true) - FrameOverhead(seedChannel, false); got != 26 {
		t.Errorf(`,"final":true costs %d, want 26`, got)
	}
}

func TestFragmenterSeed(t *testing.T) {
	f := NewFragmenter(seedChannel, []byte(seedAction))
	if f.Done() || f.Remaining() != len(seedAction) {
		t.Fatalf("fresh: Done %v Remaining %d", f.Done(), f.Remaining())
	}
	// A budget of 360 carries exactly the seed's first fragment: the next
	// character is '"', which costs 4 escaped.
	frame, size, final, err := f.Next(nil, 360)
	if err != nil || final || size != 360 || string(frame) != seedFrame1 {
		t.Fatalf("first: %s size %d final %v err %v", frame, size, final, err)
	}
	if f.Remaining() != len(seedAction)-len(seedFirst) {
		t.Fatalf("Remaining %d", f.Remaining())
	}
	frame, size, final, err = f.Next(frame[:0], 1024)
	if err != nil || !final || size != 374 || string(frame) != seedFrame2 {
		t.Fatalf("last: %s size %d final %v err %v", frame, size, final, err)
	}
	if !f.Done() || f.Remaining() != 0 {
		t.Fatal("not done after final")
	}
	if _, _, _, err := f.Next(nil, 1024); err != io.EOF {
		t.Fatalf("Next after done: %v, want io.EOF", err)
	}

	// Budget 359 cannot carry the whole first piece; one byte less of data.
	f = NewFragmenter(seedChannel, []byte(seedAction))
	frame, size, _, _ = f.Next(nil, 359)
	if size != 358 || Measure(frame) != 358 {
		t.Fatalf("budget 359: size %d", size)
	}
	// Sent whole: 284 in a 1024 budget, one final frame (with its envelope).
	f = NewFragmenter(seedChannel, []byte(seedAction))
	_, size, final, _ = f.Next(nil, 1024)
	if !final || size != FrameOverhead(seedChannel, true)+284+2*28 { // 28 escapes: 26 quotes, 2 backslashes
		t.Fatalf("whole: size %d final %v", size, final)
	}
}

func TestAppendJSONString(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", `""`},
		{"plain text 123", `"plain text 123"`},
		{`a"b\c`, `"a\"b\\c"`},
		{"\b\f\n\r\t", `"\b\f\n\r\t"`},
		{"\x00\x01\x1f", `"\u0000\u0001\u001f"`},
		{"\x0b\x1b", `"\u000b\u001b"`},
		{"\x7f", "\"\x7f\""},
		{"<script>&</script>", `"<script>&</script>"`},
		{"\u2028\u2029", "\"\u2028\u2029\""},
		{"é😀", `"é😀"`},
		{"a\xffb", "\"a\uFFFDb\""},
		{"\xed\xa0\xbd", "\"\uFFFD\uFFFD\uFFFD\""},
		{"0123456789abcdef\"0123456789abcdef", `"0123456789abcdef\"0123456789abcdef"`},
		{"01234567\n", `"01234567\n"`},
	} {
		if got := string(AppendJSONString(nil, tc.in)); got != tc.want {
			t.Errorf("AppendJSONString(%q) = %s, want %s", tc.in, got, tc.want)
		}
		if got, want := jsonStringSize(tc.in), MeasureString(tc.want); got != want {
			t.Errorf("jsonStringSize(%q) = %d, want %d", tc.in, got, want)
		}
	}
}

func TestAppendJSONStringProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var s string
		if rapid.Bool().Draw(t, "bytes") {
			s = string(rapid.SliceOf(rapid.Byte()).Draw(t, "b"))
		} else {
			s = genText().Draw(t, "s")
		}
		out := AppendJSONString([]byte("prefix"), s)
		if !strings.HasPrefix(string(out), "prefix") {
			t.Fatal("dst not kept")
		}
		out = out[len("prefix"):]
		if !utf8.Valid(out) {
			t.Fatalf("invalid UTF-8 out of %q", s)
		}
		var back string
		if err := json.Unmarshal(out, &back); err != nil {
			t.Fatalf("%s: %v", out, err)
		}
		if want := string([]rune(s)); back != want { // one U+FFFD per bad byte
			t.Fatalf("round trip of %q gave %q", s, back)
		}
		if jsonStringSize(s) != Measure(out) {
			t.Fatalf("jsonStringSize %d, Measure %d", jsonStringSize(s), Measure(out))
		}
		// Only the characters JSON.stringify escapes are escaped.
		for i := 1; i < len(out)-1; i++ {
			if out[i] == '\\' {
				i++
				if !strings.ContainsRune(`"\bfnrtu`, rune(out[i])) {
					t.Fatalf("unexpected escape \\%c in %s", out[i], out)
				}
			}
		}
	})
}

func TestFragmenterSmallBudgets(t *testing.T) {
	ovN, ovF := FrameOverhead(seedChannel, false), FrameOverhead(seedChannel, true)
	for _, tc := range []struct {
		name   string
		msg    string
		budget UTF16Bytes
		data   string // "" for ErrFrameTooSmall
		final  bool
	}{
		{"nothing fits", "a", ovN + 1, "", false},
		{"fits only without final", "a", ovF + 1, "", false},
		{"one char final", "a", ovF + 2, "a", true},
		{"emoji needs 4", "😀", ovF + 3, "", false},
		{"emoji fits", "😀", ovF + 4, "😀", true},
		{"emoji not split", "a😀", ovN + 5, "a", false},
		{"quote needs 4", `"`, ovF + 3, "", false},
		{"control needs 12", "\x01x", ovN + 11, "", false},
		{"control fits", "\x01x", ovN + 12, "\x01", false},
		{"last char left for final", "ab", ovF + 2, "a", false},
		{"invalid byte is FFFD", "\xffb", ovN + 2, "\xff", false},
		{"3-byte rune is 2", "€€", ovF + 4, "€€", true},
	} {
		f := NewFragmenter(seedChannel, []byte(tc.msg))
		frame, size, final, err := f.Next(nil, tc.budget)
		if tc.data == "" {
			if !errors.Is(err, ErrFrameTooSmall) || f.Remaining() != len(tc.msg) || len(frame) != 0 {
				t.Errorf("%s: err %v remaining %d, want ErrFrameTooSmall, unchanged", tc.name, err, f.Remaining())
			}
			continue
		}
		if err != nil || final != tc.final {
			t.Errorf("%s: final %v err %v", tc.name, final, err)
			continue
		}
		if want := AppendFrame(nil, seedChannel, []byte(tc.data), final); string(frame) != string(want) {
			t.Errorf("%s: frame %s, want %s", tc.name, frame, want)
		}
		if size > tc.budget || size != Measure(frame) {
			t.Errorf("%s: size %d, measured %d, budget %d", tc.name, size, Measure(frame), tc.budget)
		}
	}
	// An empty message is done at once.
	if f := NewFragmenter(seedChannel, nil); !f.Done() {
		t.Error("empty message not done")
	} else if _, _, _, err := f.Next(nil, 1024); err != io.EOF {
		t.Errorf("empty message Next: %v", err)
	}
}

type decodedFrame struct {
	JSONRPC string `json:"jsonrpc"`
	Method  string `json:"method"`
	Params  struct {
		Channel string `json:"channel"`
		Data    string `json:"data"`
		Final   *bool  `json:"final"`
	} `json:"params"`
}

// fragmentAll splits msg with budgets drawn from budget and checks each
// frame; it returns the data joined by a Reassembler.
func fragmentAll(t *rapid.T, channel string, msg []byte, budget func() UTF16Bytes) string {
	f := NewFragmenter(channel, msg)
	r := NewReassembler(max(Measure(msg), 1)) // the joined text: msg with each invalid byte as U+FFFD, as Measure counts it
	var buf []byte
	for n := 0; ; n++ {
		if n > len(msg) {
			t.Fatal("more frames than message bytes")
		}
		b := budget()
		before := f.Remaining()
		frame, size, final, err := f.Next(buf[:0], b)
		if err != nil {
			t.Fatalf("Next(budget %d): %v", b, err)
		}
		buf = frame
		if size > b {
			t.Fatalf("frame of %d over budget %d", size, b)
		}
		if Measure(frame) != size {
			t.Fatalf("Measure %d != size %d: %s", Measure(frame), size, frame)
		}
		if !utf8.Valid(frame) {
			t.Fatalf("frame not valid UTF-8 (split sequence?): %q", frame)
		}
		piece := msg[len(msg)-before : len(msg)-f.Remaining()]
		if len(piece) == 0 {
			t.Fatal("empty data")
		}
		if !utf8.Valid(piece) && utf8.Valid(msg) {
			t.Fatalf("piece %q divides a character", piece)
		}
		var d decodedFrame
		if err := json.Unmarshal(frame, &d); err != nil {
			t.Fatalf("frame is not JSON: %v: %s", err, frame)
		}
		if d.JSONRPC != "2.0" || d.Method != "channel/frame" || d.Params.Channel != string([]rune(channel)) {
			t.Fatalf("bad envelope: %s", frame)
		}
		if (d.Params.Final != nil) != final || (final && !*d.Params.Final) || final != f.Done() {
			t.Fatalf("final %v, member %v, done %v", final, d.Params.Final, f.Done())
		}
		if d.Params.Data != string([]rune(string(piece))) {
			t.Fatalf("data %q, piece %q", d.Params.Data, piece)
		}
		// Greedy: a non-final frame could not have carried the next character,
		// unless it left the last character for the final frame.
		if !final && f.Remaining() > 0 {
			c, n := charUnits(msg, len(msg)-f.Remaining())
			if size+UTF16Bytes(c)*2 <= b && n != f.Remaining() {
				t.Fatalf("frame of %d stopped short of budget %d", size, b)
			}
		}
		joined, complete, err := r.Add(d.Params.Data, final)
		if err != nil {
			t.Fatalf("Reassembler: %v", err)
		}
		if complete != final {
			t.Fatalf("complete %v final %v", complete, final)
		}
		if final {
			return string(joined)
		}
	}
}

func genChannel() *rapid.Generator[string] {
	return rapid.OneOf(
		rapid.Just(seedChannel),
		rapid.Custom(func(t *rapid.T) string {
			return "ahp-terminal:/" + genText().Draw(t, "tail")
		}),
	)
}

func TestFragmenterProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		channel := genChannel().Draw(t, "channel")
		// Repeated, so that messages often need many frames.
		msg := strings.Repeat(genText().Filter(func(s string) bool { return s != "" }).Draw(t, "msg"),
			rapid.IntRange(1, 40).Draw(t, "repeat"))
		lo := MinFrameBudget(channel)
		hi := lo + UTF16Bytes(rapid.IntRange(0, 600).Draw(t, "spread"))
		got := fragmentAll(t, channel, []byte(msg), func() UTF16Bytes {
			return UTF16Bytes(rapid.Int64Range(int64(lo), int64(hi)).Draw(t, "budget"))
		})
		if got != msg {
			t.Fatalf("joined %q, want %q", got, msg)
		}
	})
}

// Real messages: JSON text of a notification, joined and parsed again.
func TestFragmenterJSONMessageProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		text := genText().Draw(t, "text")
		msg := append([]byte(`{"jsonrpc":"2.0","method":"action","params":{"channel":"ahp-terminal:/t1","action":{"type":"terminal/data","data":`),
			AppendJSONString(nil, text)...)
		msg = append(msg, `},"serverSeq":6}}`...)
		lo := MinFrameBudget(seedChannel)
		got := fragmentAll(t, seedChannel, msg, func() UTF16Bytes {
			return UTF16Bytes(rapid.Int64Range(int64(lo), 1024).Draw(t, "budget"))
		})
		var m struct {
			Params struct {
				Action struct{ Data string } `json:"action"`
			} `json:"params"`
		}
		if err := json.Unmarshal([]byte(got), &m); err != nil {
			t.Fatalf("joined message does not parse: %v", err)
		}
		if m.Params.Action.Data != text {
			t.Fatalf("data %q, want %q", m.Params.Action.Data, text)
		}
	})
}

// Arbitrary bytes: each invalid byte comes back as U+FFFD, and no frame
// ever holds invalid UTF-8.
func TestFragmenterBytesProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		msg := rapid.SliceOfN(rapid.Byte(), 1, 300).Draw(t, "msg")
		lo := MinFrameBudget(seedChannel)
		got := fragmentAll(t, seedChannel, msg, func() UTF16Bytes {
			return UTF16Bytes(rapid.Int64Range(int64(lo), int64(lo)+100).Draw(t, "budget"))
		})
		if want := string([]rune(string(msg))); got != want {
			t.Fatalf("joined %q, want %q", got, want)
		}
	})
}

// Below the minimum, Next either succeeds within the budget or returns
// ErrFrameTooSmall without moving.
func TestFragmenterTinyBudgetProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		msg := genText().Filter(func(s string) bool { return s != "" }).Draw(t, "msg")
		f := NewFragmenter(seedChannel, []byte(msg))
		ovN := FrameOverhead(seedChannel, false)
		for !f.Done() {
			b := ovN + UTF16Bytes(rapid.IntRange(-2, 40).Draw(t, "extra"))
			before := f.Remaining()
			frame, size, _, err := f.Next(nil, b)
			if errors.Is(err, ErrFrameTooSmall) {
				if f.Remaining() != before {
					t.Fatal("ErrFrameTooSmall moved the position")
				}
				c, _ := charUnits(msg, len(msg)-before)
				if ovN+UTF16Bytes(c)*2+26 <= b {
					t.Fatalf("ErrFrameTooSmall, but a final frame with the next character fits %d", b)
				}
				continue
			}
			if err != nil || size > b || Measure(frame) != size {
				t.Fatalf("size %d budget %d err %v", size, b, err)
			}
		}
	})
}

func TestFragmenterAllocs(t *testing.T) {
	msg := []byte(strings.Repeat(seedAction, 40))
	buf := make([]byte, 0, 2048)
	n := testing.AllocsPerRun(50, func() {
		f := Fragmenter{channel: seedChannel, message: msg, overhead: FrameOverhead(seedChannel, false)}
		for !f.Done() {
			buf, _, _, _ = f.Next(buf[:0], 1024)
		}
	})
	if n != 0 {
		t.Fatalf("Next allocates %v times per message", n)
	}
}

func BenchmarkFragmenter(b *testing.B) {
	for _, bc := range []struct {
		name string
		msg  string
	}{
		{"json-64KiB", strings.Repeat(seedAction, 65536/len(seedAction))},
		{"text-64KiB", strings.Repeat("plain terminal output, nothing to escape here ", 65536/48)},
		{"mixed-64KiB", strings.Repeat("héllo \"wörld\" 😀\r\n", 65536/24)},
	} {
		msg := []byte(bc.msg)
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(msg)))
			buf := make([]byte, 0, 16384)
			for b.Loop() {
				f := NewFragmenter(seedChannel, msg)
				for !f.Done() {
					var err error
					buf, _, _, err = f.Next(buf[:0], 16384)
					if err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}
