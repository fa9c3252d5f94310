package web

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sidecar-dev/sidecar/transport"

	"github.com/sidecar-dev/sidecar/auth"
)

func TestHandler(t *testing.T) {
	var refused []string
	origins := transport.NewOrigins(transport.SelfOrigins(&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 4433}), nil)
	origins.OnRefuse = func(_ *http.Request, o string) { refused = append(refused, o) }
	h := Handler(Options{Origins: origins, CertHashes: func() []string { return []string{"ab"} }})
	do := func(method, path, origin string) (*http.Response, string) {
		r := httptest.NewRequest(method, path, nil)
		if origin != "" {
			r.Header.Set("Origin", origin)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		b, _ := io.ReadAll(w.Result().Body)
		return w.Result(), string(b)
	}
	res, body := do("GET", "/", "")
	if res.StatusCode != 200 || !strings.Contains(body, "assets/app.js") || !strings.Contains(res.Header.Get("Content-Security-Policy"), "default-src 'none'") {
		t.Errorf("GET /: %d %q %v", res.StatusCode, body, res.Header)
	}
	for _, p := range []string{"/assets/app.js", "/assets/app.css"} {
		if res, _ := do("GET", p, ""); res.StatusCode != 200 {
			t.Errorf("GET %s: %d", p, res.StatusCode)
		}
	}
	if res, _ := do("GET", "/nothing", ""); res.StatusCode != 404 {
		t.Errorf("GET /nothing: %d", res.StatusCode)
	}
	if res, _ := do("GET", InfoPath, ""); res.StatusCode != 405 {
		t.Errorf("GET %s: %d", InfoPath, res.StatusCode)
	}
	res, body = do("POST", InfoPath, "https://127.0.0.1:4433")
	var info Info
	if res.StatusCode != 200 || json.Unmarshal([]byte(body), &info) != nil || len(info.CertHashes) != 1 || info.CertHashes[0] != "ab" {
		t.Errorf("POST %s: %d %s", InfoPath, res.StatusCode, body)
	}
	res, body = do("POST", InfoPath, "https://evil.example:4433")
	if res.StatusCode != 403 || !strings.Contains(body, "listener.origins") || len(refused) != 1 || refused[0] != "https://evil.example:4433" {
		t.Errorf("POST %s from a foreign origin: %d %s, reported %v", InfoPath, res.StatusCode, body, refused)
	}
}

// TestTicket: POST /web/ticket gives the bearer of the token (in the
// Authorization header only) a ticket for its principal, not cached; a
// wrong or missing token, or one in the URL, is a 401 with a JSON error;
// a foreign origin a 403; past the bound on outstanding tickets a 429.
func TestTicket(t *testing.T) {
	origins := transport.NewOrigins(transport.SelfOrigins(&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 4433}), nil)
	tickets := transport.NewTickets(0, 2, nil)
	h := Handler(Options{Origins: origins, Auth: auth.NewStatic("tok"), Tickets: tickets})
	do := func(method, target, origin, authz string) (*http.Response, Ticket) {
		t.Helper()
		r := httptest.NewRequest(method, target, nil)
		if origin != "" {
			r.Header.Set("Origin", origin)
		}
		if authz != "" {
			r.Header.Set("Authorization", authz)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		var body Ticket
		if method == "POST" {
			if err := json.NewDecoder(w.Result().Body).Decode(&body); err != nil {
				t.Fatalf("%s %s: %d, body not JSON: %v", method, target, w.Code, err)
			}
		}
		return w.Result(), body
	}
	const self = "https://127.0.0.1:4433"
	res, k := do("POST", TicketPath, self, "Bearer tok")
	if res.StatusCode != 200 || k.Ticket == "" || k.ExpiresInMs != transport.TicketTTL.Milliseconds() || res.Header.Get("Cache-Control") != "no-store" {
		t.Fatalf("POST %s: %d %+v %v", TicketPath, res.StatusCode, k, res.Header)
	}
	if p, err := tickets.Redeem(k.Ticket); err != nil || p != (auth.Identity{Name: "token", Role: auth.Owner, Method: "token"}) {
		t.Fatalf("the ticket: %q %v", p, err)
	}
	for _, c := range []struct{ what, target, auth string }{
		{"wrong token", TicketPath, "Bearer wrong"},
		{"no token", TicketPath, ""},
		{"the token in the URL", TicketPath + "?token=tok", ""},
	} {
		res, k := do("POST", c.target, self, c.auth)
		if res.StatusCode != 401 || k.Ticket != "" || !strings.Contains(k.Error, "token") || k.Reason != "unauthorized" || res.Header.Get("WWW-Authenticate") == "" {
			t.Errorf("%s: %d %+v", c.what, res.StatusCode, k)
		}
	}
	// An expired or revoked credential says so (the page tells a sign-in
	// that expired from a wrong token).
	for _, ref := range []*auth.Refusal{auth.ErrExpired, auth.ErrRevoked} {
		r := httptest.NewRequest("POST", TicketPath, nil)
		r.Header.Set("Authorization", "Bearer tok")
		w := httptest.NewRecorder()
		Handler(Options{Origins: origins, Tickets: tickets, Auth: auth.Func(func(context.Context, string) (auth.Identity, error) {
			return auth.Identity{}, ref
		})}).ServeHTTP(w, r)
		var k Ticket
		_ = json.NewDecoder(w.Result().Body).Decode(&k)
		if w.Code != 401 || k.Reason != ref.Reason || !strings.Contains(k.Error, ref.Reason) {
			t.Errorf("a credential refused as %s: %d %+v", ref.Reason, w.Code, k)
		}
	}
	if res, _ := do("GET", TicketPath, self, "Bearer tok"); res.StatusCode != 405 {
		t.Errorf("GET %s: %d", TicketPath, res.StatusCode)
	}
	if res, k := do("POST", TicketPath, "https://evil.example", "Bearer tok"); res.StatusCode != 403 || k.Ticket != "" || !strings.Contains(k.Error, "listener.origins") {
		t.Errorf("foreign origin: %d %+v", res.StatusCode, k)
	}
	// The bound (2 here): two outstanding, the third refused.
	for i := range 2 {
		if res, k := do("POST", TicketPath, "", "Bearer tok"); res.StatusCode != 200 || k.Ticket == "" {
			t.Fatalf("ticket %d: %d %+v", i+1, res.StatusCode, k)
		}
	}
	if res, k := do("POST", TicketPath, "", "Bearer tok"); res.StatusCode != 429 || k.Ticket != "" || res.Header.Get("Retry-After") != "20" {
		t.Errorf("past the bound: %d %+v %v", res.StatusCode, k, res.Header)
	}
	// Without a ticket store the path is not served (a POST elsewhere: 405).
	r := httptest.NewRequest("POST", TicketPath, nil)
	r.Header.Set("Authorization", "Bearer tok")
	w := httptest.NewRecorder()
	Handler(Options{Auth: auth.NewStatic("tok")}).ServeHTTP(w, r)
	if w.Code != 405 {
		t.Errorf("no tickets: %d, want 405", w.Code)
	}
}
