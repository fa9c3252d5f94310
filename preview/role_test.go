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
	mu sync.Mutex
	ev []audit.Event
}

func (s *sinkRec) Record(e audit.Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ev = append(s.ev, e)
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
	get := func(cred string) (int, string) {
		r := httptest.NewRequest("GET", "/ports/"+ps+"/", nil)
		r.Header.Set("Authorization", "Bearer "+cred)
		w := httptest.NewRecorder()
		s.Handler().ServeHTTP(w, r)
		b, _ := io.ReadAll(w.Result().Body)
		return w.Code, string(b)
	}
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
