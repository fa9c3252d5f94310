package pty

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"pgregory.net/rapid"
)

// decodeAll feeds chunks and flushes, returning the merged output.
func decodeAll(chunks ...[]byte) Output {
	var d OutputDecoder
	var text strings.Builder
	var all Output
	merge := func(o Output) {
		text.WriteString(o.Text)
		all.Titles = append(all.Titles, o.Titles...)
		if o.Cwd != "" {
			all.Cwd = o.Cwd
		}
	}
	for _, c := range chunks {
		merge(d.Feed(c))
	}
	merge(d.Flush())
	all.Text = text.String()
	return all
}

func TestOutputDecoderTable(t *testing.T) {
	long := strings.Repeat("x", MaxOSCBytes+10)
	tests := []struct {
		name   string
		in     string
		text   string
		titles []string
		cwd    string
	}{
		{"plain", "hello\r\n", "hello\r\n", nil, ""},
		{"utf8", "caf\xc3\xa9 \xf0\x9f\x98\x80", "café 😀", nil, ""},
		{"invalid byte", "a\xffb", "a\uFFFDb", nil, ""},
		{"invalid continuation", "a\x80b", "a\uFFFDb", nil, ""},
		{"truncated before ascii", "a\xe2\x82b", "a\uFFFD\uFFFDb", nil, ""},
		{"incomplete at end", "a\xf0\x9f\x98", "a\uFFFD", nil, ""},
		{"csi passes", "\x1b[1;31mred\x1b[0m\x1b[2J", "\x1b[1;31mred\x1b[0m\x1b[2J", nil, ""},
		{"osc 133 bel", "a\x1b]133;A\x07b", "ab", nil, ""},
		{"osc 133 st", "a\x1b]133;D;0\x1b\\b", "ab", nil, ""},
		{"osc 633 bel", "\x1b]633;E;ls -la;abc\x07ls\r\n", "ls\r\n", nil, ""},
		{"osc 633 st", "\x1b]633;P;Cwd=/tmp\x1b\\$ ", "$ ", nil, ""},
		{"osc 1337 mark", "\x1b]1337;SetMark\x07x", "x", nil, ""},
		{"osc 1337 currentdir", "\x1b]1337;CurrentDir=/home/u\x07x", "x", nil, ""},
		{"osc 1337 version", "\x1b]1337;ShellIntegrationVersion=13;shell=bash\x07x", "x", nil, ""},
		{"osc 1337 other passes", "\x1b]1337;File=name=a:AAAA\x07x", "\x1b]1337;File=name=a:AAAA\x07x", nil, ""},
		{"osc 7", "\x1b]7;file://host/home/u\x07$ ", "$ ", nil, "file://host/home/u"},
		{"osc 7 twice", "\x1b]7;file://h/a\x07\x1b]7;file://h/b\x1b\\", "", nil, "file://h/b"},
		{"osc 0 title", "\x1b]0;vim \xc3\xa9\x07x", "\x1b]0;vim é\x07x", []string{"vim é"}, ""},
		{"osc 2 title st", "\x1b]2;t1\x1b\\\x1b]0;t2\x07", "\x1b]2;t1\x1b\\\x1b]0;t2\x07", []string{"t1", "t2"}, ""},
		{"osc 1 not a title", "\x1b]1;icon\x07", "\x1b]1;icon\x07", nil, ""},
		{"other osc passes", "\x1b]52;c;aGk=\x07", "\x1b]52;c;aGk=\x07", nil, ""},
		{"osc 1330 passes", "\x1b]1330;x\x07", "\x1b]1330;x\x07", nil, ""},
		{"osc aborted by esc", "\x1b]133;A\x1b[0m", "\x1b]133;A\x1b[0m", nil, ""},
		{"osc aborted by can", "\x1b]133;A\x18z", "\x1b]133;A\x18z", nil, ""},
		{"lone esc at end", "ab\x1b", "ab\x1b", nil, ""},
		{"esc esc", "\x1b\x1b]133;A\x07", "\x1b", nil, ""},
		{"unterminated si dropped at eof", "ab\x1b]133;A", "ab", nil, ""},
		{"unterminated other at eof", "ab\x1b]0;ti", "ab\x1b]0;ti", nil, ""},
		{"utf8 cut by escape", "a\xc3\x1b[0m", "a\uFFFD\x1b[0m", nil, ""},
		{"overlong osc passes", "\x1b]133;" + long + "\x07z", "\x1b]133;" + long + "\x07z", nil, ""},
		{"overlong osc st", "\x1b]0;" + long + "\x1b\\\x1b]133;A\x07z", "\x1b]0;" + long + "\x1b\\z", nil, ""},
		{"invalid utf8 in osc", "\x1b]0;a\xffb\x07", "\x1b]0;a\uFFFDb\x07", []string{"a\uFFFDb"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := decodeAll([]byte(tt.in))
			if got.Text != tt.text {
				t.Errorf("Text %q, want %q", got.Text, tt.text)
			}
			if !reflect.DeepEqual(got.Titles, tt.titles) {
				t.Errorf("Titles %q, want %q", got.Titles, tt.titles)
			}
			if got.Cwd != tt.cwd {
				t.Errorf("Cwd %q, want %q", got.Cwd, tt.cwd)
			}
			// Every split in two, and byte by byte, give the same result.
			in := []byte(tt.in)
			for i := 0; i <= len(in) && len(in) < 200; i++ {
				if s := decodeAll(in[:i], in[i:]); !reflect.DeepEqual(s, got) {
					t.Fatalf("split at %d: %+v, want %+v", i, s, got)
				}
			}
			var bytewise [][]byte
			for i := range in {
				bytewise = append(bytewise, in[i:i+1])
			}
			if s := decodeAll(bytewise...); !reflect.DeepEqual(s, got) {
				t.Fatalf("byte by byte: %+v, want %+v", s, got)
			}
		})
	}
}

// TestOutputDecoderSplitsSample checks every split position (in two and
// three parts) of a sample mixing multi-byte UTF-8, OSC 133/633 with both
// terminators, OSC 7 and an OSC 0 title.
func TestOutputDecoderSplitsSample(t *testing.T) {
	sample := []byte("\x1b]633;A\x07é$ \x1b]133;B\x1b\\ls 😀\r\n\x1b]633;C\x1b\\" +
		"\x1b]0;héllo 😀\x07\x1b[32mcafé\x1b[0m\r\n\x1b]7;file://h/tmp\x07\x1b]133;D;0\x07😀")
	want := Output{
		Text:   "é$ ls 😀\r\n\x1b]0;héllo 😀\x07\x1b[32mcafé\x1b[0m\r\n😀",
		Titles: []string{"héllo 😀"},
		Cwd:    "file://h/tmp",
	}
	if got := decodeAll(sample); !reflect.DeepEqual(got, want) {
		t.Fatalf("one feed: %+v, want %+v", got, want)
	}
	for i := 0; i <= len(sample); i++ {
		for j := i; j <= len(sample); j++ {
			got := decodeAll(sample[:i], sample[i:j], sample[j:])
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("split at %d,%d: %+v", i, j, got)
			}
		}
	}
}

func TestOutputDecoderHoldsBack(t *testing.T) {
	var d OutputDecoder
	if o := d.Feed([]byte("a\xf0\x9f")); o.Text != "a" {
		t.Fatalf("%q", o.Text)
	}
	if o := d.Feed([]byte("\x98\x80b\x1b]13")); o.Text != "😀b" {
		t.Fatalf("%q", o.Text)
	}
	if o := d.Feed([]byte("3;A\x1b")); o.Text != "" {
		t.Fatalf("%q", o.Text)
	}
	if o := d.Feed([]byte("\\c")); o.Text != "c" {
		t.Fatalf("%q", o.Text)
	}
	if o := d.Flush(); o.Text != "" {
		t.Fatalf("%q", o.Text)
	}
}

// genInput draws bytes biased towards the interesting ones and a split.
func genInput(t *rapid.T) []byte {
	pieces := []string{"\x1b", "]", "133;", "633;", "0;", "7;", "1337;SetMark", "\x07", "\\", "[", "m", "\x18",
		"é", "😀", "\xc3", "\xf0\x9f", "\x80", "\xff", "a", "\r\n", ";"}
	parts := rapid.SliceOf(rapid.OneOf(
		rapid.SampledFrom(pieces),
		rapid.StringN(0, 8, -1),
		rapid.Custom(func(t *rapid.T) string { return string(rapid.SliceOfN(rapid.Byte(), 0, 8).Draw(t, "raw")) }),
	)).Draw(t, "parts")
	return []byte(strings.Join(parts, ""))
}

func TestOutputDecoderSplitProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		in := genInput(t)
		whole := decodeAll(in)
		if !utf8.ValidString(whole.Text) {
			t.Fatalf("invalid UTF-8 %q", whole.Text)
		}
		cuts := rapid.SliceOf(rapid.IntRange(0, len(in))).Draw(t, "cuts")
		var chunks [][]byte
		prev := 0
		for _, c := range cuts {
			if c < prev {
				continue
			}
			chunks = append(chunks, in[prev:c])
			prev = c
		}
		chunks = append(chunks, in[prev:])
		var d OutputDecoder
		var text strings.Builder
		for _, c := range chunks {
			o := d.Feed(c)
			if !utf8.ValidString(o.Text) {
				t.Fatalf("invalid UTF-8 %q", o.Text)
			}
			if d.heldBack() > maxHeldBack {
				t.Fatalf("held back %d bytes", d.heldBack())
			}
			text.WriteString(o.Text)
		}
		text.WriteString(d.Flush().Text)
		if text.String() != whole.Text {
			t.Fatalf("split %q gives %q, one feed gives %q", chunks, text.String(), whole.Text)
		}
	})
}

func FuzzOutputDecoder(f *testing.F) {
	f.Add([]byte("\x1b]633;A\x07é$ \x1b]133;B\x1b\\ls 😀\r\n"), uint8(3))
	f.Add([]byte("\x1b]0;title\x07\x1b[0m\xc3"), uint8(1))
	f.Add([]byte("\x1b]7;file://h/x\x1b\\\xf0\x9f\x98"), uint8(7))
	f.Fuzz(func(t *testing.T, in []byte, step uint8) {
		whole := decodeAll(in)
		if !utf8.ValidString(whole.Text) {
			t.Fatalf("invalid UTF-8")
		}
		n := int(step)%16 + 1
		var d OutputDecoder
		var text strings.Builder
		for i := 0; i < len(in); i += n {
			o := d.Feed(in[i:min(i+n, len(in))])
			if !utf8.ValidString(o.Text) {
				t.Fatalf("invalid UTF-8")
			}
			for _, s := range o.Titles {
				if !utf8.ValidString(s) {
					t.Fatalf("invalid UTF-8 title")
				}
			}
			if !utf8.ValidString(o.Cwd) {
				t.Fatalf("invalid UTF-8 cwd")
			}
			if d.heldBack() > maxHeldBack {
				t.Fatalf("held back %d bytes", d.heldBack())
			}
			text.WriteString(o.Text)
		}
		text.WriteString(d.Flush().Text)
		if text.String() != whole.Text {
			t.Fatalf("chunked text %q != whole %q", text.String(), whole.Text)
		}
	})
}

func BenchmarkOutputDecoder(b *testing.B) {
	chunk := bytes.Repeat([]byte("some output \x1b[32mgreen\x1b[0m café 😀\r\n"), 100)
	chunk = append(chunk, "\x1b]133;D;0\x07\x1b]7;file://h/tmp\x07$ "...)
	var d OutputDecoder
	b.SetBytes(int64(len(chunk)))
	for b.Loop() {
		d.Feed(chunk)
	}
}

func TestOutputDecoderStripsProperty(t *testing.T) {
	clean := func(s string) string {
		return strings.Map(func(r rune) rune {
			switch r {
			case esc, bel, can, sub:
				return -1
			}
			return r
		}, s)
	}
	rapid.Check(t, func(t *rapid.T) {
		var in, want strings.Builder
		n := rapid.IntRange(0, 10).Draw(t, "n")
		for i := 0; i < n; i++ {
			txt := clean(rapid.String().Draw(t, "text"))
			in.WriteString(txt)
			want.WriteString(txt)
			ps := rapid.SampledFrom([]string{"133;", "633;", "7;file://h", "1337;SetMark", "1337;CurrentDir=", "1337;ShellIntegrationVersion="}).Draw(t, "ps")
			term := rapid.SampledFrom([]string{"\x07", "\x1b\\"}).Draw(t, "term")
			in.WriteString("\x1b]" + ps + clean(rapid.StringN(0, 20, -1).Draw(t, "arg")) + term)
		}
		raw := []byte(in.String())
		k := rapid.IntRange(1, 7).Draw(t, "chunk")
		var chunks [][]byte
		for i := 0; i < len(raw); i += k {
			chunks = append(chunks, raw[i:min(i+k, len(raw))])
		}
		if got := decodeAll(chunks...).Text; got != want.String() {
			t.Fatalf("got %q, want %q", got, want.String())
		}
	})
}

// FeedView gives Feed's output without copying: the same text, titles and
// cwd for any split, in a buffer the decoder reuses (so a caller must copy
// what it keeps), and no allocation once the buffer has grown.
func TestOutputDecoderFeedViewProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		in := genInput(t)
		n := rapid.IntRange(1, len(in)+1).Draw(t, "chunk")
		var byCopy, byView OutputDecoder
		var want, got strings.Builder
		for i := 0; i < len(in); i += n {
			c := in[i:min(i+n, len(in))]
			o := byCopy.Feed(c)
			v := byView.FeedView(c)
			if string(v.Text) != o.Text || !reflect.DeepEqual(v.Titles, o.Titles) || v.Cwd != o.Cwd {
				t.Fatalf("FeedView %q %q %q, Feed %q %q %q", v.Text, v.Titles, v.Cwd, o.Text, o.Titles, o.Cwd)
			}
			want.WriteString(o.Text)
			got.Write(v.Text)
		}
		o, v := byCopy.Flush(), byView.FlushView()
		if string(v.Text) != o.Text {
			t.Fatalf("FlushView %q, Flush %q", v.Text, o.Text)
		}
		if want.String()+o.Text != got.String()+string(v.Text) {
			t.Fatalf("views joined %q, copies joined %q", got.String(), want.String())
		}
	})
}

func TestOutputDecoderFeedViewReusesItsBuffer(t *testing.T) {
	var d OutputDecoder
	first := d.FeedView([]byte("first"))
	kept := string(first.Text)
	second := d.FeedView([]byte("other"))
	if kept != "first" || string(second.Text) != "other" {
		t.Fatalf("views %q then %q", kept, second.Text)
	}
	if &first.Text[0] != &second.Text[0] {
		t.Fatalf("the second view has a buffer of its own: the first was not reused")
	}
	chunk := bytes.Repeat([]byte("output café \x1b[0m\r\n"), 200)
	if n := testing.AllocsPerRun(50, func() { d.FeedView(chunk) }); n != 0 {
		t.Fatalf("FeedView: %v allocations, want 0", n)
	}
	// A huge output's buffer is not kept past the next call.
	d.FeedView(bytes.Repeat([]byte{0xff}, maxKeptOut)) // each byte becomes 3
	if v := d.FeedView([]byte("x")); cap(v.Text) > maxKeptOut {
		t.Fatalf("kept a buffer of %d bytes", cap(v.Text))
	}
}
