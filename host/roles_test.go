package host_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/sidecar-dev/sidecar/auth"
	"github.com/sidecar-dev/sidecar/config"
	"github.com/sidecar-dev/sidecar/host"
	"github.com/sidecar-dev/sidecar/rpc"
	"github.com/sidecar-dev/sidecar/transport"
)

// connectID is connect for a transport that authenticated id (name and
// role): host.Server.ServeConnIdentity, as the listeners call it.
func connectID(t testing.TB, srv *host.Server, id auth.Identity) *hostConn {
	t.Helper()
	a, b := transport.Pipe(4096)
	hc := &hostConn{t: t, mc: a, served: make(chan error, 1), nextID: 1}
	go func() { hc.served <- srv.ServeConnIdentity(context.Background(), b, id) }()
	t.Cleanup(func() {
		_ = a.Close(transport.CloseNormal, "test done")
		select {
		case err := <-hc.served:
			hc.served <- err
		case <-time.After(deadline):
			t.Error("ServeConn did not return after the client closed")
		}
	})
	return hc
}

var (
	ownerID  = auth.Identity{Name: "olga", Role: auth.Owner, Method: "tokens_file"}
	userID   = auth.Identity{Name: "ursula", Role: auth.User, Method: "tokens_file"}
	bobID    = auth.Identity{Name: "bob", Role: auth.User, Method: "tokens_file"}
	viewerID = auth.Identity{Name: "vera", Role: auth.Viewer, Method: "tokens_file"}
)

// denied asserts that the request is refused -32009 with exactly want.
func (hc *hostConn) denied(method string, params any, want string) {
	hc.t.Helper()
	if e := hc.callErr(method, params, rpc.CodePermissionDenied); e.Message != want {
		hc.t.Errorf("%s refused with %q, want %q", method, e.Message, want)
	}
}

// rejection dispatches action on ch and returns the echo's
// rejectionReason and rejectionCode.
func (hc *hostConn) rejection(ch, action string, seq uint64) (string, int64) {
	hc.t.Helper()
	hc.send(`{"jsonrpc":"2.0","method":"dispatchAction","params":{"channel":"` + ch + `","clientSeq":` + utoa(seq) + `,"action":` + action + `}}`)
	m, _ := hc.until("echo of "+action, func(m *msg) bool {
		_, _, env := m.action()
		return env.Channel == ch && env.Origin != nil && env.Origin.ClientSeq == seq
	})
	_, _, env := m.action()
	return env.RejectionReason, env.RejectionCode
}

// TestViewerRefusals: a viewer may list, watch the machine and list its
// processes; every other operation is refused -32009 with a message
// naming the permission, the roles that have it, and the viewer.
func TestViewerRefusals(t *testing.T) {
	t.Parallel()
	srv := newServer(t, nil)
	owner := connectID(t, srv, ownerID)
	owner.initialize("o1")
	owner.mustCall(rpc.MethodCreateTerminal, rpc.CreateTerminalParams{Channel: "ahp-terminal:/o", Command: []string{"cat"}})

	v := connectID(t, srv, viewerID)
	v.initialize("v1")
	needs := func(perm, roles string) string {
		return fmt.Sprintf("permission denied: %s needs role %s; vera is viewer", perm, roles)
	}
	port := 1
	v.denied(rpc.MethodCreateTerminal, rpc.CreateTerminalParams{Channel: "ahp-terminal:/v"}, needs("terminal.create", "user or owner"))
	v.denied(rpc.MethodDisposeTerminal, rpc.ChannelParams{Channel: "ahp-terminal:/o"}, needs("terminal.kill", "user or owner"))
	v.denied(rpc.MethodTerminalShare, rpc.TerminalShareParams{Channel: "ahp-terminal:/o", With: rpc.ShareWith{Role: "viewer"}, Access: "read"}, needs("terminal.share", "user or owner"))
	v.denied(rpc.MethodCreateTCPConnection, rpc.CreateTCPConnectionParams{Channel: "ahp-tcp:/v", Host: "127.0.0.1", Port: &port}, needs("tcp.open", "user or owner"))
	v.denied(rpc.MethodTunnelAccept, map[string]any{}, needs("tunnel.listen", "user or owner"))
	v.denied(rpc.MethodFilesList, map[string]any{"path": "/tmp"}, needs("files.read", "user or owner"))
	v.denied(rpc.MethodFilesPut, map[string]any{"path": "/tmp/x"}, needs("files.write", "user or owner"))
	v.denied(rpc.MethodProcessesSignal, map[string]any{"pid": 1, "signal": "SIGTERM"}, needs("processes.signal", "owner"))
	v.denied(rpc.MethodSubscribe, map[string]any{"channel": rpc.LogsChannel}, needs("telemetry.logs", "user or owner"))
	v.denied(rpc.MethodSubscribe, map[string]any{"channel": "ahp-terminal:/o"},
		"permission denied: terminal.attach: ahp-terminal:/o is not shared with vera (viewer)")

	// What a viewer may do.
	v.mustCall(rpc.MethodSubscribe, map[string]any{"channel": rpc.RootChannel})
	v.mustCall(rpc.MethodSubscribe, map[string]any{"channel": rpc.MetricsChannel})
	v.mustCall(rpc.MethodProcessesList, map[string]any{})
	v.mustCall(rpc.MethodTelemetryHistory, map[string]any{})
	// Publishing a forward on the tunnels channel: echoed rejected.
	v.mustCall(rpc.MethodSubscribe, map[string]any{"channel": rpc.TunnelsChannel})
	reason, code := v.rejection(rpc.TunnelsChannel, `{"type":"tunnel/portSet","port":{"id":"x"}}`, 1)
	if want := needs("tunnel.listen", "user or owner"); reason != want || code != rpc.CodePermissionDenied {
		t.Errorf("tunnel/portSet rejected %d %q, want -32009 %q", code, reason, want)
	}
	// The owner's terminal is still there, untouched.
	if srv.TerminalForTest("ahp-terminal:/o") == nil {
		t.Fatal("the owner's terminal is gone")
	}
}

// TestUserOwnTerminals: a user creates, types into, resizes and kills
// their own terminals; another's is neither visible nor killable, and an
// owner reaches every terminal.
func TestUserOwnTerminals(t *testing.T) {
	t.Parallel()
	srv := newServer(t, nil)
	owner := connectID(t, srv, ownerID)
	owner.initialize("o1")
	owner.mustCall(rpc.MethodCreateTerminal, rpc.CreateTerminalParams{Channel: "ahp-terminal:/o", Command: []string{"cat"}})

	u := connectID(t, srv, userID)
	u.initialize("u1")
	const mine = "ahp-terminal:/u"
	u.mustCall(rpc.MethodCreateTerminal, rpc.CreateTerminalParams{Channel: mine, Command: []string{"cat"}})
	u.watch(mine)
	if r := u.act(mine, `{"type":"terminal/input","data":"mine\n"}`, 1); r != "" {
		t.Fatalf("the holder's input rejected: %q", r)
	}
	u.readOutput(mine, "mine")
	if r := u.resize(mine, 100, 30, 2); r != "" {
		t.Fatalf("the holder's resize rejected: %q", r)
	}
	u.denied(rpc.MethodSubscribe, map[string]any{"channel": "ahp-terminal:/o"},
		"permission denied: terminal.attach: ahp-terminal:/o is not shared with ursula (user)")
	u.denied(rpc.MethodDisposeTerminal, rpc.ChannelParams{Channel: "ahp-terminal:/o"},
		"permission denied: terminal.kill: ahp-terminal:/o is held by olga; only its holder or an owner may; ursula is user")
	u.denied(rpc.MethodTerminalShare, rpc.TerminalShareParams{Channel: "ahp-terminal:/o", With: rpc.ShareWith{Principal: "ursula"}, Access: "write"},
		"permission denied: terminal.share: ahp-terminal:/o is held by olga; only its holder or an owner may; ursula is user")
	u.denied(rpc.MethodProcessesSignal, map[string]any{"pid": 1, "signal": "SIGTERM"},
		"permission denied: processes.signal needs role owner; ursula is user")
	// Input to a terminal not shared with them, without a subscription:
	// rejected, and nothing reaches the program.
	owner.watch("ahp-terminal:/o")
	u.send(`{"jsonrpc":"2.0","method":"dispatchAction","params":{"channel":"ahp-terminal:/o","clientSeq":3,"action":{"type":"terminal/input","data":"intruder\n"}}}`)

	// The owner attaches to the user's terminal and kills it.
	owner.watch(mine)
	if r := owner.act(mine, `{"type":"terminal/input","data":"owner\n"}`, 1); r != "" {
		t.Fatalf("an owner's input rejected: %q", r)
	}
	owner.readOutput(mine, "owner")
	u.mustCall(rpc.MethodDisposeTerminal, rpc.ChannelParams{Channel: mine})
	owner.mustCall(rpc.MethodDisposeTerminal, rpc.ChannelParams{Channel: "ahp-terminal:/o"})
	// The intruder's input never reached cat: the owner's terminal
	// echoed nothing of it before it was disposed.
	_, seen := owner.until("terminal/exited of ahp-terminal:/o", func(m *msg) bool {
		typ, _, env := m.action()
		return typ == rpc.ActionTerminalExited && env.Channel == "ahp-terminal:/o"
	})
	if strings.Contains(raws(seen), "intruder") {
		t.Errorf("input of a client the terminal is not shared with reached it: %s", raws(seen))
	}
}

// TestRoleTCPAllow: a role block's tcp_allow narrows tcp.allow for that
// role: a user reaches the one port it lists and is refused -32009 for
// another loopback port, which an owner still reaches.
func TestRoleTCPAllow(t *testing.T) {
	t.Parallel()
	var ports []int
	for range 2 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				c.Close()
			}
		}()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	allowed, other := ports[0], ports[1]
	srv := newServer(t, func(c *config.Config) {
		c.Roles = map[string]config.RoleLimits{"user": {TCPAllow: []string{fmt.Sprintf("127.0.0.1:%d", allowed)}}}
	})
	u := connectID(t, srv, userID)
	u.initialize("u1")
	u.mustCall(rpc.MethodCreateTCPConnection, rpc.CreateTCPConnectionParams{Channel: "ahp-tcp:/a", Host: "127.0.0.1", Port: &allowed})
	u.denied(rpc.MethodCreateTCPConnection, rpc.CreateTCPConnectionParams{Channel: "ahp-tcp:/b", Host: "127.0.0.1", Port: &other},
		fmt.Sprintf("connect to 127.0.0.1:%d not allowed by policy: permission denied: tcp.open for role user is limited to its tcp_allow (127.0.0.1:%d)", other, allowed))
	o := connectID(t, srv, ownerID)
	o.initialize("o1")
	o.mustCall(rpc.MethodCreateTCPConnection, rpc.CreateTCPConnectionParams{Channel: "ahp-tcp:/c", Host: "127.0.0.1", Port: &other})
}

// catalogued waits for the root catalogue to list ch with attachedBy
// equal to want (clientId principal access, space-separated) and
// returns the entry.
func (hc *hostConn) catalogued(ch string, want ...string) rpc.TerminalInfo {
	hc.t.Helper()
	var got rpc.TerminalInfo
	hc.until(fmt.Sprintf("%s attachedBy %q", ch, want), func(m *msg) bool {
		typ, raw, _ := m.action()
		if typ != rpc.ActionRootTerminals {
			return false
		}
		for _, ti := range rootTerminals(hc.t, raw) {
			if ti.Resource != ch {
				continue
			}
			var by []string
			for _, a := range ti.AttachedBy {
				by = append(by, a.ClientID+" "+a.Principal+" "+a.Access)
			}
			if slices.Equal(by, want) {
				got = ti
				return true
			}
		}
		return false
	})
	return got
}

// TestShareLifecycle: a user's terminal is shared read-only with a
// viewer, who attaches and sees output but whose keystrokes and resizes
// are refused -32009; shared read-only with a user, whose input is
// refused until the share is read-write; revoked, the viewer's
// subscription ends and a new one is refused; shared with the viewer
// role, any viewer attaches again. The catalogue lists the shares and
// who is attached with which access.
func TestShareLifecycle(t *testing.T) {
	t.Parallel()
	srv, logs := newLoggingServer(t, hclog.Warn, nil)
	const ch = "ahp-terminal:/shared"
	alice := connectID(t, srv, userID)
	alice.initialize("a1", rpc.RootChannel)
	alice.mustCall(rpc.MethodCreateTerminal, rpc.CreateTerminalParams{Channel: ch, Command: []string{"cat"}})
	alice.watch(ch)

	v := connectID(t, srv, viewerID)
	v.initialize("v1")
	v.denied(rpc.MethodSubscribe, map[string]any{"channel": ch}, "permission denied: terminal.attach: "+ch+" is not shared with vera (viewer)")

	r, _ := alice.mustCall(rpc.MethodTerminalShare, rpc.TerminalShareParams{Channel: ch, With: rpc.ShareWith{Principal: "vera"}, Access: rpc.AccessWrite})
	if got := string(r.Result); got != `{"shares":[{"with":{"principal":"vera"},"access":"write"}]}` {
		t.Errorf("terminal/share result %s", got)
	}
	v.watch(ch)
	info := alice.catalogued(ch, "a1 ursula write", "v1 vera read") // a viewer reads, whatever the share says
	if info.Holder != "ursula" || len(info.Shares) != 1 {
		t.Errorf("catalogue entry %+v: want holder ursula and one share", info)
	}
	if reason, code := v.rejection(ch, `{"type":"terminal/input","data":"evil\n"}`, 1); code != rpc.CodePermissionDenied ||
		reason != "permission denied: terminal.input needs role user or owner; vera is viewer" {
		t.Errorf("a viewer's input: rejection %d %q", code, reason)
	}
	if reason, code := v.rejection(ch, `{"type":"terminal/resized","cols":50,"rows":10}`, 2); code != rpc.CodePermissionDenied ||
		reason != "permission denied: terminal.resize needs role user or owner; vera is viewer" {
		t.Errorf("a viewer's resize: rejection %d %q", code, reason)
	}
	if reason, code := v.rejection(ch, `{"type":"terminal/claimed","claim":{"kind":"client","clientId":"v1"},"takeOver":true}`, 3); code != rpc.CodePermissionDenied ||
		reason != "permission denied: terminal.claim needs role user or owner; vera is viewer" {
		t.Errorf("a viewer's claim: rejection %d %q", code, reason)
	}
	// The viewer sees the holder's output.
	alice.act(ch, `{"type":"terminal/input","data":"visible\n"}`, 21)
	v.readOutput(ch, "visible")

	// A user shared read-only, then read-write.
	bob := connectID(t, srv, bobID)
	bob.initialize("b1")
	alice.mustCall(rpc.MethodTerminalShare, rpc.TerminalShareParams{Channel: ch, With: rpc.ShareWith{Principal: "bob"}, Access: rpc.AccessRead})
	bob.watch(ch)
	if reason, code := bob.rejection(ch, `{"type":"terminal/input","data":"nope\n"}`, 11); code != rpc.CodePermissionDenied ||
		reason != "permission denied: terminal.input: "+ch+" is shared with bob read-only" {
		t.Errorf("a read-only user's input: rejection %d %q", code, reason)
	}
	bob.denied(rpc.MethodDisposeTerminal, rpc.ChannelParams{Channel: ch},
		"permission denied: terminal.kill: "+ch+" is held by ursula; only its holder or an owner may; bob is user")
	alice.mustCall(rpc.MethodTerminalShare, rpc.TerminalShareParams{Channel: ch, With: rpc.ShareWith{Principal: "bob"}, Access: rpc.AccessWrite})
	alice.catalogued(ch, "a1 ursula write", "b1 bob write", "v1 vera read")
	if reason := bob.act(ch, `{"type":"terminal/input","data":"from bob\n"}`, 12); reason != "" {
		t.Fatalf("a read-write user's input rejected: %q", reason)
	}
	alice.readOutput(ch, "from bob")

	// Revoked: the viewer's subscription ends, and a new one is refused.
	r, _ = alice.mustCall(rpc.MethodTerminalUnshare, rpc.TerminalUnshareParams{Channel: ch, With: rpc.ShareWith{Principal: "vera"}})
	if got := string(r.Result); got != `{"shares":[{"with":{"principal":"bob"},"access":"write"}]}` {
		t.Errorf("terminal/unshare result %s", got)
	}
	alice.catalogued(ch, "a1 ursula write", "b1 bob write")
	v.denied(rpc.MethodSubscribe, map[string]any{"channel": ch}, "permission denied: terminal.attach: "+ch+" is not shared with vera (viewer)")
	alice.callErr(rpc.MethodTerminalUnshare, rpc.TerminalUnshareParams{Channel: ch, With: rpc.ShareWith{Principal: "vera"}}, rpc.CodeNotFound)

	// Shared with the viewer role: every viewer may attach.
	alice.mustCall(rpc.MethodTerminalShare, rpc.TerminalShareParams{Channel: ch, With: rpc.ShareWith{Role: "viewer"}, Access: rpc.AccessRead})
	v.watch(ch)
	alice.catalogued(ch, "a1 ursula write", "b1 bob write", "v1 vera read")

	// Bad params.
	alice.callErr(rpc.MethodTerminalShare, rpc.TerminalShareParams{Channel: ch, With: rpc.ShareWith{Principal: "x", Role: "user"}, Access: "read"}, rpc.CodeInvalidParams)
	alice.callErr(rpc.MethodTerminalShare, rpc.TerminalShareParams{Channel: ch, With: rpc.ShareWith{Role: "admin"}, Access: "read"}, rpc.CodeInvalidParams)
	alice.callErr(rpc.MethodTerminalShare, rpc.TerminalShareParams{Channel: ch, With: rpc.ShareWith{Principal: "x"}, Access: "all"}, rpc.CodeInvalidParams)
	alice.callErr(rpc.MethodTerminalShare, rpc.TerminalShareParams{Channel: "ahp-terminal:/none", With: rpc.ShareWith{Principal: "x"}, Access: "read"}, rpc.CodeNotFound)

	// Each refusal was logged once per identity and permission.
	for _, want := range []string{"principal=vera role=viewer method=tokens_file permission=terminal.input", "principal=bob role=user method=tokens_file permission=terminal.input"} {
		if n := strings.Count(logs.String(), want); n != 1 {
			t.Errorf("%q logged %d times, want once:\n%s", want, n, logs.String())
		}
	}
}

// TestShareLimit: a terminal holds at most rpc.MaxShares shares; one
// more is refused -32009, and replacing an existing share's access is
// not a new one.
func TestShareLimit(t *testing.T) {
	t.Parallel()
	srv := newServer(t, nil)
	const ch = "ahp-terminal:/many"
	o := connectID(t, srv, ownerID)
	o.initialize("o1")
	o.mustCall(rpc.MethodCreateTerminal, rpc.CreateTerminalParams{Channel: ch, Command: []string{"cat"}})
	for i := range rpc.MaxShares {
		o.mustCall(rpc.MethodTerminalShare, rpc.TerminalShareParams{Channel: ch, With: rpc.ShareWith{Principal: fmt.Sprint("p", i)}, Access: rpc.AccessRead})
	}
	o.mustCall(rpc.MethodTerminalShare, rpc.TerminalShareParams{Channel: ch, With: rpc.ShareWith{Principal: "p0"}, Access: rpc.AccessWrite})
	e := o.callErr(rpc.MethodTerminalShare, rpc.TerminalShareParams{Channel: ch, With: rpc.ShareWith{Principal: "one-more"}, Access: rpc.AccessRead}, rpc.CodePermissionDenied)
	if want := fmt.Sprintf("terminal share limit reached: %s has %d shares (at most %d); revoke one first", ch, rpc.MaxShares, rpc.MaxShares); e.Message != want {
		t.Errorf("refusal %q, want %q", e.Message, want)
	}
	var shares []rpc.TerminalShare
	b, _ := json.Marshal(srv.TerminalForTest(ch).Shares())
	_ = json.Unmarshal(b, &shares)
	if len(shares) != rpc.MaxShares || shares[0].Access != rpc.AccessWrite {
		t.Errorf("%d shares, the first %+v", len(shares), shares[0])
	}
}

// rootUntil reads until a root/terminalsChanged for which pred (the
// terminals' resources and the action's serverSeq) holds, and returns
// them with every message read on the way, the match included.
func (hc *hostConn) rootUntil(what string, pred func(res []string, seq uint64) bool) (res []string, seq uint64, read string) {
	hc.t.Helper()
	m, seen := hc.until(what, func(m *msg) bool {
		typ, raw, env := m.action()
		return typ == rpc.ActionRootTerminals && pred(resources(rootTerminals(hc.t, raw)), env.ServerSeq)
	})
	_, raw, env := m.action()
	return resources(rootTerminals(hc.t, raw)), env.ServerSeq, raws(append(seen, m))
}

// listed waits for the catalogue to list ch and returns it.
func (hc *hostConn) listed(ch string) (res []string, seq uint64, read string) {
	hc.t.Helper()
	return hc.rootUntil("root/terminalsChanged with "+ch, func(res []string, _ uint64) bool { return slices.Contains(res, ch) })
}

// TestCatalogueView: the root catalogue lists to a non-owner only the
// terminals they hold and those shared with them or their role, wherever
// it is sent: the initialize snapshot, each root/terminalsChanged on an
// ordinary and on a windowed subscription (whose snapshot too),
// channel/page and a reconnect's replay. An owner sees every terminal.
func TestCatalogueView(t *testing.T) {
	t.Parallel()
	srv := newServer(t, nil)
	const secret, mine = "ahp-terminal:/secret", "ahp-terminal:/mine"
	owner := connectID(t, srv, ownerID)
	owner.initialize("o1", rpc.RootChannel)
	owner.mustCall(rpc.MethodCreateTerminal, rpc.CreateTerminalParams{Channel: secret, Command: []string{"cat"}})
	owner.listed(secret)

	u := connectID(t, srv, userID)
	init := u.initialize("u1", rpc.RootChannel)
	if len(init.Snapshots) != 1 || !strings.Contains(string(init.Snapshots[0].State), `"terminals":[]`) {
		t.Fatalf("a user's initialize snapshot %+v, want no terminals", init.Snapshots)
	}
	u.mustCall(rpc.MethodCreateTerminal, rpc.CreateTerminalParams{Channel: mine, Command: []string{"cat"}})
	got, _, read := u.listed(mine)
	if !slices.Equal(got, []string{mine}) || strings.Contains(read, secret) {
		t.Errorf("the user's catalogue %v (read %s), want only %s", got, read, mine)
	}
	if got, _, _ := owner.listed(mine); !slices.Equal(got, []string{mine, secret}) {
		t.Errorf("the owner's catalogue %v, want both", got)
	}

	// A viewer, windowed: its snapshot lists nothing, then the user's
	// terminal once it is shared with the viewer role.
	v := connectID(t, srv, viewerID)
	v.initialize("v1")
	v.mustCall(rpc.MethodSubscribe, windowed(rpc.RootChannel, 64<<10, 16<<10))
	snap, _ := v.until("the root's snapshot", func(m *msg) bool { return m.Method == rpc.MethodChannelSnapshot })
	if !strings.Contains(snap.Raw, `"terminals":[]`) {
		t.Fatalf("a viewer's windowed snapshot %s, want no terminals", snap.Raw)
	}
	u.mustCall(rpc.MethodTerminalShare, rpc.TerminalShareParams{Channel: mine, With: rpc.ShareWith{Role: "viewer"}, Access: rpc.AccessRead})
	if got, _, read := v.listed(mine); !slices.Equal(got, []string{mine}) || strings.Contains(read, secret) {
		t.Errorf("the viewer's catalogue %v (read %s), want only %s", got, read, mine)
	}

	// The owner's next terminal changes the catalogue: each of the others
	// is sent that action with their own terminal only.
	owner.mustCall(rpc.MethodCreateTerminal, rpc.CreateTerminalParams{Channel: secret + "2", Command: []string{"cat"}})
	_, at, _ := owner.listed(secret + "2")
	for _, c := range []*hostConn{u, v} {
		got, _, read := c.rootUntil("the action that listed "+secret+"2", func(_ []string, seq uint64) bool { return seq >= at })
		if !slices.Equal(got, []string{mine}) || strings.Contains(read, secret) {
			t.Errorf("catalogue %v (read %s), want only %s", got, read, mine)
		}
	}

	// channel/page and a reconnect's replay: the same view.
	page := u.page(rpc.RootChannel, init.ServerSeq, 0)
	if len(page.Actions) < 3 {
		t.Fatalf("channel/page gave %d actions, want the root's since initialize", len(page.Actions))
	}
	for _, a := range page.Actions {
		if strings.Contains(string(a), secret) {
			t.Errorf("channel/page gave the user %s", a)
		}
	}
	u.cut()
	u2 := connectID(t, srv, userID)
	m, res := u2.reconnect(rpc.ReconnectParams{Channel: rpc.RootChannel, ClientID: "u1", ResumeToken: init.Resume.Token,
		LastSeenServerSeq: init.ServerSeq, Subscriptions: []string{rpc.RootChannel}})
	if m.Error != nil || res.Type != rpc.ReconnectReplay || res.Actions == nil || len(*res.Actions) < 3 {
		t.Fatalf("reconnect: %s", m.Raw)
	}
	if strings.Contains(m.Raw, secret) || !strings.Contains(m.Raw, mine) {
		t.Errorf("the user's replay %s: want %s and nothing of %s", m.Raw, mine, secret)
	}
}

// TestRejectionToSenderOnly: the echo of an action the host rejects goes
// to the client that dispatched it, nowhere else: a read-only viewer's
// keystrokes, forged terminal output (terminal/data, host-only) and a
// forged catalogue (root/terminalsChanged) never reach the terminal's
// holder, on its windowed terminal subscription, its ordinary root
// subscription or in channel/page, while the viewer gets each rejection.
func TestRejectionToSenderOnly(t *testing.T) {
	t.Parallel()
	srv := newServer(t, nil)
	const ch = "ahp-terminal:/o"
	owner := connectID(t, srv, ownerID)
	init := owner.initialize("o1", rpc.RootChannel)
	owner.mustCall(rpc.MethodCreateTerminal, rpc.CreateTerminalParams{Channel: ch, Command: []string{"cat"}})
	owner.watch(ch)
	owner.mustCall(rpc.MethodTerminalShare, rpc.TerminalShareParams{Channel: ch, With: rpc.ShareWith{Role: "viewer"}, Access: rpc.AccessRead})

	v := connectID(t, srv, viewerID)
	v.initialize("v1", rpc.RootChannel)
	v.watch(ch)
	for i, a := range []struct{ ch, action, reason string }{
		{ch, `{"type":"terminal/input","data":"typed-secret\n"}`, "permission denied: terminal.input needs role user or owner; vera is viewer"},
		{ch, `{"type":"terminal/data","data":"INJECTED-OUTPUT"}`, "terminal/data is a host-only action"},
		{rpc.RootChannel, `{"type":"root/terminalsChanged","terminals":[{"resource":"ahp-terminal:/o","title":"FORGED-TITLE"}]}`, "root actions are not client-dispatchable on this host"},
	} {
		if reason, _ := v.rejection(a.ch, a.action, uint64(i+1)); reason != a.reason {
			t.Errorf("%s: rejected %q, want %q", a.action, reason, a.reason)
		}
	}
	// The owner types after them: everything up to its own output was
	// sent before it, and none of it is the viewer's.
	owner.act(ch, `{"type":"terminal/input","data":"mine\n"}`, 1)
	_, seen := owner.until("the owner's output", func(m *msg) bool {
		_, d, ok := termData(m)
		return ok && strings.Contains(d, "mine")
	})
	page := owner.page(ch, 0, 0)
	rootPage := owner.page(rpc.RootChannel, init.ServerSeq, 0)
	all := raws(seen) + fmt.Sprintf("%s %s", page.Actions, rootPage.Actions)
	for _, s := range []string{"typed-secret", "INJECTED-OUTPUT", "FORGED-TITLE", "rejectionReason"} {
		if strings.Contains(all, s) {
			t.Errorf("the holder was sent %q:\n%s", s, all)
		}
	}
	// The viewer's own page of the terminal has its rejections.
	if vp := v.page(ch, 0, 0); !strings.Contains(fmt.Sprintf("%s", vp.Actions), "INJECTED-OUTPUT") {
		t.Errorf("the viewer's channel/page lacks its own rejection: %s", vp.Actions)
	}
}
