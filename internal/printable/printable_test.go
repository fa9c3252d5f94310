package printable

import (
	"strings"
	"testing"
)

func TestString(t *testing.T) {
	for in, want := range map[string]string{
		"plain ü 日本":       "plain ü 日本",
		"\x1b]0;pwned\x07": `\x1b]0;pwned\a`,
		"a\tb\r\n":         `a\tb\r\n`,
		"\u009b2J":         `\u009b2J`,
		"bad\xffbyte":      `bad\xffbyte`,
		"del\x7f":          `del\x7f`,
	} {
		if got := String(in); got != want {
			t.Errorf("String(%q) = %q, want %q", in, got, want)
		}
	}
	if n := testing.AllocsPerRun(100, func() { _ = String("clean text") }); n != 0 {
		t.Errorf("clean text: %v allocations, want 0", n)
	}
}

func TestTruncated(t *testing.T) {
	for _, c := range []struct {
		in   string
		max  int
		want string
	}{
		{"short", 8, "short"},
		{"exactly8", 8, "exactly8"},
		{"ninechars", 8, "ninechar…(9 bytes)"},
		{"ab日本", 4, "ab…(8 bytes)"}, // not inside 日
		{"\x1b[2J" + "xxxxxxxx", 4, `\x1b[2J…(12 bytes)`},
		{strings.Repeat("c", 1000000), 3, "ccc…(1000000 bytes)"},
	} {
		if got := Truncated(c.in, c.max); got != c.want {
			t.Errorf("Truncated(%.20q, %d) = %q, want %q", c.in, c.max, got, c.want)
		}
	}
}
