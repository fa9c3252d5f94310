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

func TestTrailingServerSeq(t *testing.T) {
	for in, want := range map[string]uint64{
		`{"channel":"ahp-terminal:/t","action":{"type":"terminal/data","data":"x"},"serverSeq":42}`: 42,
		`{"channel":"c","action":{},"serverSeq":18446744073709551615}`:                              18446744073709551615,
	} {
		if got, ok := trailingServerSeq([]byte(in)); !ok || got != want {
			t.Errorf("trailingServerSeq(%s) = %d, %v; want %d", in, got, ok, want)
		}
	}
	for _, in := range []string{
		`{"channel":"c","action":{},"serverSeq":7,"origin":{"clientId":"a","clientSeq":1}}`,
		`{"channel":"c","action":{},"serverSeq":}`,
		`{"channel":"c","action":{"x":"\",\"serverSeq\":5"}}`,
		`{"channel":"c","action":{},"serverSeq":18446744073709551616}`,
		`{"serverSeq":1}`,
	} {
		if got, ok := trailingServerSeq([]byte(in)); ok {
			t.Errorf("trailingServerSeq(%s) = %d, true; want not ok", in, got)
		}
	}
	params := []byte(`{"channel":"ahp-terminal:/t","action":{"type":"terminal/data","data":"xxxx"},"serverSeq":123456}`)
	if n := testing.AllocsPerRun(100, func() { _, _ = trailingServerSeq(params) }); n != 0 {
		t.Errorf("%v allocations, want 0", n)
	}
}
