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
	// The page's ticket exchange with a wrong token: refused, and logged.
	req, err := http.NewRequest(http.MethodPost, origin+"/web/ticket", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+wrong)
	req.Header.Set("Origin", origin)
	resp, err = hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("POST /web/ticket with a wrong token: HTTP %d, want 401", resp.StatusCode)
	}

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
	// What is said instead: a token in a URL is warned of (the path only),
	// a wrong token at the ticket exchange is logged.
	for _, want := range []string{`"@message":"token in the URL query: it ends up in proxies' access logs; send it as Authorization: Bearer, or a ticket"`,
		`"@message":"web ticket refused"`} {
		if !strings.Contains(log, want) {
			t.Errorf("the log has no %s\n%s", want, tail(log, 4000))
		}
	}
}
