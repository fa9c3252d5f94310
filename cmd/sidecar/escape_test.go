package main

import (
	"bytes"
	"errors"
	"testing"
)

func TestEscapeFilter(t *testing.T) {
	tests := []struct {
		name   string
		inputs []string // successive Filter calls on one filter
		want   []string // output of each call
		detach bool     // whether the last call detaches
	}{
		{"tilde dot as first input detaches", []string{"~."}, []string{""}, true},
		{"mid-line tilde dot passes", []string{"a~."}, []string{"a~."}, false},
		{"after CR detaches", []string{"\r~."}, []string{"\r"}, true},
		{"after LF detaches", []string{"ls\n~."}, []string{"ls\n"}, true},
		{"double tilde sends one", []string{"~~"}, []string{"~"}, false},
		{"double tilde then dot is not an escape", []string{"~~."}, []string{"~."}, false},
		{"tilde other passes both", []string{"~x"}, []string{"~x"}, false},
		{"tilde CR passes and stays at line start", []string{"~\r~."}, []string{"~\r"}, true},
		{"bytes after detach are dropped", []string{"ab\r~.rest"}, []string{"ab\r"}, true},
		{"split tilde | dot", []string{"~", "."}, []string{"", ""}, true},
		{"split CR | tilde | dot", []string{"x\r", "~", "."}, []string{"x\r", "", ""}, true},
		{"split tilde | tilde", []string{"~", "~"}, []string{"", "~"}, false},
		{"split tilde | other", []string{"~", "y"}, []string{"", "~y"}, false},
		{"split mid-line | tilde dot", []string{"abc", "~."}, []string{"abc", "~."}, false},
		{"plain bytes unchanged", []string{"hello\x03\x1b[A"}, []string{"hello\x03\x1b[A"}, false},
		{"empty input", []string{""}, []string{""}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var f escapeFilter
			for i, in := range tc.inputs {
				out, detach := f.Filter([]byte(in))
				if string(out) != tc.want[i] {
					t.Fatalf("call %d Filter(%q) = %q, want %q", i, in, out, tc.want[i])
				}
				last := i == len(tc.inputs)-1
				if detach != (last && tc.detach) {
					t.Fatalf("call %d Filter(%q) detach = %v, want %v", i, in, detach, last && tc.detach)
				}
			}
		})
	}
}

// TestEscapeFilterTakeOver: "~t" at the start of a line calls takeOver;
// when it acted (attach shares the terminal) nothing is sent, else (attach
// holds it, or run, which has no takeOver) "~t" is typed as it is.
func TestEscapeFilterTakeOver(t *testing.T) {
	tests := []struct {
		name   string
		share  bool // what takeOver returns; nil takeOver when calls is -1
		inputs []string
		want   []string
		calls  int
	}{
		{"shared: ~t is an escape", true, []string{"~t"}, []string{""}, 1},
		{"shared: after Enter, then typing goes on", true, []string{"ls~tpwd"}, []string{"lspwd"}, 1},
		{"shared: split ~ | t", true, []string{"~", "t"}, []string{"", ""}, 1},
		{"shared: still at line start after ~t", true, []string{"~t~."}, []string{""}, 1},
		{"shared: mid-line ~t is typed", true, []string{"a~t"}, []string{"a~t"}, 0},
		{"holding: ~t is typed", false, []string{"~t"}, []string{"~t"}, 1},
		{"no takeOver (run): ~t is typed", false, []string{"~t"}, []string{"~t"}, -1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			calls := 0
			var f escapeFilter
			if tc.calls >= 0 {
				f.takeOver = func() bool { calls++; return tc.share }
			}
			for i, in := range tc.inputs {
				out, _ := f.Filter([]byte(in))
				if string(out) != tc.want[i] {
					t.Fatalf("call %d Filter(%q) = %q, want %q", i, in, out, tc.want[i])
				}
			}
			if tc.calls >= 0 && calls != tc.calls {
				t.Fatalf("takeOver called %d times, want %d", calls, tc.calls)
			}
		})
	}
}

func TestCRLFWriter(t *testing.T) {
	tests := []struct {
		name   string
		writes []string
		flush  bool
		want   string
	}{
		{"CRLF to LF", []string{"a\r\nb"}, false, "a\nb"},
		{"several", []string{"1\r\n2\r\n3\r\n"}, false, "1\n2\n3\n"},
		{"CR at a write boundary then LF", []string{"a\r", "\nb"}, false, "a\nb"},
		{"CR at a boundary then other", []string{"a\r", "b"}, false, "a\rb"},
		{"lone CR kept", []string{"50%\r100%"}, false, "50%\r100%"},
		{"CR CR LF", []string{"\r\r\n"}, false, "\r\n"},
		{"trailing CR held without Flush", []string{"x\r"}, false, "x"},
		{"trailing CR written by Flush", []string{"x\r"}, true, "x\r"},
		{"Flush with nothing held", []string{"x"}, true, "x"},
		{"LF alone unchanged", []string{"\n\n"}, false, "\n\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			w := &crlfWriter{w: &buf}
			for _, s := range tc.writes {
				n, err := w.Write([]byte(s))
				if err != nil || n != len(s) {
					t.Fatalf("Write(%q) = %d, %v; want %d, nil", s, n, err, len(s))
				}
			}
			if tc.flush {
				w.Flush()
				w.Flush() // a second Flush writes nothing more
			}
			if buf.String() != tc.want {
				t.Fatalf("wrote %q, want %q", buf.String(), tc.want)
			}
		})
	}
}

func TestCRLFWriterEmptyWriteKeepsHeldCR(t *testing.T) {
	var buf bytes.Buffer
	w := &crlfWriter{w: &buf}
	for _, s := range []string{"a\r", "", "\nb"} {
		if _, err := w.Write([]byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	if buf.String() != "a\nb" {
		t.Fatalf("wrote %q, want %q", buf.String(), "a\nb")
	}
}

type failWriter struct{ err error }

func (f failWriter) Write([]byte) (int, error) { return 0, f.err }

func TestCRLFWriterError(t *testing.T) {
	boom := errors.New("EPIPE")
	w := &crlfWriter{w: failWriter{boom}}
	if n, err := w.Write([]byte("a\r\n")); !errors.Is(err, boom) || n != 0 {
		t.Fatalf("Write = %d, %v; want 0, EPIPE", n, err)
	}
}
