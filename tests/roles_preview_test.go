package tests

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestRolesPreviewTCPAllow (issue 32 review, item 1): through the real
// binary, the port preview applies a role's tcp_allow as forward -L
// does: ulla (user, limited to one port) is refused another port's
// preview, HTTP and WebSocket, 403 with forward's message, logged at
// warn and audited as permission.denied; her allowed port and olga's
// (owner) request to the other port reach their apps.
func TestRolesPreviewTCPAllow(t *testing.T) {
	t.Parallel()
	app := func(say string) int {
		a := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, say) }))
		t.Cleanup(a.Close)
		return a.Listener.Addr().(*net.TCPAddr).Port
	}
	allowed, other := app("allowed app"), app("other app")
	s := startServerRoles(t, fmt.Sprintf("tcp {\n  allow = [\"127.0.0.1/32\", \"::1/128\"]\n}\nrole \"user\" {\n  tcp_allow = [\"127.0.0.1:%d\"]\n}\n", allowed))
	c := s.previewClient(t)
	get := func(tok string, port int, ws bool) (int, string) {
		t.Helper()
		h := http.Header{"Authorization": {"Bearer " + tok}}
		if ws {
			h.Set("Connection", "Upgrade")
			h.Set("Upgrade", "websocket")
			h.Set("Sec-WebSocket-Version", "13")
			h.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
		}
		resp := do(t, c, "GET", s.previewURL(port, "/"), nil, h)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get(olgaTok, other, false); code != 200 || body != "other app" {
		t.Errorf("olga, other port: %d %q", code, body)
	}
	want := fmt.Sprintf("403 Forbidden: port %d: connect to 127.0.0.1:%d not allowed by policy: permission denied: tcp.open for role user is limited to its tcp_allow (127.0.0.1:%d) (as for sidecar forward)\n", other, other, allowed)
	if code, body := get(ullaTok, other, false); code != 403 || body != want {
		t.Errorf("ulla, other port: %d %q\nwant %q", code, body, want)
	}
	if code, body := get(ullaTok, other, true); code != 403 || body != want {
		t.Errorf("ulla, other port, WebSocket: %d %q\nwant %q", code, body, want)
	}
	if code, body := get(ullaTok, allowed, false); code != 200 || body != "allowed app" {
		t.Errorf("ulla, allowed port: %d %q", code, body)
	}
	i := s.p.stderr.waitFor(t, "the refusal's warn line", 0, `"@message":"permission denied"`)
	i = s.p.stderr.waitFor(t, "the first permission.denied", i, `"action":"permission.denied"`)
	s.p.stderr.waitFor(t, "the second permission.denied", i+1, `"action":"permission.denied"`)
	denied := 0
	for _, l := range auditLines(t, s.p.stderr.Bytes()) {
		if l.Action == "permission.denied" {
			denied++
			if l.Principal != "ulla" || l.raw["permission"] != "tcp.open" || l.raw["target"] != fmt.Sprintf("preview port %d", other) {
				t.Errorf("permission.denied: %v", l.raw)
			}
		}
	}
	if denied != 2 {
		t.Errorf("%d permission.denied audit events, want 2", denied)
	}
}
