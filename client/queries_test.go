package client

import "testing"

// TestWithoutQueries: a snapshot written again keeps everything but the
// sequences that make a terminal answer (which would be typed into the
// remote program: "1R" after a cursor position report).
func TestWithoutQueries(t *testing.T) {
	for in, want := range map[string]string{
		"plain\r\n":                                  "plain\r\n",
		"a\x1b[6nb":                                  "ab",
		"\x1b[5n\x1b[?6n\x1b[c\x1b[>c\x1b[=0c":       "",
		"\x1b[?2004$p\x1b[>q\x1b[18t\x1b[14t":        "",
		"\x1b]10;?\x07\x1b]11;?\x1b\\\x1b]4;1;?\x07": "",
		"\x1bP$qm\x1b\\x":                            "x",
		"\x1b[31mred\x1b[0m\x1b[2J\x1b[H":            "\x1b[31mred\x1b[0m\x1b[2J\x1b[H",
		"\x1b[8;24;80t\x1b]0;title\x07":              "\x1b[8;24;80t\x1b]0;title\x07",
		"\x1b[6":                                     "\x1b[6",
	} {
		if got := withoutQueries(in); got != want {
			t.Errorf("withoutQueries(%q) = %q, want %q", in, got, want)
		}
	}
}
