package delivery

import (
	"strings"
	"testing"
	"unicode/utf16"
	"unicode/utf8"

	"pgregory.net/rapid"
)

// Compact texts of the seed 000 examples.
const (
	seedChannel  = "ahp-terminal:/t1"
	seedSnapshot = `{"jsonrpc":"2.0","method":"channel/snapshot","params":{"channel":"ahp-terminal:/t1","snapshot":{"resource":"ahp-terminal:/t1","state":{"title":"Shell","content":[],"lifecycle":{"status":"running"},"claim":{"kind":"client","clientId":"client-1"}},"fromSeq":5}}}`
	seedAction   = `{"jsonrpc":"2.0","method":"action","params":{"channel":"ahp-terminal:/t1","action":{"type":"terminal/data","data":"Hello\r\n"},"serverSeq":6}}`
	seedFirst    = `{"jsonrpc":"2.0","method":"action","params":{"channel":"ahp-terminal:/t1",`
	seedFrame1   = `{"jsonrpc":"2.0","method":"channel/frame","params":{"channel":"ahp-terminal:/t1","data":"{\"jsonrpc\":\"2.0\",\"method\":\"action\",\"params\":{\"channel\":\"ahp-terminal:/t1\","}}`
	seedFrame2   = `{"jsonrpc":"2.0","method":"channel/frame","params":{"channel":"ahp-terminal:/t1","data":"\"action\":{\"type\":\"terminal/data\",\"data\":\"Hello\\r\\n\"},\"serverSeq\":6}}","final":true}}`
)

func TestMeasureSeedTable(t *testing.T) {
	for _, tc := range []struct {
		text string
		want UTF16Bytes
	}{
		{"A", 2}, {"é", 2}, {"😀", 4}, // seed "Measuring Size" table
		{"", 0},
		{seedSnapshot, 520},
		{seedAction, 284},
		{seedFrame1, 360},
		{seedFrame2, 374},
		{"\xff", 2},             // invalid byte: one U+FFFD
		{"\xe2\x82", 4},         // truncated sequence: two U+FFFD, as Go ranges it
		{"\xed\xa0\xbd", 6},     // WTF-8 surrogate: three invalid bytes
		{"\uFFFD", 2},           // a real U+FFFD
		{"\U0010FFFF", 4},       // last code point
		{"\xf4\x90\x80\x80", 8}, // above U+10FFFF: four invalid bytes
		{"abcdefgh😀abcdefghé", 2*16 + 4 + 2},
	} {
		if got := MeasureString(tc.text); got != tc.want {
			t.Errorf("MeasureString(%q) = %d, want %d", tc.text, got, tc.want)
		}
		if got := Measure([]byte(tc.text)); got != tc.want {
			t.Errorf("Measure(%q) = %d, want %d", tc.text, got, tc.want)
		}
	}
}

func TestMeasureAllocs(t *testing.T) {
	text := []byte(strings.Repeat(seedAction, 10) + "é😀")
	if n := testing.AllocsPerRun(100, func() { Measure(text) }); n != 0 {
		t.Fatalf("Measure allocates %v times", n)
	}
}

// genText draws strings rich in the characters that matter here.
func genText() *rapid.Generator[string] {
	special := rapid.SampledFrom([]rune{
		'A', 'é', '😀', '"', '\\', '\n', '\r', '\t', '\b', '\f', 0, 0x1f, 0x7f,
		'/', '<', '\u2028', '\u2029', '\uFFFD', '\U0010FFFF', 'z', ' ',
	})
	r := rapid.OneOf(special, special, rapid.Rune(), rapid.Int32Range(0, 0x7f))
	return rapid.Custom(func(t *rapid.T) string {
		return string(rapid.SliceOf(r).Draw(t, "runes"))
	})
}

func TestMeasureMatchesUTF16Property(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := genText().Draw(t, "s")
		want := UTF16Bytes(len(utf16.Encode([]rune(s))) * 2)
		if got := MeasureString(s); got != want {
			t.Fatalf("MeasureString(%q) = %d, want %d", s, got, want)
		}
		if got := Measure([]byte(s)); got != want {
			t.Fatalf("Measure(%q) = %d, want %d", s, got, want)
		}
	})
}

func TestMeasureArbitraryBytesProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		b := rapid.SliceOf(rapid.Byte()).Draw(t, "b")
		// Go's range over a string yields one U+FFFD per invalid byte.
		var want UTF16Bytes
		for _, r := range string(b) {
			want += UTF16Bytes(utf16.RuneLen(r) * 2)
		}
		if got := Measure(b); got != want {
			t.Fatalf("Measure(%q) = %d, want %d", b, got, want)
		}
		for i := 0; i < len(b); {
			r, n := decodeRune(b, i)
			wr, wn := utf8.DecodeRune(b[i:])
			if r != wr || n != wn {
				t.Fatalf("decodeRune(%q) = %U,%d; utf8 says %U,%d", b[i:], r, n, wr, wn)
			}
			i += n
		}
	})
}

func BenchmarkMeasure(b *testing.B) {
	for _, bc := range []struct{ name, text string }{
		{"ascii-16KiB", strings.Repeat(seedAction, 16384/len(seedAction))},
		{"mixed-16KiB", strings.Repeat("héllo wörld 😀 ", 16384/20)},
	} {
		text := []byte(bc.text)
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(text)))
			for b.Loop() {
				Measure(text)
			}
		})
	}
}
