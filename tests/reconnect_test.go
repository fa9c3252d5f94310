package tests

import (
	"context"
	"math/rand/v2"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sidecar-dev/sidecar/tests/fault"
)

// statusLine matches a status line attach writes while it reconnects
// (cmd/sidecar statusOutput): on a line of its own, or over the previous
// one. Removing them gives back the program's own output.
var statusLine = regexp.MustCompile("(\r\n|\x1b\\[1A\r\x1b\\[2K)sidecar: [^\r\n]*\r\n")

// relayed starts a fault relay in front of s and returns it with s's URL
// pointed at it.
func relayed(t *testing.T, s *server) (*fault.TCP, string) {
	t.Helper()
	r, err := fault.NewTCP(s.host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	return r, strings.Replace(s.url, s.host, r.Addr(), 1)
}

// TestAttachSurvivesCuts: `sidecar attach` through a link cut 20 times at
// random points (mid-frame, mid-message, between a message and its
// credit) while its terminal prints numbered lines: it reconnects by
// itself every time, and its output holds every line exactly once, in
// order.
func TestAttachSurvivesCuts(t *testing.T) {
	t.Parallel()
	s := startServer(t, "")
	relay, url := relayed(t, s)
	a := startInPTY(t, append([]string{"attach", url}, s.connArgs()...)...)
	pos := a.out.waitFor(t, "prompt", 0, "XPROMPT> ")
	const n = 300000
	a.typeText(t, "seq 1 300000; echo DONE-$((6*7))\r")
	start := a.out.waitFor(t, "command echo", pos, "echo DONE-$((6*7))\r\n")
	rng := rand.New(rand.NewPCG(14, 20))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for i := range 20 {
		accepted := relay.Accepted()
		relay.CutAfter(int64(1000+rng.IntN(40000)), fault.Down)
		if err := relay.Await(ctx, func() bool { return relay.Accepted() > accepted && relay.Conns() > 0 }); err != nil {
			t.Fatalf("cut %d: the client did not reconnect: %v; screen:\n%s", i+1, err, tail(a.out.String(), 1500))
		}
	}
	end := a.out.waitFor(t, "end of the output", start, "\r\nDONE-42\r\n")
	screen := a.out.String()
	out := statusLine.ReplaceAllString(screen[start:end], "")
	out = strings.TrimSuffix(out, "\r\nDONE-42\r\n")
	lines := strings.Split(out, "\r\n")
	if len(lines) != n {
		t.Fatalf("%d lines of seq output, want %d; end: %q", len(lines), n, tail(out, 300))
	}
	for i, l := range lines {
		if l != strconv.Itoa(i+1) {
			t.Fatalf("line %d is %q, want %d (around it: %q)", i+1, l, i+1, strings.Join(lines[max(0, i-3):min(len(lines), i+3)], "|"))
		}
	}
	if !strings.Contains(screen, "sidecar: resumed") {
		t.Errorf("no \"resumed\" status line on the screen")
	}
	a.typeText(t, "exit\r")
	if code := a.wait(t); code != 0 {
		t.Fatalf("exit: status %d; screen:\n%s", code, tail(a.out.String(), 1500))
	}
}
