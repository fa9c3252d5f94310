package adapters

import (
	"sync"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/sidecar-dev/sidecar/audit"
	"github.com/sidecar-dev/sidecar/auth"
	"github.com/sidecar-dev/sidecar/rpc"
)

type events struct {
	mu sync.Mutex
	ev []audit.Event
}

func (e *events) Record(ev audit.Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.ev = append(e.ev, ev)
}

// TestGuardAudits: every refusal is an audit event naming the identity,
// the permission and the target (each one, though the log says it once a
// window); an allowed operation records nothing.
func TestGuardAudits(t *testing.T) {
	g := NewGuard(hclog.NewNullLogger())
	defer g.Stop()
	sink := &events{}
	g.SetAudit(sink)
	vera := auth.Identity{Name: "vera", Role: auth.Viewer, Method: "tokens_file"}
	for range 2 {
		e := g.CheckOn(vera, auth.TerminalCreate, "createTerminal")
		if e == nil || e.Code != rpc.CodePermissionDenied || e.Message != "permission denied: terminal.create needs role user or owner; vera is viewer" {
			t.Fatalf("refusal %v", e)
		}
	}
	if e := g.Check(vera, auth.RootList); e != nil {
		t.Fatalf("root.list refused to a viewer: %v", e)
	}
	if len(sink.ev) != 2 {
		t.Fatalf("%d events, want 2: %+v", len(sink.ev), sink.ev)
	}
	for _, ev := range sink.ev {
		if ev.Action != audit.ActionPermissionDenied || ev.Principal != "vera" || ev.Role != "viewer" ||
			ev.Attrs["permission"] != "terminal.create" || ev.Attrs["target"] != "createTerminal" {
			t.Errorf("event %+v", ev)
		}
	}
}
