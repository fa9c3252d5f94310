package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/sidecar-dev/sidecar/client"
)

// TestSilenceLine: nothing is said without input, nor before input has
// waited silenceAfter unanswered, nor while reconnecting; then the line
// counts from the oldest input not answered, and goes once the host is
// heard after it. Input after an answer starts the count again.
func TestSilenceLine(t *testing.T) {
	t0 := time.Unix(1000, 0)
	heard := t0
	w := &silenceWatch{heard: func() time.Time { return heard }}
	if got := w.line(t0.Add(time.Hour)); got != "" {
		t.Fatalf("an idle link: %q", got)
	}
	w.sent(t0.Add(10 * time.Second))
	w.sent(t0.Add(11 * time.Second)) // the count stays from the first
	for _, c := range []struct {
		at   time.Duration
		want string
	}{
		{11500 * time.Millisecond, ""},
		{12 * time.Second, "no answer from the host for 2 s"},
		{14900 * time.Millisecond, "no answer from the host for 4 s"},
	} {
		if got := w.line(t0.Add(c.at)); got != c.want {
			t.Errorf("at +%v: %q, want %q", c.at, got, c.want)
		}
	}
	w.onReconnect(client.ReconnectStatus{State: client.Lost})
	if got := w.line(t0.Add(20 * time.Second)); got != "" {
		t.Errorf("reconnecting: %q", got)
	}
	w.onReconnect(client.ReconnectStatus{State: client.Resumed})
	heard = t0.Add(21 * time.Second)
	if got := w.line(t0.Add(22 * time.Second)); got != "" {
		t.Errorf("answered: %q", got)
	}
	w.sent(t0.Add(30 * time.Second))
	if got, want := w.line(t0.Add(33*time.Second)), "no answer from the host for 3 s"; got != want {
		t.Errorf("input after the answer: %q, want %q", got, want)
	}
}

// TestStatusOutputClear: Clear erases a status line it recognizes while
// it is shown (on the alternate screen, the last row while the program
// wrote nothing since), and leaves alone another's line, one output
// erased already, and the program's row once it wrote again.
func TestStatusOutputClear(t *testing.T) {
	var screen bytes.Buffer
	s := newStatusOutput(&screen, &screen, func() int { return 80 })
	mine := func(l string) bool { return strings.HasPrefix(l, silencePrefix) }
	erase := "\x1b7\x1b[1B\x1b[2K\x1b8"
	s.Status(silencePrefix + "2 s")
	screen.Reset()
	s.Clear(mine)
	if got := screen.String(); got != erase {
		t.Fatalf("clearing our line: %q, want %q", got, erase)
	}
	screen.Reset()
	s.Clear(mine)
	s.Status("resumed")
	screen.Reset()
	s.Clear(mine)
	if got := screen.String(); got != "" {
		t.Fatalf("cleared again, or another's line: %q", got)
	}
	_, _ = s.Write([]byte("\x1b[?1049h"))
	s.Status(silencePrefix + "3 s")
	screen.Reset()
	s.Clear(mine)
	if got, want := screen.String(), "\x1b7\x1b[999;1H\x1b[2K\x1b8"; got != want {
		t.Fatalf("clearing over the alternate screen: %q, want %q", got, want)
	}
	s.Status(silencePrefix + "4 s")
	_, _ = s.Write([]byte("x"))
	screen.Reset()
	s.Clear(mine)
	if got := screen.String(); got != "" {
		t.Fatalf("cleared the program's row after it wrote: %q", got)
	}
}
