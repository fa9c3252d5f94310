package preview

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/sidecar-dev/sidecar/adapters/tcp"
	"github.com/sidecar-dev/sidecar/audit"
	"github.com/sidecar-dev/sidecar/auth"
	"github.com/sidecar-dev/sidecar/config"
)

// roleAuth maps a bearer credential to a role of the same name.
type roleAuth struct{}

func (roleAuth) Authenticate(_ context.Context, cred string) (auth.Identity, error) {
	r, err := auth.ParseRole(cred)
	if err != nil {
		return auth.Identity{}, auth.ErrUnknown
	}
	return auth.Identity{Name: "p-" + cred, Role: r, Method: "tokens_file"}, nil
}

type sinkRec struct {
	mu      sync.Mutex
	ev      []audit.Event
	changed chan struct{} // one pending wake-up after each Record (made on first use)
}

func (s *sinkRec) Record(e audit.Event) {
	s.mu.Lock()
	s.ev = append(s.ev, e)
	ch := s.ch()
	s.mu.Unlock()
	select {
	case ch <- struct{}{}:
	default:
	}
}

// ch returns the wake-up channel; s.mu is held.
func (s *sinkRec) ch() chan struct{} {
	if s.changed == nil {
		s.changed = make(chan struct{}, 1)
	}
	return s.changed
}

// waitFor waits until n events are recorded (a request's preview.request
// is recorded once its handler returns, after the client has read the
// answer), at most 10 s.
func (s *sinkRec) waitFor(t *testing.T, n int) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		s.mu.Lock()
		have, ch := len(s.ev), s.ch()
		s.mu.Unlock()
		if have >= n {
			return
		}
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("%d audit events after 10 s, want %d", have, n)
		}
	}
}

// TestPreviewRole: a port's preview needs preview.open: a viewer is
// refused 403 naming the permission (and audited as permission.denied),
// a user's request reaches the app, audited with the user's role.
func TestPreviewRole(t *testing.T) {
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "app says hi") }))
	defer app.Close()
	ps := strconv.Itoa(app.Listener.Addr().(*net.TCPAddr).Port)
	pol, err := tcp.NewPolicy([]string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	sink := &sinkRec{}
	s := New(Options{Auth: roleAuth{}, Audit: sink, Dialer: &tcp.Dialer{Policy: pol, Timeout: 5 * time.Second},
		Config: config.Default().Preview, Log: hclog.NewNullLogger()})
	defer s.Close()
	get := func(cred string) (int, string) { return previewGet(s, cred, ps) }
	if code, body := get("viewer"); code != http.StatusForbidden || !strings.Contains(body, "permission denied: preview.open needs role user or owner; p-viewer is viewer") {
		t.Errorf("viewer: %d %q", code, body)
	}
	if code, body := get("user"); code != http.StatusOK || body != "app says hi" {
		t.Errorf("user: %d %q", code, body)
	}
	sink.mu.Lock()
	defer sink.mu.Unlock()
	var got []string
	for _, e := range sink.ev {
		got = append(got, e.Action+" "+e.Principal+" "+e.Role)
	}
	want := []string{
		"auth.success p-viewer viewer", "permission.denied p-viewer viewer", "preview.request p-viewer viewer",
		"auth.success p-user user", "preview.request p-user user",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("audit events:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestPreviewRoleTCPAllow (issue 32 review, item 1): a role's tcp_allow
// narrows the preview as it narrows forward -L: a user limited to one
// port is refused another (HTTP and a WebSocket upgrade) 403 with
// forward's message, logged and audited as permission.denied, even
// after an owner's request left an idle connection to that port in the
// pool; the allowed port and the owner's requests reach their apps.
func TestPreviewRoleTCPAllow(t *testing.T) {
	allowed := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "allowed app") }))
	defer allowed.Close()
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "other app") }))
	defer other.Close()
	ap := strconv.Itoa(allowed.Listener.Addr().(*net.TCPAddr).Port)
	op := strconv.Itoa(other.Listener.Addr().(*net.TCPAddr).Port)
	pol, err := tcp.NewPolicy([]string{"127.0.0.1", "::1"})
	if err != nil {
		t.Fatal(err)
	}
	roles, err := tcp.RolesOf(map[string]config.RoleLimits{"user": {TCPAllow: []string{"127.0.0.1:" + ap}}})
	if err != nil {
		t.Fatal(err)
	}
	sink := &sinkRec{}
	s := New(Options{Auth: roleAuth{}, Audit: sink, Dialer: &tcp.Dialer{Policy: pol, Timeout: 5 * time.Second, Roles: roles},
		Config: config.Default().Preview, Log: hclog.NewNullLogger()})
	defer s.Close()
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	get := func(cred, port string, upgrade bool) (int, string) {
		t.Helper()
		r, _ := http.NewRequest("GET", srv.URL+"/ports/"+port+"/", nil)
		r.Header.Set("Authorization", "Bearer "+cred)
		if upgrade {
			r.Header.Set("Connection", "Upgrade")
			r.Header.Set("Upgrade", "websocket")
			r.Header.Set("Sec-WebSocket-Version", "13")
			r.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
		}
		resp, err := srv.Client().Do(r)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	want := "403 Forbidden: port " + op + ": connect to 127.0.0.1:" + op + " not allowed by policy: permission denied: tcp.open for role user is limited to its tcp_allow (127.0.0.1:" + ap + ") (as for sidecar forward)\n"
	if code, body := get("owner", op, false); code != http.StatusOK || body != "other app" {
		t.Errorf("owner, other port: %d %q", code, body)
	}
	if code, body := get("user", op, false); code != http.StatusForbidden || body != want {
		t.Errorf("user, other port: %d %q\nwant %q", code, body, want)
	}
	if code, body := get("user", op, true); code != http.StatusForbidden || body != want {
		t.Errorf("user, other port, WebSocket: %d %q\nwant %q", code, body, want)
	}
	if code, body := get("user", ap, false); code != http.StatusOK || body != "allowed app" {
		t.Errorf("user, allowed port: %d %q", code, body)
	}
	sink.waitFor(t, 10)
	sink.mu.Lock()
	defer sink.mu.Unlock()
	var got []string
	for _, e := range sink.ev {
		line := e.Action + " " + e.Principal
		if e.Action == audit.ActionPermissionDenied {
			line += fmt.Sprintf(" %v %v", e.Attrs["permission"], e.Attrs["target"])
		}
		if e.Action == audit.ActionPreviewRequest {
			line += fmt.Sprintf(" %v", e.Attrs["http.response.status_code"])
		}
		got = append(got, line)
	}
	wantEv := []string{
		"auth.success p-owner", "preview.request p-owner 200",
		"auth.success p-user", "permission.denied p-user tcp.open preview port " + op, "preview.request p-user 403",
		"auth.success p-user", "permission.denied p-user tcp.open preview port " + op, "preview.request p-user 403",
		"auth.success p-user", "preview.request p-user 200",
	}
	if strings.Join(got, "\n") != strings.Join(wantEv, "\n") {
		t.Errorf("audit events:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(wantEv, "\n"))
	}
}

// ciAuth is "ci": a user whose tokens file entry narrows its TCP to one
// port (auth.Identity.TCPAllow).
type ciAuth struct{ port string }

func (a ciAuth) Authenticate(_ context.Context, cred string) (auth.Identity, error) {
	if cred != "ci" {
		return auth.Identity{}, auth.ErrUnknown
	}
	return auth.Identity{Name: "ci", Role: auth.User, Method: "tokens_file", TCPAllow: &auth.TCPLimit{Entries: []string{"127.0.0.1:" + a.port}}}, nil
}

// TestPreviewIdentityTCPAllow: an identity's own tcp_allow (its tokens
// file entry's) narrows the preview as it narrows forward -L, though its
// role has no tcp_allow: its port is proxied, another refused 403.
func TestPreviewIdentityTCPAllow(t *testing.T) {
	allowed := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "allowed app") }))
	defer allowed.Close()
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "other app") }))
	defer other.Close()
	ap := strconv.Itoa(allowed.Listener.Addr().(*net.TCPAddr).Port)
	op := strconv.Itoa(other.Listener.Addr().(*net.TCPAddr).Port)
	pol, err := tcp.NewPolicy([]string{"127.0.0.1", "::1"})
	if err != nil {
		t.Fatal(err)
	}
	s := New(Options{Auth: ciAuth{port: ap}, Dialer: &tcp.Dialer{Policy: pol, Timeout: 5 * time.Second},
		Config: config.Default().Preview, Log: hclog.NewNullLogger()})
	defer s.Close()
	get := func(port string) (int, string) { return previewGet(s, "ci", port) }
	if code, body := get(ap); code != http.StatusOK || body != "allowed app" {
		t.Errorf("its own port: %d %q", code, body)
	}
	want := "403 Forbidden: port " + op + ": connect to 127.0.0.1:" + op + " not allowed by policy: permission denied: tcp.open for ci is limited to the tcp_allow of its tokens file entry (127.0.0.1:" + ap + ") (as for sidecar forward)\n"
	if code, body := get(op); code != http.StatusForbidden || body != want {
		t.Errorf("another port: %d %q\nwant %q", code, body, want)
	}
}

// previewGet is a GET of port's preview bearing cred, served by s in
// the test's goroutine: its status and body.
func previewGet(s *Server, cred, port string) (int, string) {
	r := httptest.NewRequest("GET", "/ports/"+port+"/", nil)
	r.Header.Set("Authorization", "Bearer "+cred)
	w := httptest.NewRecorder()
	s.Handler().ServeHTTP(w, r)
	b, _ := io.ReadAll(w.Result().Body)
	return w.Code, string(b)
}
