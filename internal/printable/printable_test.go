package printable

import "testing"

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
