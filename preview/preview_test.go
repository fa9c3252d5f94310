package preview

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sidecar-dev/sidecar/config"

	"github.com/sidecar-dev/sidecar/auth"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// clock is a settable time for Sessions.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

// TestSessionsExpireRenewRevoke: a session is valid for its TTL, renewed
// only past half of it, refused once expired or revoked.
func TestSessionsExpireRenewRevoke(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	ss := NewSessions(10*time.Second, 8, c.now)
	id, err := ss.Create(auth.Identity{Name: "p", Role: auth.Viewer, Method: "tokens_file"})
	if err != nil {
		t.Fatal(err)
	}
	if p, ok, renewed := ss.Check(id, true); p != (auth.Identity{Name: "p", Role: auth.Viewer, Method: "tokens_file"}) || !ok || renewed {
		t.Fatalf("fresh: %q %v %v", p, ok, renewed)
	}
	c.t = c.t.Add(4 * time.Second)
	if _, ok, renewed := ss.Check(id, true); !ok || renewed {
		t.Fatalf("at 4 s of 10: ok %v renewed %v, want valid, not renewed", ok, renewed)
	}
	c.t = c.t.Add(2 * time.Second) // 6 s: past half
	if _, ok, renewed := ss.Check(id, true); !ok || !renewed {
		t.Fatalf("at 6 s of 10: ok %v renewed %v, want renewed", ok, renewed)
	}
	c.t = c.t.Add(9 * time.Second) // 9 s after the renewal
	if _, ok, _ := ss.Check(id, false); !ok {
		t.Fatal("renewed session expired early")
	}
	c.t = c.t.Add(time.Second) // 10 s after the renewal
	if _, ok, _ := ss.Check(id, true); ok {
		t.Fatal("expired session accepted")
	}
	if ss.Len() != 0 {
		t.Fatalf("expired session kept: %d", ss.Len())
	}
	id2, _ := ss.Create(auth.Identity{Name: "p"})
	ss.Revoke(id2)
	if _, ok, _ := ss.Check(id2, false); ok {
		t.Fatal("revoked session accepted")
	}
	if _, ok, _ := ss.Check("", false); ok {
		t.Fatal("empty id accepted")
	}
}

// TestSessionsBound: at most max are kept; the one nearest its expiry
// goes first, expired ones before any.
func TestSessionsBound(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	ss := NewSessions(time.Minute, 3, c.now)
	var ids []string
	for range 3 {
		id, _ := ss.Create(auth.Identity{Name: "p"})
		ids = append(ids, id)
		c.t = c.t.Add(time.Second)
	}
	id4, _ := ss.Create(auth.Identity{Name: "p"})
	if ss.Len() != 3 {
		t.Fatalf("%d kept, want 3", ss.Len())
	}
	if _, ok, _ := ss.Check(ids[0], false); ok {
		t.Error("the oldest session survived the bound")
	}
	for _, id := range []string{ids[1], ids[2], id4} {
		if _, ok, _ := ss.Check(id, false); !ok {
			t.Error("a newer session was forgotten")
		}
	}
	for range 100 {
		_, _ = ss.Create(auth.Identity{Name: "p"})
	}
	if ss.Len() != 3 {
		t.Fatalf("%d kept after 100 more, want 3", ss.Len())
	}
}

func TestRewriteLocation(t *testing.T) {
	for _, tc := range []struct{ in, prefix, want string }{
		{"/login?next=%2Fa", "/ports/3000", "/ports/3000/login?next=%2Fa"},
		{"/", "/vm1/ports/3000", "/vm1/ports/3000/"},
		{"http://localhost:3000/x", "/ports/3000", "/ports/3000/x"},
		{"http://127.0.0.1:3000/x?y#z", "/ports/3000", "/ports/3000/x?y#z"},
		{"http://[::1]:3000/", "/ports/3000", "/ports/3000/"},
		{"http://localhost:4000/x", "/ports/3000", "http://localhost:4000/x"}, // another app
		{"https://example.com/cb", "/ports/3000", "https://example.com/cb"},
		{"next", "/ports/3000", "next"}, // relative: resolves under the prefix already
		{"//evil.example/x", "/ports/3000", "//evil.example/x"},
		{"/x", "", "/x"}, // subdomain mode
	} {
		if got := rewriteLocation(tc.in, tc.prefix, 3000); got != tc.want {
			t.Errorf("rewriteLocation(%q, %q) = %q, want %q", tc.in, tc.prefix, got, tc.want)
		}
	}
}

func TestRewriteSetCookie(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"a=1; Path=/; HttpOnly", "a=1; Path=/ports/3000/; HttpOnly"},
		{"a=1; path=/api; Domain=localhost; Secure", "a=1; Path=/ports/3000/api; Secure"},
		{"a=1", "a=1"},
		{"sidecar_preview=x; Path=/", ""},
	} {
		got, ok := rewriteSetCookie(tc.in, "/ports/3000")
		if got != tc.want || ok != (tc.want != "") {
			t.Errorf("rewriteSetCookie(%q) = %q %v, want %q", tc.in, got, ok, tc.want)
		}
	}
}

func TestStripCookie(t *testing.T) {
	h := http.Header{"Cookie": {"a=1; sidecar_preview=s1", "sidecar_preview=s2", "b=\"q; r\"; c=3"}}
	stripCookie(h, CookieName)
	if got := h.Values("Cookie"); len(got) != 1 || got[0] != "a=1; b=\"q; r\"; c=3" {
		t.Errorf("Cookie %q", got)
	}
	h = http.Header{"Cookie": {"sidecar_preview=s1"}}
	stripCookie(h, CookieName)
	if _, ok := h["Cookie"]; ok {
		t.Errorf("Cookie kept: %q", h.Values("Cookie"))
	}
}

func TestParsePort(t *testing.T) {
	for s, want := range map[string]int{"1": 1, "3000": 3000, "65535": 65535, "0": 0, "65536": 0, "03000": 0, "+80": 0, "": 0, "8080a": 0, "999999": 0} {
		got, ok := parsePort(s)
		if got != want || ok != (want != 0) {
			t.Errorf("parsePort(%q) = %d %v, want %d", s, got, ok, want)
		}
	}
}

// TestHintsBound: at most maxHintPorts ports and maxHintPaths paths per
// port are kept; the count goes on.
func TestHintsBound(t *testing.T) {
	h := newHints()
	now := time.Unix(0, 0)
	for p := 1; p <= maxHintPorts+10; p++ {
		now = now.Add(time.Second)
		h.note(p, "/x", now)
	}
	snap := h.snapshot()
	if len(snap) != maxHintPorts || snap["1"] != nil || snap[strconv.Itoa(maxHintPorts+10)] == nil {
		t.Fatalf("%d ports kept (want %d, the oldest gone)", len(snap), maxHintPorts)
	}
	for i := range 20 {
		h.note(9999, "/p"+strconv.Itoa(i), now)
	}
	ps := h.snapshot()["9999"]
	if len(ps.Outside) != maxHintPaths || ps.OutsideCount != 20 || ps.Outside[0] != "/p0" {
		t.Fatalf("port status %+v", ps)
	}
}

// TestWatchOutside: a logged-in request outside the previews with a
// preview page's Referer is noted for that port; other requests are not.
func TestWatchOutside(t *testing.T) {
	s := New(Options{Base: "/vm1", Token: "tok", Auth: auth.NewStatic("tok"), Config: config.Default().Preview})
	defer s.Close()
	id, _ := s.sessions.Create(auth.Identity{Name: "p"})
	h := s.WatchOutside(http.NotFoundHandler())
	for _, tc := range []struct{ path, ref, site, cookie string }{
		{"/abs.js", "https://d/vm1/ports/3000/", "same-origin", id},
		{"/abs.js", "https://d/vm1/ports/3000/page", "", id},
		{"/vm1/ports/3000/x.js", "https://d/vm1/ports/3000/", "same-origin", id}, // inside: not noted
		{"/other.js", "https://d/vm1/", "same-origin", id},                       // not from a preview
		{"/evil.js", "https://d/vm1/ports/3000/", "cross-site", id},              // another site's claim
		{"/planted.js", "https://d/vm1/ports/3000/", "", ""},                     // no login
		{"/planted.js", "https://d/vm1/ports/3000/", "", "bogus"},                // no valid login
	} {
		r := httptest.NewRequest("GET", tc.path, nil)
		r.Header.Set("Referer", tc.ref)
		if tc.site != "" {
			r.Header.Set("Sec-Fetch-Site", tc.site)
		}
		if tc.cookie != "" {
			r.AddCookie(&http.Cookie{Name: CookieName, Value: tc.cookie})
		}
		h.ServeHTTP(httptest.NewRecorder(), r)
	}
	snap := s.hints.snapshot()
	if len(snap) != 1 || snap["3000"] == nil || snap["3000"].OutsideCount != 2 || len(snap["3000"].Outside) != 1 || snap["3000"].Outside[0] != "/abs.js" {
		t.Fatalf("hints %v", snap)
	}
}

// TestSessionsRevokeIdentity: revoking an identity forgets its sessions
// (those of its method only, each told to onForget, which ends their
// requests in progress); a session ends at its identity's expiry.
func TestSessionsRevokeIdentity(t *testing.T) {
	ss := NewSessions(time.Hour, 8, nil)
	var forgot int
	ss.onForget = func([32]byte) { forgot++ }
	alice := auth.Identity{Name: "alice", Role: auth.User, Method: "tokens_file"}
	a1, _ := ss.Create(alice)
	a2, _ := ss.Create(alice)
	o, _ := ss.Create(auth.Identity{Name: "alice", Method: "oidc"})
	b, _ := ss.Create(auth.Identity{Name: "bob", Method: "tokens_file"})
	if n := ss.RevokeIdentity("alice", "tokens_file"); n != 2 || forgot != 2 {
		t.Fatalf("RevokeIdentity: %d sessions, %d forgotten, want 2 and 2", n, forgot)
	}
	for _, id := range []string{a1, a2} {
		if _, ok, _ := ss.Check(id, false); ok {
			t.Fatal("a revoked identity's session is still valid")
		}
	}
	for _, id := range []string{o, b} {
		if _, ok, _ := ss.Check(id, false); !ok {
			t.Fatal("another identity's session was revoked")
		}
	}
	exp, _ := ss.Create(auth.Identity{Name: "carol", Method: "oidc", Expiry: time.Now().Add(-time.Second)})
	if _, ok, _ := ss.Check(exp, false); ok {
		t.Fatal("a session past its identity's expiry is valid")
	}
}
