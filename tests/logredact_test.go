package tests

import (
	"context"
	"net/http"
	"strings"
	"syscall"
	"testing"

	"github.com/coder/websocket"
)

// TestLogsNoToken: requests that carry the daemon's token in their query
// (?token=, as browsers send it) or anywhere else, served, refused or
// unknown, never put it in the daemon's log output, even at debug level
// and in lines that quote what the peer sent (a refused Origin).
func TestLogsNoToken(t *testing.T) {
	t.Parallel()
	s := startServer(t, "")
	const wrong = "WRONG-SECRET-4711"
	origin := "https://" + s.host
	hc := s.httpClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()

	// Served: plain AHP and transport-io's WebSocket mapping with the
	// token in the query.
	for _, path := range []string{"/ahp", "/transport-io"} {
		c, _, err := websocket.Dial(ctx, "wss://"+s.host+path+"?token="+s.token, &websocket.DialOptions{HTTPClient: hc})
		if err != nil {
			t.Fatalf("%s?token=: %v", path, err)
		}
		_ = c.Close(websocket.StatusNormalClosure, "")
	}
	// Refused or unknown, with the token, or a wrong one, in the query.
	for _, tc := range []struct {
		path   string
		header http.Header
	}{
		{"/ahp?token=" + wrong, nil},
		{"/transport-io?token=" + wrong, nil},
		{"/nowhere?token=" + s.token, nil},
		{"/ahp?a=1;token=" + s.token, nil},
		// A refused origin is logged as sent: here it carries the token.
		{"/ahp?token=" + s.token, http.Header{"Origin": {"https://evil.example/?token=" + s.token + "&ticket=" + wrong}}},
		{"/ahp", http.Header{"Origin": {"https://evil.example/" + s.token}}},
	} {
		c, _, err := websocket.Dial(ctx, "wss://"+s.host+tc.path, &websocket.DialOptions{HTTPClient: hc, HTTPHeader: tc.header})
		if err == nil {
			_ = c.CloseNow()
			if !strings.HasPrefix(tc.path, "/transport-io") { // refused after the upgrade there
				t.Errorf("%s (Origin %v) was served", tc.path, tc.header)
			}
		}
	}
	resp, err := hc.Get(origin + "/?token=" + s.token)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()

	// Shut down (every line written), then read the log.
	_ = s.p.cmd.Process.Signal(syscall.SIGTERM)
	if code := s.p.wait(t, waitTimeout); code != 0 {
		t.Fatalf("serve exit %d", code)
	}
	log := s.p.stderr.String()
	for _, secret := range []string{s.token, wrong} {
		if i := strings.Index(log, secret); i >= 0 {
			t.Errorf("the daemon's log holds %q: ...%s...", secret, log[max(0, i-300):min(len(log), i+100)])
		}
	}
	if !strings.Contains(log, "browser origin refused") || !strings.Contains(log, "REDACTED") {
		t.Errorf("the log has no refused origin with a credential taken out: the test did not exercise the redaction\n%s", tail(log, 4000))
	}
}
