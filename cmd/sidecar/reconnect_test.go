package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/sidecar-dev/sidecar/client"
)

func TestReconnectLine(t *testing.T) {
	for _, tc := range []struct {
		st   client.ReconnectStatus
		want string
	}{
		{client.ReconnectStatus{State: client.Retrying, Attempt: 3, Next: 4 * time.Second}, "connection lost, reconnecting (attempt 3, next in 4 s)"},
		{client.ReconnectStatus{State: client.Retrying, Attempt: 1, Next: 250 * time.Millisecond}, "connection lost, reconnecting (attempt 1, next in 0.2 s)"},
		{client.ReconnectStatus{State: client.Connecting, Attempt: 2}, "connection lost, reconnecting (attempt 2, connecting…)"},
		{client.ReconnectStatus{State: client.Resumed}, "resumed"},
		{client.ReconnectStatus{State: client.Resumed, UnknownFate: 2}, "resumed from a snapshot; 2 keystrokes typed during the cut may be lost"},
		{client.ReconnectStatus{State: client.Lost}, ""},
	} {
		if got := reconnectLine(tc.st); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.st, got, tc.want)
		}
	}
}

// TestStatusOutput: the output's unfinished escape sequence or UTF-8
// character is held back, so a status line shows at once, never inside
// one; on the primary screen it goes on the row below the cursor and
// puts the cursor back (the half-written line stays whole and the output
// goes on after it), a new one replaces it, and the first output after
// it erases it.
func TestStatusOutput(t *testing.T) {
	var screen bytes.Buffer
	s := newStatusOutput(&screen, &screen, func() int { return 40 })
	below := "\x1bD\x1b[1A\x1b7\x1b[1B\r\x1b[2K"
	erase := "\x1b7\x1b[1B\x1b[2K\x1b8"
	_, _ = s.Write([]byte("ab\x1b[3"))
	s.Status("one")
	if got, want := screen.String(), "ab"+below+"sidecar: one\x1b8"; got != want {
		t.Fatalf("status after output ending inside a CSI:\ngot  %q\nwant %q", got, want)
	}
	screen.Reset()
	_, _ = s.Write([]byte("1mc\xe2\x82"))
	s.Status("two")
	_, _ = s.Write([]byte("\xac\x1b]0;title\x07"))
	s.Status("three")
	s.Status("a status line longer than the forty cells of this terminal")
	want := erase + "\x1b[31mc" + below + "sidecar: two\x1b8" + erase + "\xe2\x82\xac\x1b]0;title\x07" +
		below + "sidecar: three\x1b8" +
		below + "sidecar: a status line longer than the \x1b8"
	if got := screen.String(); got != want {
		t.Fatalf("got  %q\nwant %q", got, want)
	}
	screen.Reset()
	_, _ = s.Write([]byte("d\r\n"))
	if got, want := screen.String(), erase+"d\r\n"; got != want {
		t.Fatalf("output after a status: %q, want %q", got, want)
	}
	// A string longer than maxHeld is written through; a status waits
	// for its end (and shows after the Write that ends it).
	screen.Reset()
	long := "\x1b]2;" + strings.Repeat("t", maxHeld+10)
	_, _ = s.Write([]byte(long))
	s.Status("four")
	_, _ = s.Write([]byte("\x07e"))
	if got, want := screen.String(), long+"\x07e"+below+"sidecar: four\x1b8"; got != want {
		t.Fatalf("after a long string: %.80q…, want %.80q…", got[len(long):], want[len(long):])
	}
}

// TestStatusOutputAltScreen: while a full-screen program has the
// alternate screen, the status goes over the last row in reverse video
// and nothing erases it; back on the primary screen (or after a reset),
// below the cursor again.
func TestStatusOutputAltScreen(t *testing.T) {
	var screen bytes.Buffer
	s := newStatusOutput(&screen, &screen, nil)
	_, _ = s.Write([]byte("\x1b[?1049h\x1b[H~"))
	screen.Reset()
	s.Status("one")
	_, _ = s.Write([]byte("x"))
	if got, want := screen.String(), "\x1b7\x1b[999;1H\x1b[2K\x1b[7msidecar: one\x1b[0m\x1b8x"; got != want {
		t.Fatalf("on the alternate screen: %q, want %q", got, want)
	}
	for _, leave := range []string{"\x1b[?1049l", "\x1b[?1;1047l", "\x1bc"} {
		_, _ = s.Write([]byte("\x1b[?47h" + leave))
		screen.Reset()
		s.Status("two")
		if got, want := screen.String(), "\x1bD\x1b[1A\x1b7\x1b[1B\r\x1b[2Ksidecar: two\x1b8"; got != want {
			t.Fatalf("after %q: %q, want %q", leave, got, want)
		}
		_, _ = s.Write([]byte("y"))
	}
}

// TestStatusOutputBounds: what statusOutput keeps of the output is
// bounded: a CSI sequence's parameters (maxCSIParams) and an unfinished
// tail (maxHeld, past which it is written through).
func TestStatusOutputBounds(t *testing.T) {
	var screen bytes.Buffer
	s := newStatusOutput(&screen, &screen, nil)
	_, _ = s.Write([]byte("\x1b[?" + strings.Repeat("1;", maxHeld))) // past maxHeld: written through, tracked
	if len(s.csi) != maxCSIParams || len(s.held) != 0 {
		t.Fatalf("%d CSI parameter bytes kept (bound %d), %d held", len(s.csi), maxCSIParams, len(s.held))
	}
	_, _ = s.Write([]byte("h\x1b]0;" + strings.Repeat("t", 3*maxHeld)))
	if len(s.held) > maxHeld {
		t.Fatalf("%d bytes held, bound %d", len(s.held), maxHeld)
	}
}

// TestStatusOutputNotice: a notice is a line of its own after the output
// on the primary screen; on the alternate screen it goes over the last
// row with the cursor put back, so a full-screen program's next output
// lands where the program expects (it was written as lines into its
// screen, moving the cursor).
func TestStatusOutputNotice(t *testing.T) {
	var screen bytes.Buffer
	s := newStatusOutput(&screen, &screen, nil)
	_, _ = s.Write([]byte("$ "))
	s.Notice("you share it", "")
	if got, want := screen.String(), "$ \r\nsidecar: you share it\r\n"; got != want {
		t.Fatalf("primary screen: %q, want %q", got, want)
	}
	_, _ = s.Write([]byte("\x1b[?1049h\x1b[2;1Habc"))
	screen.Reset()
	s.Notice("you hold ahp-terminal:/t-1 now, and a long line it is", "you hold it now")
	if got, want := screen.String(), "\x1b7\x1b[999;1H\x1b[2K\x1b[7msidecar: you hold it now\x1b[0m\x1b8"; got != want {
		t.Fatalf("alternate screen: %q, want %q", got, want)
	}
	// An unfinished sequence is held back by Write: the notice goes in
	// before it, never inside it.
	_, _ = s.Write([]byte("\x1b[3"))
	screen.Reset()
	s.Notice("later", "")
	_, _ = s.Write([]byte("1m"))
	if got, want := screen.String(), "\x1b7\x1b[999;1H\x1b[2K\x1b[7msidecar: later\x1b[0m\x1b8\x1b[31m"; got != want {
		t.Fatalf("around a sequence: %q, want %q", got, want)
	}
}
