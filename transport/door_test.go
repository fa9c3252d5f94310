package transport

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sidecar-dev/sidecar/audit"
	"github.com/sidecar-dev/sidecar/auth"
	"github.com/sidecar-dev/sidecar/transportio"
)

// recorder is an audit.Sink keeping what it is told.
type recorder struct {
	mu     sync.Mutex
	events []audit.Event
}

func (r *recorder) Record(e audit.Event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

func (r *recorder) all() []audit.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]audit.Event(nil), r.events...)
}

// testAuth knows "alice-secret" (alice), refuses "old-secret" as revoked,
// fails to decide "down", and refuses the rest as unknown.
var testAuth = auth.Func(func(_ context.Context, cred string) (auth.Identity, error) {
	switch cred {
	case "alice-secret":
		return alice, nil
	case "old-secret":
		return auth.Identity{}, auth.ErrRevoked
	case "down":
		return auth.Identity{}, errors.New("backend down")
	}
	return auth.Identity{}, auth.ErrUnknown
})

// whoServe answers with the identity its context carries, then closes
// as unauthorized "revoked" (what a revocation does).
func whoServe(ctx context.Context, mc MessageConn) {
	id := IdentityFrom(ctx)
	_ = mc.WriteMessage(ctx, []byte(`"`+id.Name+" "+string(id.Role)+" "+id.Method+`"`))
	_, _ = mc.ReadMessage(ctx)
	_ = mc.Close(CloseUnauthorized, ReasonRevoked)
}

// TestAHPDoor: /ahp serves a credential's identity (IdentityFrom), answers
// a refusal with 401 naming its reason and a failure to decide with 503,
// records each decision without the credential, and a host's
// CloseUnauthorized reaches the client as 4007 "revoked".
func TestAHPDoor(t *testing.T) {
	rec := &recorder{}
	srv := httptest.NewServer(AHPHandler(AcceptOptions{Auth: testAuth, Audit: rec, ReadLimit: 1 << 20}, whoServe))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	url := "ws" + strings.TrimPrefix(srv.URL, "http") + "/ahp"
	dial := func(tok string) (MessageConn, error) {
		return DialWebSocket(ctx, url, http.Header{"Authorization": {"Bearer " + tok}}, nil, 1<<20, false)
	}
	mc, err := dial("alice-secret")
	if err != nil {
		t.Fatal(err)
	}
	m, err := mc.ReadMessage(ctx)
	if err != nil || string(m) != `"alice user tokens_file"` {
		t.Fatalf("identity served: %q %v", m, err)
	}
	_ = mc.WriteMessage(ctx, []byte(`{}`))
	_, err = mc.ReadMessage(ctx)
	if CloseStatus(err) != CloseUnauthorized || CloseReason(err) != "revoked" {
		t.Fatalf("after revocation: %v (%d %q), want 4007 revoked", err, CloseStatus(err), CloseReason(err))
	}
	mc.Close(CloseNormal, "")
	for _, c := range []struct {
		tok    string
		status int
		reason string // the body's, as the dialer reads it
	}{{"old-secret", 401, "revoked"}, {"nobody", 401, "missing or wrong token"}, {"down", 503, "try again"}} {
		_, err := dial(c.tok)
		var he *HTTPError
		if !errors.As(err, &he) || he.StatusCode != c.status || he.Reason != c.reason {
			t.Errorf("%s: %v (reason %q), want HTTP %d %q", c.tok, err, he.Reason, c.status, c.reason)
		}
	}
	ev := rec.all()
	want := []struct{ action, who, reason string }{
		{AuditSuccess, "alice", ""}, {AuditFailure, "", "revoked"}, {AuditFailure, "", "unauthorized"}, {AuditFailure, "", "authorize failed"},
	}
	if len(ev) != len(want) {
		t.Fatalf("%d audit events, want %d: %+v", len(ev), len(want), ev)
	}
	for i, w := range want {
		e := ev[i]
		if e.Action != w.action || e.Principal != w.who || (w.reason != "" && e.Attrs["reason"] != w.reason) || e.Attrs["transport"] != "ahp" || e.Attrs["network.peer.address"] == "" {
			t.Errorf("event %d: %+v, want %+v", i, e, w)
		}
		for _, v := range e.Attrs {
			if s, _ := v.(string); strings.Contains(s, "secret") {
				t.Errorf("event %d carries the credential: %+v", i, e)
			}
		}
	}
	if ev[0].Attrs["auth.method"] != "tokens_file" || ev[0].Role != "user" {
		t.Errorf("success event: %+v", ev[0])
	}
}

// TestTIODoor: the transport-io WebSocket mapping serves the identity of
// a credential and of a ticket issued to it (Method kept, audit method
// "ticket"), closes a refusal as WT_UNAUTHORIZED with the refusal's
// reason, a failure to decide as WT_NO_ERROR "authorize failed", and a
// host's CloseUnauthorized as WT_UNAUTHORIZED "revoked".
func TestTIODoor(t *testing.T) {
	rec := &recorder{}
	opts := TIOOptions{Auth: testAuth, Audit: rec, Tickets: NewTickets(0, 0, nil)}
	srv := httptest.NewServer(TIOWebSocketHandler(opts, whoServe))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	url := "ws" + strings.TrimPrefix(srv.URL, "http") + TIOPath
	k, err := opts.Tickets.Issue(alice)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"?token=alice-secret", "?ticket=" + k} {
		mc, err := DialTIOWebSocket(ctx, url+q, nil, nil, false)
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		m, err := mc.ReadMessage(ctx)
		if err != nil || string(m) != `"alice user tokens_file"` {
			t.Fatalf("%s: identity served: %q %v", q, m, err)
		}
		_ = mc.WriteMessage(ctx, []byte(`{}`))
		_, err = mc.ReadMessage(ctx)
		if !IsUnauthorized(err) || CloseReason(err) != "revoked" || CloseStatus(err) != CloseUnauthorized {
			t.Fatalf("%s: after revocation: %v, want WT_UNAUTHORIZED revoked", q, err)
		}
		mc.Close(CloseNormal, "")
	}
	_, err = DialTIOWebSocket(ctx, url+"?token=old-secret", nil, nil, false)
	if !IsUnauthorized(err) || CloseReason(err) != "revoked" {
		t.Fatalf("revoked credential: %v, want WT_UNAUTHORIZED revoked", err)
	}
	_, err = DialTIOWebSocket(ctx, url+"?token=down", nil, nil, false)
	var se *transportio.SessionError
	if !errors.As(err, &se) || se.Code != transportio.CloseNoError || se.Reason != "authorize failed" {
		t.Fatalf("failure to decide: %v, want WT_NO_ERROR authorize failed", err)
	}
	methods := []string{}
	for _, e := range rec.all() {
		methods = append(methods, e.Action+":"+func() string {
			if m, ok := e.Attrs["auth.method"].(string); ok {
				return m
			}
			return e.Attrs["reason"].(string)
		}())
	}
	if got, want := strings.Join(methods, " "), "auth.success:tokens_file auth.success:ticket auth.failure:revoked auth.failure:authorize failed"; got != want {
		t.Fatalf("audit: %s, want %s", got, want)
	}
}
