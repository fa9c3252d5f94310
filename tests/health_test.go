package tests

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"

	"github.com/coder/websocket"
)

// probe GETs http://addr+path and returns the status and the body.
func probe(t *testing.T, addr, path string) (int, string) {
	t.Helper()
	c := &http.Client{Timeout: waitTimeout}
	resp, err := c.Get("http://" + addr + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// TestHealthAndReadinessWhileDraining starts sidecar serve with a metrics
// listener, listener.drain_delay and listener.host_ordinal: /healthz and
// /readyz answer 200 while it serves; after SIGTERM /readyz answers 503
// "draining" while /healthz stays 200 and the daemon still serves (a
// client already connected stays so, a new one is accepted); when the
// delay has passed the clients are told 1001 and the daemon exits 0. The
// log names the host ordinal its transport-io origins carry.
func TestHealthAndReadinessWhileDraining(t *testing.T) {
	t.Parallel()
	s := startServerListener(t, "  host_ordinal = 7\n  drain_delay = \"4s\"\n", "metrics {\n  listen = \"127.0.0.1:0\"\n}\n")
	var m []string
	if _, ok := s.p.stderr.waitMatch(waitTimeout, func(text string) bool {
		m = metricsLine.FindStringSubmatch(text)
		return m != nil && strings.Contains(text, `"host_ordinal":7`)
	}); !ok {
		t.Fatalf("no metrics listening line, or no host_ordinal 7 in the log:\n%s", tail(s.p.stderr.String(), 3000))
	}
	addr := m[1]
	for path, want := range map[string]string{"/healthz": "ok\n", "/readyz": "ready\n"} {
		if code, body := probe(t, addr, path); code != http.StatusOK || body != want {
			t.Errorf("serving: GET %s = %d %q, want 200 %q", path, code, body, want)
		}
	}

	before := s.dialRaw(t)
	before.initialize("drain-before")
	if err := s.p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	s.p.stderr.waitFor(t, "the drain log line", 0, "draining: not ready")
	if code, body := probe(t, addr, "/readyz"); code != http.StatusServiceUnavailable || body != "draining\n" {
		t.Errorf("draining: GET /readyz = %d %q, want 503 \"draining\\n\"", code, body)
	}
	if code, body := probe(t, addr, "/healthz"); code != http.StatusOK || body != "ok\n" {
		t.Errorf("draining: GET /healthz = %d %q, want 200 \"ok\\n\"", code, body)
	}
	// Still serving: a new client is accepted and answered.
	during := s.dialRaw(t)
	during.initialize("drain-during")

	for name, rc := range map[string]*rawConn{"before": before, "during": during} {
		_, err := rc.waitClosed(waitTimeout)
		var ce websocket.CloseError
		if !errors.As(err, &ce) || ce.Code != websocket.StatusGoingAway {
			t.Errorf("client %s: closed with %v, want 1001", name, err)
		}
	}
	if code := s.p.wait(t, waitTimeout); code != 0 {
		t.Errorf("exit status %d after SIGTERM, want 0", code)
	}
	if !strings.Contains(s.p.stderr.String(), `"drain_delay":"4s"`) {
		t.Errorf("drain line without drain_delay 4s:\n%s", tail(s.p.stderr.String(), 2000))
	}
}
