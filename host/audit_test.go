package host_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/sidecar-dev/sidecar/audit"
	"github.com/sidecar-dev/sidecar/auth"
	"github.com/sidecar-dev/sidecar/config"
	"github.com/sidecar-dev/sidecar/host"
	"github.com/sidecar-dev/sidecar/rpc"
	"github.com/sidecar-dev/sidecar/transport"
)

// newAuditedServer is newServer recording audit events to the returned
// log.
func newAuditedServer(t *testing.T) (*host.Server, *audit.Log) {
	t.Helper()
	cfg := config.Default()
	cfg.Terminal.Shell = "/bin/sh"
	cfg.Terminal.Login = false
	lg, err := audit.New(audit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := host.NewWithOptions(cfg, hclog.NewNullLogger(), host.Options{Audit: lg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), deadline)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		_ = lg.Close()
	})
	return srv, lg
}

// connectIdentity serves a pipe for id with srv.
func connectIdentity(t testing.TB, srv *host.Server, id auth.Identity) *hostConn {
	t.Helper()
	a, b := transport.Pipe(4096)
	hc := &hostConn{t: t, mc: a, served: make(chan error, 1), nextID: 1}
	go func() { hc.served <- srv.ServeConnIdentity(context.Background(), b, id) }()
	t.Cleanup(func() {
		_ = a.Close(transport.CloseNormal, "test done")
		select {
		case <-hc.served:
		case <-time.After(deadline):
			t.Error("ServeConn did not return after the client closed")
		}
	})
	return hc
}

// events returns every event lg holds.
func events(lg *audit.Log) []audit.Event {
	evs, _, _ := lg.Read(0, audit.RingEvents)
	return evs
}

// TestAuditTerminalAndChannel: a terminal's create, attach and dispose
// are audited with the caller's principal and role; the audit channel
// is the owner's: a viewer's subscribe is refused with -32009 naming
// audit.read, and the refusal is audited with the viewer's identity.
func TestAuditTerminalAndChannel(t *testing.T) {
	t.Parallel()
	srv, lg := newAuditedServer(t)
	alice := connectIdentity(t, srv, auth.Identity{Name: "alice", Role: auth.Owner})
	alice.initialize("alice-client")
	const ch = "ahp-terminal:/audited"
	alice.mustCall(rpc.MethodCreateTerminal, rpc.CreateTerminalParams{Channel: ch, Command: []string{"sleep", "30"}})
	alice.mustCall(rpc.MethodSubscribe, rpc.SubscribeParams{Channel: ch})
	alice.mustCall(rpc.MethodDisposeTerminal, rpc.ChannelParams{Channel: ch})
	alice.mustCall(rpc.MethodSubscribe, rpc.SubscribeParams{Channel: "ahp-otlp://logs/audit"})

	bob := connectIdentity(t, srv, auth.Identity{Name: "bob", Role: auth.Viewer})
	bob.initialize("bob-client")
	e := bob.callErr(rpc.MethodSubscribe, rpc.SubscribeParams{Channel: "ahp-otlp://logs/audit"}, rpc.CodePermissionDenied)
	if !strings.Contains(e.Message, "audit.read") || !strings.Contains(e.Message, "viewer") {
		t.Errorf("refusal %q: want it to name audit.read and the role", e.Message)
	}
	e = alice.callErr(rpc.MethodSubscribe, rpc.SubscribeParams{Channel: "ahp-otlp://logs/audit?x=1"}, rpc.CodeInvalidParams)
	if !strings.Contains(e.Message, "takes no parameters") {
		t.Errorf("a parameter: %q", e.Message)
	}

	type seen struct{ action, principal, role, detail string }
	var got []seen
	for _, ev := range events(lg) {
		detail, _ := ev.Attrs["terminal"].(string)
		if ev.Action == audit.ActionPermissionDenied {
			detail = ev.Attrs["permission"].(string) + " " + ev.Attrs["target"].(string)
		}
		got = append(got, seen{ev.Action, ev.Principal, ev.Role, detail})
	}
	want := []seen{
		{"terminal.create", "alice", "owner", ch},
		{"terminal.attach", "alice", "owner", ch},
		{"terminal.kill", "alice", "owner", ch},
		{"permission.denied", "bob", "viewer", "audit.read ahp-otlp://logs/audit"},
	}
	if len(got) != len(want) {
		t.Fatalf("events %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("event %d: %v, want %v", i, got[i], want[i])
		}
	}
}

// TestAuditTerminalShare: terminal/share and terminal/unshare are each
// audited as terminal.share with the caller's identity, the terminal,
// with whom (a principal or a role), the access, and whether it was a
// revocation.
func TestAuditTerminalShare(t *testing.T) {
	t.Parallel()
	srv, lg := newAuditedServer(t)
	ursula := connectIdentity(t, srv, auth.Identity{Name: "ursula", Role: auth.User})
	ursula.initialize("ursula-client")
	const ch = "ahp-terminal:/share-audited"
	ursula.mustCall(rpc.MethodCreateTerminal, rpc.CreateTerminalParams{Channel: ch, Command: []string{"sleep", "30"}})
	ursula.mustCall(rpc.MethodTerminalShare, rpc.TerminalShareParams{Channel: ch, With: rpc.ShareWith{Principal: "vera"}, Access: rpc.AccessRead})
	ursula.mustCall(rpc.MethodTerminalShare, rpc.TerminalShareParams{Channel: ch, With: rpc.ShareWith{Role: "user"}, Access: rpc.AccessWrite})
	ursula.mustCall(rpc.MethodTerminalUnshare, rpc.TerminalUnshareParams{Channel: ch, With: rpc.ShareWith{Principal: "vera"}})

	var got []string
	for _, ev := range events(lg) {
		if ev.Action != audit.ActionTerminalShare {
			continue
		}
		a := ev.Attrs
		got = append(got, fmt.Sprintf("%s/%s %v %v %v %v %v %v", ev.Principal, ev.Role, a["terminal"], a["with.principal"], a["with.role"], a["access"], a["revoked"], a["client.id"]))
	}
	want := []string{
		"ursula/user " + ch + " vera <nil> read false ursula-client",
		"ursula/user " + ch + " <nil> user write false ursula-client",
		"ursula/user " + ch + " vera <nil> <nil> true ursula-client",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("terminal.share events:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
