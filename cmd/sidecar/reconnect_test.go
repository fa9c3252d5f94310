package main

import (
	"bytes"
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
		{client.ReconnectStatus{State: client.Resumed}, "resumed"},
		{client.ReconnectStatus{State: client.Resumed, UnknownFate: 2}, "resumed from a snapshot; 2 keystrokes typed during the cut may be lost"},
		{client.ReconnectStatus{State: client.Lost}, ""},
	} {
		if got := reconnectLine(tc.st); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.st, got, tc.want)
		}
	}
}

// TestStatusOutput: a status line waits for the output to leave an
// escape sequence or a UTF-8 character, goes on a line of its own, and
// the next one replaces it while no output came between.
func TestStatusOutput(t *testing.T) {
	var screen bytes.Buffer
	s := newStatusOutput(&screen, &screen)
	_, _ = s.Write([]byte("ab\x1b[3"))
	s.Status("one")
	if got := screen.String(); got != "ab\x1b[3" {
		t.Fatalf("status inside a CSI: %q", got)
	}
	_, _ = s.Write([]byte("1mc\xe2\x82"))
	if got := screen.String(); got != "ab\x1b[31m\r\nsidecar: one\r\nc\xe2\x82" {
		t.Fatalf("after the CSI ended: %q", got)
	}
	s.Status("two")
	_, _ = s.Write([]byte("\xac\x1b]0;title\x07"))
	s.Status("three")
	s.Status("four")
	want := "ab\x1b[31m\r\nsidecar: one\r\nc\xe2\x82\xac\r\nsidecar: two\r\n\x1b]0;title\x07\r\nsidecar: three\r\n\x1b[1A\r\x1b[2Ksidecar: four\r\n"
	if got := screen.String(); got != want {
		t.Fatalf("got  %q\nwant %q", got, want)
	}
}
