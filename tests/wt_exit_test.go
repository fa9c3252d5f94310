package tests

import (
	"regexp"
	"strings"
	"testing"
)

// TestCLIWebTransportExitIsClose: a command over WebTransport that exits
// right after its session closes still tells the host it left. Its close
// once went out 200 ms later, if the process was still there: about one
// `ls` in five ended at the host as a lost connection (QUIC's idle
// timeout), and its state was kept for a reconnect for the whole grace.
// Each of 12 `ls` must end at the host as "closed by the client".
func TestCLIWebTransportExitIsClose(t *testing.T) {
	t.Parallel()
	s := startServer(t, "")
	const n = 12
	for range n {
		stdout, stderr, code := s.run(t, append([]string{"ls", "https://" + s.host, "--transport", "webtransport"}, s.connArgs()...)...)
		if code != 0 {
			t.Fatalf("ls exited %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
		}
	}
	line := regexp.MustCompile(`"@message":"client disconnected".*"reason":"([^"]*)"`)
	text, ok := s.p.stderr.waitMatch(waitTimeout, func(text string) bool {
		return len(line.FindAllString(text, -1)) >= n
	})
	if !ok {
		t.Fatalf("the host saw %d of %d clients leave within %v (a lost one shows after QUIC's 15 s idle timeout)", len(line.FindAllString(text, -1)), n, waitTimeout)
	}
	for _, m := range line.FindAllStringSubmatch(text, -1) {
		if m[1] != "closed by the client" {
			t.Errorf("a client ended at the host with %q, want %q", m[1], "closed by the client")
		}
	}
	if strings.Contains(text, "client state kept for reconnect") {
		t.Errorf("the host kept a client's state for a reconnect:\n%s", tail(text, 3000))
	}
}
