package tests

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sidecar-dev/sidecar/tests/fault"
)

// statusLine matches what attach writes on the screen about a
// reconnection (cmd/sidecar statusOutput): a status line drawn on the row
// below the cursor, its erasure, or one drawn over the last row of the
// alternate screen. Removing them gives back the program's own output,
// byte for byte.
var statusLine = regexp.MustCompile("\x1bD\x1b\\[1A\x1b7\x1b\\[1B\r\x1b\\[2Ksidecar: [^\x1b]*\x1b8|" +
	"\x1b7\x1b\\[1B\x1b\\[2K\x1b8|" +
	"\x1b7\x1b\\[999;1H\x1b\\[2K\x1b\\[7msidecar: [^\x1b]*\x1b\\[0m\x1b8")

// relayed starts a fault relay in front of s and returns it with s's URL
// pointed at it.
func relayed(t testing.TB, s *server) (*fault.TCP, string) {
	t.Helper()
	r, err := fault.NewTCP(s.host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	return r, strings.Replace(s.url, s.host, r.Addr(), 1)
}

// floodThroughCuts starts `sidecar attach` with args, prints 300,000
// numbered lines in its new shell (slow: 60,000, one echo a line), calls cut(i) for i in [0, cuts) while
// they flow (cut returns once the client has got past the fault), and
// checks that the output holds every line exactly once, in order.
func floodThroughCuts(t *testing.T, args []string, slow bool, cuts int, cut func(i int, a *ptyProc, start int) error) {
	t.Helper()
	a := startInPTY(t, append([]string{"attach"}, args...)...)
	pos := a.out.waitFor(t, "prompt", 0, "XPROMPT> ")
	n := 300000
	cmd := "seq 1 300000"
	if slow { // a line at a time: the output lasts seconds, not milliseconds
		n = 60000
		cmd = "seq 1 60000 | while read l; do echo $l; done"
	}
	a.typeText(t, cmd+"; echo DONE-$((6*7))\r")
	start := a.out.waitFor(t, "command echo", pos, "echo DONE-$((6*7))\r\n")
	for i := range cuts {
		if err := cut(i, a, start); err != nil {
			t.Fatalf("cut %d: %v; screen:\n%s", i+1, err, tail(a.out.String(), 1500))
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
	a.typeText(t, "exit\r")
	if code := a.wait(t); code != 0 {
		t.Fatalf("exit: status %d; screen:\n%s", code, tail(a.out.String(), 1500))
	}
}

// TestAttachSurvivesCuts: `sidecar attach` through a link cut at random
// points (mid-frame, mid-message, between a message and its credit)
// while its terminal prints numbered lines, over /ahp and over the
// transport-io WebSocket mapping: it reconnects by itself every time
// (and says so), and its output holds every line exactly once, in order.
func TestAttachSurvivesCuts(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		cuts int
		url  func(s *server, relay string) []string
	}{
		{"ahp", 20, func(s *server, relay string) []string { return []string{strings.Replace(s.url, s.host, relay, 1)} }},
		{"transport-io WebSocket", 10, func(s *server, relay string) []string {
			return []string{"https://" + relay + "/transport-io", "--transport", "websocket"}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := startServer(t, "")
			relay, _ := relayed(t, s)
			rng := rand.New(rand.NewPCG(14, uint64(tc.cuts)))
			from := 0
			floodThroughCuts(t, append(tc.url(s, relay.Addr()), s.connArgs()...), false, tc.cuts, func(i int, a *ptyProc, start int) error {
				// Cut while data flows: not before the last cut was
				// resumed (a cut in every handshake would never let it).
				from = max(from, start)
				relay.CutAfter(int64(1000+rng.IntN(40000)), fault.Down)
				from = a.out.waitFor(t, fmt.Sprintf("resumed after cut %d", i+1), from, "sidecar: resumed")
				return nil
			})
		})
	}
}

// TestAttachSurvivesUDPCuts: over WebTransport, a relay that drops every
// datagram for a while and then comes back on a new port (the path
// changes, as when a laptop changes networks) five times during the
// output: every line arrives exactly once, in order, whether QUIC
// migrated the path or the client reconnected.
func TestAttachSurvivesUDPCuts(t *testing.T) {
	t.Parallel()
	s := startServer(t, "")
	tcp, udp, err := fault.NewPair(s.host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tcp.Close(); _ = udp.Close() })
	args := append([]string{"https://" + tcp.Addr() + "/transport-io", "--transport", "webtransport"}, s.connArgs()...)
	floodThroughCuts(t, args, true, 5, func(i int, a *ptyProc, start int) error {
		udp.Drop(true)
		dropped := udp.Dropped(fault.Down) + udp.Dropped(fault.Up)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := udp.Await(ctx, func() bool { return udp.Dropped(fault.Down)+udp.Dropped(fault.Up) >= dropped+20 }); err != nil {
			return err
		}
		udp.Cut()
		udp.Drop(false)
		// The output moves on past where it was.
		a.out.waitFor(t, "output after the cut", len(a.out.String()), "0\r\n")
		return nil
	})
}

// TestAttachGivesUpAfterGrace: a cut longer than the host's grace (2 s
// here): attach stops trying once the grace is over, says so, names the
// terminal and the exact command to reattach, and exits non-zero.
func TestAttachGivesUpAfterGrace(t *testing.T) {
	t.Parallel()
	s := startServer(t, "journal {\n  reconnect_grace = \"2s\"\n}\n")
	relay, url := relayed(t, s)
	a := startInPTY(t, append([]string{"attach", url}, s.connArgs()...)...)
	a.out.waitFor(t, "prompt", 0, "XPROMPT> ")
	relay.Refuse(true)
	relay.Cut()
	code := a.wait(t)
	screen := a.out.String()
	if code == 0 {
		t.Fatalf("attach after the grace: exit 0; screen:\n%s", tail(screen, 1500))
	}
	m := regexp.MustCompile(`ahp-terminal:/(\S+) may still be running on the host; reattach with: (\S*sidecar) attach (\S+) (\S+)`).FindStringSubmatch(screen)
	if m == nil || m[3] != url || !strings.HasPrefix(m[4], m[1]) {
		t.Fatalf("no message naming the terminal and the reattach command; screen:\n%s", tail(screen, 1500))
	}
	if !strings.Contains(screen, "reconnecting (attempt") {
		t.Errorf("no reconnecting status before giving up; screen:\n%s", tail(screen, 1500))
	}
}

// TestAttachSurvivesBlackHole: the link goes silent for 60 s (a laptop
// lid closed: nothing gets through, nothing is reset), then comes back:
// the attach resumes by itself, and a line typed before the hole and one
// typed after it are both there, once.
func TestAttachSurvivesBlackHole(t *testing.T) {
	t.Parallel()
	s := startServer(t, "")
	relay, url := relayed(t, s)
	a := startInPTY(t, append([]string{"attach", url}, s.connArgs()...)...)
	pos := a.out.waitFor(t, "prompt", 0, "XPROMPT> ")
	a.typeText(t, "echo BEFORE-$((1+1))\r")
	pos = a.out.waitFor(t, "output before the hole", pos, "BEFORE-2\r\n")
	relay.Stall(true)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	hole := time.Now()
	// Output the shell writes meanwhile waits on the host (the holder's
	// window), not lost.
	a.typeText(t, "seq 1 5000; echo AFTER-$((2+2))\r")
	<-time.After(60*time.Second - time.Since(hole)) // the hole's length is what is tested, not a synchronization
	if err := ctx.Err(); err != nil {
		t.Fatal(err)
	}
	relay.Stall(false)
	end := a.out.waitFor(t, "output after the hole", pos, "\r\nAFTER-4\r\n")
	out := statusLine.ReplaceAllString(a.out.String()[pos:end], "")
	i := strings.Index(out, "\r\n1\r\n")
	if i < 0 || !strings.Contains(out[i:], "\r\n5000\r\n") || strings.Count(out, "\r\n2500\r\n") != 1 {
		t.Fatalf("after the hole: the seq output is not there once; got: %q", tail(out, 600))
	}
	if strings.Count(a.out.String(), "BEFORE-2\r\n") != 1 {
		t.Errorf("the output before the hole is there %d times", strings.Count(a.out.String(), "BEFORE-2\r\n"))
	}
}

// BenchmarkResume measures attach's resume time: from the link coming
// back (the relay, which refused the client's first attempt, accepts
// again) to the "resumed" line on the screen, the first byte written
// after the resume. It includes the client's backoff wait (250 ms, ±20%,
// doubling) and the reconnect itself. Run with -benchtime=Nx.
func BenchmarkResume(b *testing.B) {
	s := startServer(b, "")
	relay, url := relayed(b, s)
	a := startInPTY(b, append([]string{"attach", url}, s.connArgs()...)...)
	pos := a.out.waitFor(b, "prompt", 0, "XPROMPT> ")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var took []time.Duration
	b.ResetTimer()
	for range b.N {
		refused := relay.Refused()
		relay.Refuse(true)
		relay.Cut()
		if err := relay.Await(ctx, func() bool { return relay.Refused() > refused }); err != nil {
			b.Fatal(err)
		}
		back := time.Now()
		relay.Refuse(false)
		pos = a.out.waitFor(b, "resumed", pos, "sidecar: resumed")
		took = append(took, time.Since(back))
	}
	b.StopTimer()
	slices.Sort(took)
	b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "ms-p50")
	b.ReportMetric(float64(took[len(took)-1].Microseconds())/1000, "ms-max")
}

// TestSharerResumesFromSnapshot: a client sharing a terminal (not its
// holder, so nothing waits for it) is cut off while the holder's flood
// outgrows the journal: it resumes from a snapshot, says so, and its
// screen ends where the terminal is (the flood's last lines, then the
// prompt), not at the point of the cut.
func TestSharerResumesFromSnapshot(t *testing.T) {
	t.Parallel()
	s := startServer(t, "")
	a, id := attachNewShell(t, s)
	relay, url := relayed(t, s)
	b := startInPTY(t, append([]string{"attach", url, id}, s.connArgs()...)...)
	bpos := b.out.waitFor(t, "shared notice", 0, "you share it")
	relay.Refuse(true)
	relay.Cut()
	a.typeText(t, "seq 1 200000; echo FLOOD-$((3*3))\r")
	a.out.waitFor(t, "the holder's flood", 0, "\r\nFLOOD-9\r\n")
	relay.Refuse(false)
	// The snapshot redraws the screen's rows (each erased first, CSI 2K)
	// and puts the cursor back after the prompt.
	b.out.waitFor(t, "the end of the flood on the sharer", bpos, "FLOOD-9\r\n")
	b.out.waitFor(t, "the prompt after the flood on the sharer", bpos, "XPROMPT>")
	screen := b.out.String()
	if !strings.Contains(screen[bpos:], "sidecar: resumed") {
		t.Errorf("no resumed line; screen:\n%s", tail(screen, 800))
	}
	shown := emulated(screen)
	var rows []string
	for y := range 24 {
		rows = append(rows, emulatedRow(shown, y))
	}
	if !strings.Contains(strings.Join(rows, "\n"), "\n199999\n200000\nFLOOD-9\nXPROMPT>") {
		t.Errorf("the sharer's screen does not end with the flood's last lines:\n%s", strings.Join(rows, "\n"))
	}
	if n := len(regexp.MustCompile("(\r\n|\x1b\\[2K)100000\r\n").FindAllString(screen[bpos:], -1)); n > 1 {
		t.Errorf("line 100000 shown %d times", n)
	}
	if !strings.Contains(s.p.stderr.String(), "ahp-terminal:/"+id+" snapshot") {
		t.Errorf("the host did not resume the sharer from a snapshot")
	}
}

// TestAttachTerminalGoneDuringCut: a terminal disposed while its attach
// was cut off: the attach resumes, then says the terminal ended while the
// connection was down (not a bare "subscription not kept").
func TestAttachTerminalGoneDuringCut(t *testing.T) {
	t.Parallel()
	s := startServer(t, "")
	relay, url := relayed(t, s)
	a := startInPTY(t, append([]string{"attach", url}, s.connArgs()...)...)
	a.out.waitFor(t, "prompt", 0, "XPROMPT> ")
	out, errOut, code := s.run(t, append([]string{"ls", s.url}, s.connArgs()...)...)
	lines := strings.Split(out, "\n")
	if code != 0 || len(lines) < 2 || len(strings.Fields(lines[1])) == 0 {
		t.Fatalf("ls: exit %d, %q %q", code, out, errOut)
	}
	id := strings.Fields(lines[1])[0]
	relay.Refuse(true)
	relay.Cut()
	if _, errOut, code := s.run(t, append([]string{"kill", s.url, id}, s.connArgs()...)...); code != 0 {
		t.Fatalf("kill: exit %d, %q", code, errOut)
	}
	relay.Refuse(false)
	if code := a.wait(t); code == 0 {
		t.Fatalf("attach of a terminal gone during the cut: exit 0")
	}
	if screen := a.out.String(); !strings.Contains(screen, "ahp-terminal:/"+id+" ended on the host while the connection was down") {
		t.Fatalf("no word of the terminal's end; screen:\n%s", tail(screen, 800))
	}
}

// TestForwardSaysReconnecting: forward over a cut link says it lost the
// connection and is reconnecting, then that it resumed, and carries new
// connections afterwards (it said nothing while new connections hung).
func TestForwardSaysReconnecting(t *testing.T) {
	t.Parallel()
	echo := tcpListen(t, func(c *net.TCPConn) { _, _ = io.Copy(c, c) })
	s := startServer(t, "")
	relay, url := relayed(t, s)
	fw := tcpStartForward(t, &server{p: s.p, url: url, host: relay.Addr(), token: s.token, hash: s.hash}, fmt.Sprintf("-L 127.0.0.1:0:127.0.0.1:%d", echo))
	relay.Cut()
	pos := fw.p.stderr.waitFor(t, "the reconnecting line", 0, "sidecar: connection lost, reconnecting (attempt 1")
	fw.p.stderr.waitFor(t, "the resumed line", pos, "sidecar: resumed\n")
	c := tcpDial(t, fw.addrs[0])
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	var b [4]byte
	if _, err := io.ReadFull(c, b[:]); err != nil || string(b[:]) != "ping" {
		t.Fatalf("through -L after the resume: %q, %v", b, err)
	}
}
