package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sidecar-dev/sidecar/client"
)

// Input unanswered for silenceAfter (the host not heard from since it was
// sent) makes attach say so; the line is looked at again every
// silenceTick.
const (
	silenceAfter = 2 * time.Second
	silenceTick  = 250 * time.Millisecond
)

// silencePrefix begins attach's line about a host that does not answer.
const silencePrefix = "no answer from the host for "

// silenceWatch shows, as mosh shows its "last contact", a status line
// "no answer from the host for N s" (N counted from the oldest input not
// answered: an idle link's quiet before it is no silence of the host's)
// once input sent has had no answer for silenceAfter, updates it,
// and takes it back as soon as the host is heard again. Every input comes
// back from a live host (the echo of its dispatchAction), so nothing
// answered means a link gone silent (a black hole), which the keepalive
// only gives up on after some 30 s; input never sent means nothing is
// said, however quiet the link. While the client reconnects its own
// status says more, and this one keeps quiet.
type silenceWatch struct {
	screen *statusOutput
	heard  func() time.Time // client.Conn.LastHeard; set before tap and run are used

	waiting      atomic.Int64 // unix nanoseconds of the oldest input not answered yet; 0: none
	reconnecting atomic.Bool
	shown        string // the line shown last (run's goroutine only)
}

// tap returns r, noting each input read from it as sent (forwardInput
// sends what it reads at once).
func (w *silenceWatch) tap(r io.Reader) io.Reader { return silenceTap{r, w} }

type silenceTap struct {
	r io.Reader
	w *silenceWatch
}

func (t silenceTap) Read(p []byte) (int, error) {
	n, err := t.r.Read(p)
	if n > 0 {
		t.w.sent(time.Now())
	}
	return n, err
}

// sent notes input sent at now, unless older input is still unanswered.
func (w *silenceWatch) sent(now time.Time) {
	for {
		old := w.waiting.Load()
		if old != 0 && !w.heard().After(time.Unix(0, old)) {
			return // the older input is still waiting: the silence counts from it
		}
		if w.waiting.CompareAndSwap(old, now.UnixNano()) {
			return
		}
	}
}

// onReconnect follows the client's reconnection (attach's OnReconnect).
func (w *silenceWatch) onReconnect(st client.ReconnectStatus) {
	switch st.State {
	case client.Resumed, client.GaveUp:
		w.reconnecting.Store(false)
	default:
		w.reconnecting.Store(true)
	}
}

// run looks at the silence every silenceTick until ctx ends or done is
// closed.
func (w *silenceWatch) run(ctx context.Context, done <-chan struct{}) {
	t := time.NewTicker(silenceTick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-done:
			return
		case now := <-t.C:
			w.look(now)
		}
	}
}

// look shows, updates or takes back the line as of now.
func (w *silenceWatch) look(now time.Time) {
	line := w.line(now)
	if line == w.shown {
		return
	}
	if line == "" {
		w.screen.Clear(func(l string) bool { return strings.HasPrefix(l, silencePrefix) })
	} else {
		w.screen.Status(line)
	}
	w.shown = line
}

// line is the status line due as of now: "" when no input waits for an
// answer, it has not waited silenceAfter yet, or the client reconnects.
func (w *silenceWatch) line(now time.Time) string {
	ns := w.waiting.Load()
	if ns == 0 {
		return ""
	}
	since, heard := time.Unix(0, ns), w.heard()
	if heard.After(since) {
		w.waiting.CompareAndSwap(ns, 0) // answered
		return ""
	}
	if w.reconnecting.Load() || now.Sub(since) < silenceAfter {
		return ""
	}
	return fmt.Sprintf("%s%d s", silencePrefix, int(now.Sub(since).Seconds()))
}
