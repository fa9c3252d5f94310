package pty

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestScrollbackKeepsAll(t *testing.T) {
	s := NewScrollback(100)
	s.Append("hello ")
	s.Append("world")
	if s.String() != "hello world" || s.Len() != 11 {
		t.Fatalf("%q %d", s.String(), s.Len())
	}
	s.Clear()
	if s.String() != "" || s.Len() != 0 {
		t.Fatalf("after Clear: %q", s.String())
	}
	s.Append("again")
	if s.String() != "again" {
		t.Fatalf("%q", s.String())
	}
}

func TestScrollbackBound(t *testing.T) {
	const max = 64 << 10
	s := NewScrollback(max)
	line := "line of output \x1b[1;32mwith color\x1b[0m café 😀 \x1b]0;title\x07\r\n"
	total := 0
	for i := 0; total < 10<<20; i++ {
		chunk := strings.Repeat(line, 1+i%7)[:len(line)*(1+i%7)-i%5]
		s.Append(chunk)
		total += len(chunk)
		if s.Len() > max {
			t.Fatalf("Len %d > %d", s.Len(), max)
		}
		if i%997 == 0 {
			str := s.String()
			if len(str) > max || !utf8.ValidString(str) {
				t.Fatalf("len(String()) %d, valid %v", len(str), utf8.ValidString(str))
			}
		}
	}
	str := s.String()
	if len(str) > max || len(str) < max-len(line) {
		t.Fatalf("len(String()) %d", len(str))
	}
	if !strings.HasPrefix(str, "line of output") {
		t.Fatalf("does not start at a line: %q", str[:40])
	}
	// A single huge append.
	s.Append(strings.Repeat("é", max))
	if s.Len() != max || len(s.String()) > max || !utf8.ValidString(s.String()) {
		t.Fatalf("after huge append: Len %d", s.Len())
	}
}

func TestScrollbackBoundaries(t *testing.T) {
	tests := []struct {
		name   string
		max    int
		chunks []string
		want   string
	}{
		{"utf8 boundary", 5, []string{"aé😀"}, "😀"}, // newest 5 bytes: "\xa9😀"
		{"newline in first eighth", 40, []string{"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx", "ab\ncdefghijklmnopqrstuvwxyz0123456789ABC"}, "cdefghijklmnopqrstuvwxyz0123456789ABC"},
		{"newline too late", 16, []string{"abcdefghij\nklmnopq"}, "cdefghij\nklmnopq"},
		{"starts inside csi", 10, []string{"aaaa\x1b[1;31mbcdef"}, "bcdef"},
		{"starts inside osc", 12, []string{"aa\x1b]0;long title\x07xyz"}, "xyz"},
		{"starts inside osc st", 12, []string{"aa\x1b]0;long title\x1b\\xyz"}, "xyz"},
		{"starts at esc", 7, []string{"aaa\x1b[0mxyz"}, "\x1b[0mxyz"},
		{"unterminated osc kept", 6, []string{"\x1b]0;abcdefgh"}, "cdefgh"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := NewScrollback(tt.max)
			for _, c := range tt.chunks {
				s.Append(c)
			}
			got := s.String()
			if !utf8.ValidString(got) {
				t.Fatalf("invalid UTF-8 %q", got)
			}
			if got != tt.want {
				t.Fatalf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestScrollbackClearMidSequence(t *testing.T) {
	s := NewScrollback(100)
	s.Append("ab\x1b]0;ti")
	s.Clear()
	s.Append("tle\x07visible")
	if got := s.String(); got != "visible" {
		t.Fatalf("%q", got)
	}
}

func TestScrollbackZero(t *testing.T) {
	s := NewScrollback(0)
	s.Append("abc")
	if s.Len() != 0 || s.String() != "" {
		t.Fatal("kept text with max 0")
	}
}

func BenchmarkScrollbackAppend(b *testing.B) {
	s := NewScrollback(1 << 20)
	chunk := strings.Repeat("some output \x1b[32mgreen\x1b[0m café 😀\r\n", 100)
	b.SetBytes(int64(len(chunk)))
	for b.Loop() {
		s.Append(chunk)
	}
}

// AppendBytes is Append: it keeps a copy, so the caller may reuse its buffer.
func TestScrollbackAppendBytesCopies(t *testing.T) {
	a, b := NewScrollback(8), NewScrollback(8)
	buf := []byte("hello ")
	for _, s := range []string{"hello ", "wide world", "\x1b[0mend"} {
		buf = append(buf[:0], s...)
		a.Append(s)
		b.AppendBytes(buf)
		for i := range buf {
			buf[i] = '!'
		}
		if a.String() != b.String() {
			t.Fatalf("AppendBytes %q, Append %q", b.String(), a.String())
		}
	}
}
