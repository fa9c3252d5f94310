package tests

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"regexp"
	"testing"
	"time"
)

// lsForwards runs `sidecar ls --json` against s and returns the entries
// of its "tunnels".
func lsForwards(t *testing.T, s *server, args ...string) []tunnelPort {
	t.Helper()
	if len(args) == 0 {
		args = append([]string{s.url}, s.connArgs()...)
	}
	out, errOut, code := s.run(t, append([]string{"ls", "--json"}, args...)...)
	if code != 0 {
		t.Fatalf("ls --json exited %d; stderr:\n%s", code, errOut)
	}
	var got struct {
		Tunnels *struct {
			Ports []tunnelPort `json:"ports"`
		} `json:"tunnels"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil || got.Tunnels == nil || got.Tunnels.Ports == nil {
		t.Fatalf("ls --json has no tunnels.ports (%v):\n%s", err, out)
	}
	return got.Tunnels.Ports
}

// awaitTunnelStatus reads rc's tunnels channel (subscribed) until the
// host has set clientID's participant (any client's with "") of each of
// n entries to status.
func awaitTunnelStatus(t *testing.T, rc *rawConn, clientID, status string, n int) {
	t.Helper()
	seen := map[string]bool{}
	for len(seen) < n {
		m := rc.waitNotification(fmt.Sprintf("%d entries %s", n, status), func(m message) bool { return m.Method == "action" && m.channelOf() == "ahp-tunnels://" })
		var e struct {
			Action struct {
				Type     string `json:"type"`
				Resource string `json:"resource"`
				ClientID string `json:"clientId"`
				State    *struct {
					Status string `json:"status"`
				} `json:"state"`
			} `json:"action"`
		}
		_ = json.Unmarshal(m.Params, &e)
		if a := e.Action; a.Type == "tunnel/portClientUpdated" && (clientID == "" || a.ClientID == clientID) && a.State != nil && a.State.Status == status {
			seen[a.Resource] = true
		}
	}
}

// TestLsListsForwards (issue 29): `sidecar ls` lists every forward of the
// tunnels channel, a -R and a -L of another client, with who asked, where
// each listens and leads, and its lifecycle: ready; unavailable, with the
// reason, while that client's link is lost; ready again once it is back.
// --json has them as the channel's TunnelsState. Through --via, ls lists
// the forwards of the host its command runs (here none: a fresh one).
func TestLsListsForwards(t *testing.T) {
	t.Parallel()
	echo := tcpListen(t, func(c *net.TCPConn) { _, _ = io.Copy(c, c) })
	s := startServer(t, "")
	relay, url := relayed(t, s)
	rc := s.dialRaw(t)
	defer rc.close()
	rc.initialize("ls-watch")
	rc.mustCall("subscribe", map[string]any{"channel": "ahp-tunnels://"})
	fw, addrs := reverseStart(t, &server{p: s.p, url: url, host: relay.Addr(), token: s.token, hash: s.hash},
		fmt.Sprintf("-R 0:127.0.0.1:%d", echo), fmt.Sprintf("-L 127.0.0.1:0:127.0.0.1:%d", echo))
	lm := tcpForwardLine.FindStringSubmatch(fw.p.stderr.String())
	if lm == nil {
		t.Fatalf("no -L line; stderr:\n%s", fw.p.stderr.String())
	}
	target := fmt.Sprintf("127.0.0.1:%d", echo)

	ports := lsForwards(t, s)
	if len(ports) != 2 {
		t.Fatalf("ls --json lists %d forwards, want 2: %+v", len(ports), ports)
	}
	id := ports[0].RequestedBy.ClientID
	for _, p := range ports {
		if p.RequestedBy.ClientID != id || id == "" {
			t.Errorf("%s requested by %q, want both by the forward's client", p.Resource, p.RequestedBy.ClientID)
		}
		switch p.Direction {
		case "clientToHost":
			if p.Client == nil || p.Client.ClientID != id || p.Client.State.Status != "ready" || p.Client.State.LocalAddress == nil ||
				fmt.Sprintf("%s:%d", p.Client.State.LocalAddress.Host, p.Client.State.LocalAddress.Port) != addrs[0] {
				t.Errorf("-R entry: %+v, want %s ready at %s", p, id, addrs[0])
			}
		case "hostToClient":
			if len(p.Clients) != 1 || p.Clients[0].ClientID != id || p.Clients[0].State.Status != "ready" {
				t.Errorf("-L entry: %+v, want %s ready", p, id)
			}
		default:
			t.Errorf("entry %s has direction %q", p.Resource, p.Direction)
		}
	}
	// rowRe matches a forward's row whose STATE matches status, a regexp.
	rowRe := func(dir, listen, status string) *regexp.Regexp {
		return regexp.MustCompile(`(?m)^\S+ +` + dir + ` +` + regexp.QuoteMeta(id) + ` +` + regexp.QuoteMeta(id) + ` +` +
			regexp.QuoteMeta(listen) + ` +` + regexp.QuoteMeta(target) + ` +` + status + `$`)
	}
	row := func(dir, listen, status string) *regexp.Regexp { return rowRe(dir, listen, regexp.QuoteMeta(status)) }
	ls := func() string {
		out, errOut, code := s.run(t, append([]string{"ls", s.url}, s.connArgs()...)...)
		if code != 0 {
			t.Fatalf("ls exited %d; stderr:\n%s", code, errOut)
		}
		return out
	}
	out := ls()
	if !regexp.MustCompile(`(?m)^FORWARD +DIRECTION +BY +CLIENT +LISTEN +TO +STATE$`).MatchString(out) || !row("-R", addrs[0], "ready").MatchString(out) || !row("-L", lm[1], "ready").MatchString(out) {
		t.Errorf("ls does not list both forwards ready:\n%s", out)
	}

	// The link lost: both read unavailable, with the reason.
	relay.Refuse(true)
	relay.Cut()
	awaitTunnelStatus(t, rc, id, "unavailable", 2)
	out = ls()
	// Each says until when (the grace's end, in UTC) and why.
	until := ` \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC \(journal\.reconnect_grace 2h0m0s\)`
	lost := regexp.QuoteMeta("unavailable (the client's connection was lost; its forwards resume if it reconnects by") + until + `\)`
	waits := regexp.QuoteMeta("unavailable (the client's connection was lost; still listening on "+addrs[0]+" until") + until +
		regexp.QuoteMeta(", connections wait for it (at most 32, each 30s: tunnels.max_waiting, tunnels.wait_timeout); a new client of the same token may take it over)")
	if !rowRe("-R", "127.0.0.1:0", waits).MatchString(out) || !rowRe("-L", lm[1], lost).MatchString(out) {
		t.Errorf("ls does not list the -R %s and the -L %s:\n%s", waits, lost, out)
	}
	// Back: ready again, and forwarding.
	relay.Refuse(false)
	awaitTunnelStatus(t, rc, id, "ready", 2)
	out = ls()
	if !row("-R", addrs[0], "ready").MatchString(out) || !row("-L", lm[1], "ready").MatchString(out) {
		t.Errorf("ls does not list both forwards ready after the reconnect:\n%s", out)
	}
	if err := echoRoundTrip(tcpDial(t, addrs[0]), "after ls"); err != nil {
		t.Fatal(err)
	}

	// Through --via: its host's (empty) tunnels channel.
	if ports := lsForwards(t, s, "--via", sidecarBin+" stdio"); len(ports) != 0 {
		t.Errorf("ls --via lists %d forwards of a fresh host: %+v", len(ports), ports)
	}
}

// until calls cond every 20 ms until it holds, failing the test after
// waitTimeout: for what no event tells (a count on the host, a kernel
// queue).
func until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, waitTimeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
