package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sidecar-dev/sidecar/transport"
)

// The tokens of the identities of the roles tests: an owner, two users
// and a viewer (and the single --token, the owner "token").
const (
	olgaTok = "olga-secret-roles"
	ullaTok = "ulla-secret-roles"
	bobTok  = "bob-secret-roles"
	veraTok = "vera-secret-roles"
)

func rolesTokens() string {
	return tokenEntry("olga", "owner", olgaTok) + tokenEntry("ulla", "user", ullaTok) +
		tokenEntry("bob", "user", bobTok) + tokenEntry("vera", "viewer", veraTok)
}

// startServerRoles starts sidecar serve with the roles tokens file and
// extra configuration.
func startServerRoles(t *testing.T, extra string) *server {
	t.Helper()
	path := filepath.Join(t.TempDir(), "tokens.hcl")
	if err := os.WriteFile(path, []byte(rolesTokens()), 0o600); err != nil {
		t.Fatal(err)
	}
	return startServer(t, "auth {\n  tokens_file = "+strconv.Quote(path)+"\n}\n"+extra)
}

// mcClient is a raw JSON-RPC client over any transport.MessageConn: plain
// /ahp, transport-io on its WebSocket mapping, or WebTransport. A
// goroutine reads every message into a channel.
type mcClient struct {
	t      *testing.T
	name   string
	id     string // the clientId
	mc     transport.MessageConn
	msgs   chan []byte
	nextID int
	seq    int
	// kept holds notifications read while waiting for a response.
	kept []message
}

// dialMC opens a client as tok over tr ("ahp", "tio", "wt") and
// initializes it as clientID.
func (s *server) dialMC(t *testing.T, tr, tok, clientID string) *mcClient {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	hdr := http.Header{"Authorization": {"Bearer " + tok}}
	var mc transport.MessageConn
	var err error
	switch tr {
	case "ahp":
		mc, err = transport.DialWebSocket(ctx, s.url, hdr, s.httpClient(t), 64<<20, false)
	case "tio":
		mc, err = transport.DialTIOWebSocket(ctx, "wss://"+s.host+transport.TIOPath, hdr, s.httpClient(t), false)
	case "wt":
		mc, err = transport.DialWebTransport(ctx, "https://"+s.host+transport.TIOPath, hdr, s.tlsConfig())
	default:
		t.Fatalf("unknown transport %q", tr)
	}
	if err != nil {
		t.Fatalf("dial %s as %s: %v", tr, clientID, err)
	}
	c := &mcClient{t: t, name: tr + "/" + clientID, id: clientID, mc: mc, msgs: make(chan []byte, 1024)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(c.msgs)
		for {
			raw, err := mc.ReadMessage(context.Background())
			if err != nil {
				return
			}
			c.msgs <- bytes.Clone(raw)
		}
	}()
	t.Cleanup(func() {
		_ = mc.Close(transport.CloseNormal, "")
		for range c.msgs {
		}
		<-done
	})
	c.mustCall("initialize", map[string]any{"channel": "ahp-root://", "protocolVersions": []string{"0.5.0"}, "clientId": clientID})
	return c
}

func (c *mcClient) send(v any) {
	c.t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		c.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := c.mc.WriteMessage(ctx, b); err != nil {
		c.t.Fatalf("%s: write: %v", c.name, err)
	}
}

// read returns the next message within the deadline.
func (c *mcClient) read(deadline time.Time, what string) message {
	c.t.Helper()
	select {
	case raw, ok := <-c.msgs:
		if !ok {
			c.t.Fatalf("%s: connection ended waiting for %s", c.name, what)
		}
		return decode(c.t, raw)
	case <-time.After(time.Until(deadline)):
		c.t.Fatalf("%s: %s not received within %v", c.name, what, waitTimeout)
	}
	return message{}
}

func (c *mcClient) call(method string, params any) message {
	c.t.Helper()
	c.nextID++
	id := strconv.Itoa(c.nextID)
	c.send(map[string]any{"jsonrpc": "2.0", "id": c.nextID, "method": method, "params": params})
	deadline := time.Now().Add(waitTimeout)
	for {
		m := c.read(deadline, "the response to "+method)
		if m.Method == "" && string(m.ID) == id {
			return m
		}
		if m.Method != "" {
			c.kept = append(c.kept, m)
		}
	}
}

func (c *mcClient) mustCall(method string, params any) message {
	c.t.Helper()
	m := c.call(method, params)
	if m.Error != nil {
		c.t.Fatalf("%s: %s: error %d %s", c.name, method, m.Error.Code, m.Error.Message)
	}
	return m
}

// denied asserts that the request is refused -32009 with exactly want.
func (c *mcClient) denied(method string, params any, want string) {
	c.t.Helper()
	m := c.call(method, params)
	if m.Error == nil || m.Error.Code != -32009 || m.Error.Message != want {
		c.t.Errorf("%s: %s %v: got %s\nwant -32009 %q", c.name, method, params, m.raw, want)
	}
}

// next returns the next notification (those kept first).
func (c *mcClient) next(deadline time.Time, what string) message {
	c.t.Helper()
	if len(c.kept) > 0 {
		m := c.kept[0]
		c.kept = c.kept[1:]
		return m
	}
	for {
		if m := c.read(deadline, what); m.Method != "" {
			return m
		}
	}
}

type actionParams struct {
	Channel string `json:"channel"`
	Action  struct {
		Type string `json:"type"`
		Data string `json:"data"`
	} `json:"action"`
	Origin *struct {
		ClientID  string `json:"clientId"`
		ClientSeq int    `json:"clientSeq"`
	} `json:"origin"`
	RejectionReason string `json:"rejectionReason"`
	RejectionCode   int    `json:"rejectionCode"`
}

// dispatch sends action on ch and returns its echo's rejection (reason,
// code; "", 0 when it was applied).
func (c *mcClient) dispatch(ch string, action map[string]any) (string, int) {
	c.t.Helper()
	c.seq++
	seq := c.seq
	c.send(map[string]any{"jsonrpc": "2.0", "method": "dispatchAction", "params": map[string]any{"channel": ch, "clientSeq": seq, "action": action}})
	deadline := time.Now().Add(waitTimeout)
	for {
		m := c.next(deadline, fmt.Sprintf("the echo of %v", action))
		if m.Method != "action" {
			continue
		}
		var p actionParams
		_ = json.Unmarshal(m.Params, &p)
		if p.Channel == ch && p.Origin != nil && p.Origin.ClientID == c.id && p.Origin.ClientSeq == seq {
			return p.RejectionReason, p.RejectionCode
		}
	}
}

// waitOutput waits until the terminal ch has printed want.
func (c *mcClient) waitOutput(ch, want string) {
	c.t.Helper()
	var out strings.Builder
	deadline := time.Now().Add(waitTimeout)
	for !strings.Contains(out.String(), want) {
		m := c.next(deadline, fmt.Sprintf("%q on %s (got %q)", want, ch, out.String()))
		var p actionParams
		if m.Method == "action" && json.Unmarshal(m.Params, &p) == nil && p.Channel == ch && p.Action.Type == "terminal/data" {
			out.WriteString(p.Action.Data)
		}
	}
}

// echoListener accepts connections on loopback and echoes what they send;
// it returns the port.
func echoListener(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 4096)
				for {
					n, err := c.Read(buf)
					if n > 0 {
						if _, err := c.Write(buf[:n]); err != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port
}

func termCh(name string) map[string]any { return map[string]any{"channel": "ahp-terminal:/" + name} }

func inputAction(data string) map[string]any {
	return map[string]any{"type": "terminal/input", "data": data}
}

func resizeAction(cols, rows int) map[string]any {
	return map[string]any{"type": "terminal/resized", "cols": cols, "rows": rows}
}

// TestRolesThroughBinary (issue 32): through the real daemon with a
// tokens file (owner olga, users ulla and bob, viewer vera) and the
// single token, over plain /ahp, transport-io on its WebSocket mapping
// and WebTransport: each role's allowed and refused operations (create,
// attach, input, resize, kill their own and others' terminals, share,
// forward within tcp.allow and the user role's tcp_allow, the listing,
// metrics, the daemon's log, processes/signal), each refusal -32009 with
// the exact message naming the permission.
func TestRolesThroughBinary(t *testing.T) {
	t.Parallel()
	allowed, other := echoListener(t), echoListener(t)
	s := startServerRoles(t, fmt.Sprintf("tcp {\n  allow = [\"127.0.0.1/32\"]\n}\nrole \"user\" {\n  tcp_allow = [\"127.0.0.1:%d\"]\n}\n", allowed))
	// A process of the terminals' user for processes/signal.
	sleeper := exec.Command("sleep", "300")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	sleeperDone := make(chan error, 1)
	go func() { sleeperDone <- sleeper.Wait() }()
	t.Cleanup(func() { _ = sleeper.Process.Kill(); <-sleeperDone })

	for _, tr := range []string{"ahp", "tio", "wt"} {
		t.Run(tr, func(t *testing.T) {
			olga := s.dialMC(t, tr, olgaTok, "olga-"+tr)
			ulla := s.dialMC(t, tr, ullaTok, "ulla-"+tr)
			bob := s.dialMC(t, tr, bobTok, "bob-"+tr)
			vera := s.dialMC(t, tr, veraTok, "vera-"+tr)
			tok := s.dialMC(t, tr, s.token, "token-"+tr)
			ot, ut := "olga-"+tr, "ulla-"+tr
			otURI, utURI := "ahp-terminal:/"+ot, "ahp-terminal:/"+ut
			create := func(name string) map[string]any {
				return map[string]any{"channel": "ahp-terminal:/" + name, "command": []string{"cat"}}
			}

			// create: owners and users; a viewer may not.
			olga.mustCall("createTerminal", create(ot))
			ulla.mustCall("createTerminal", create(ut))
			tok.mustCall("createTerminal", create("token-"+tr))
			vera.denied("createTerminal", create("vera-"+tr), "permission denied: terminal.create needs role user or owner; vera is viewer")

			// attach: the holder and an owner; not another user, nor a
			// viewer it is not shared with.
			olga.mustCall("subscribe", termCh(ot))
			olga.mustCall("subscribe", termCh(ut)) // an owner sees every terminal
			ulla.mustCall("subscribe", termCh(ut))
			bob.denied("subscribe", termCh(ut), "permission denied: terminal.attach: "+utURI+" is not shared with bob (user)")
			vera.denied("subscribe", termCh(ot), "permission denied: terminal.attach: "+otURI+" is not shared with vera (viewer)")

			// input and resize: the holder's and an owner's input reach cat.
			if r, _ := ulla.dispatch(utURI, inputAction("from-ulla\r")); r != "" {
				t.Fatalf("ulla's input into her terminal rejected: %s", r)
			}
			ulla.waitOutput(utURI, "from-ulla")
			if r, _ := olga.dispatch(utURI, inputAction("from-olga\r")); r != "" {
				t.Fatalf("olga's input into ulla's terminal rejected: %s", r)
			}
			ulla.waitOutput(utURI, "from-olga")
			if r, _ := ulla.dispatch(utURI, resizeAction(100, 30)); r != "" {
				t.Fatalf("ulla's resize rejected: %s", r)
			}

			// share: only the holder or an owner; read-only lets one watch,
			// not type or resize.
			shareWith := func(name, access string) map[string]any {
				return map[string]any{"channel": utURI, "with": map[string]any{"principal": name}, "access": access}
			}
			bob.denied("terminal/share", shareWith("bob", "write"), "permission denied: terminal.share: "+utURI+" is held by ulla; only its holder or an owner may; bob is user")
			vera.denied("terminal/share", shareWith("vera", "read"), "permission denied: terminal.share needs role user or owner; vera is viewer")
			ulla.mustCall("terminal/share", shareWith("bob", "read"))
			olga.mustCall("terminal/share", shareWith("vera", "write")) // a viewer reads, whatever the share says
			bob.mustCall("subscribe", termCh(ut))
			vera.mustCall("subscribe", termCh(ut))
			for _, c := range []struct {
				who    *mcClient
				action map[string]any
				want   string
			}{
				{bob, inputAction("from-bob\r"), "permission denied: terminal.input: " + utURI + " is shared with bob read-only"},
				{bob, resizeAction(90, 20), "permission denied: terminal.resize: " + utURI + " is shared with bob read-only"},
				{vera, inputAction("from-vera\r"), "permission denied: terminal.input needs role user or owner; vera is viewer"},
				{vera, resizeAction(90, 20), "permission denied: terminal.resize needs role user or owner; vera is viewer"},
			} {
				if r, code := c.who.dispatch(utURI, c.action); code != -32009 || r != c.want {
					t.Errorf("%s: %v rejected %d %q, want -32009 %q", c.who.name, c.action["type"], code, r, c.want)
				}
			}
			// Shared read-write, bob types into ulla's shell.
			ulla.mustCall("terminal/share", shareWith("bob", "write"))
			if r, _ := bob.dispatch(utURI, inputAction("from-bob\r")); r != "" {
				t.Fatalf("bob's input after a read-write share rejected: %s", r)
			}
			bob.waitOutput(utURI, "from-bob")

			// kill: a user her own, not another's; an owner any; a viewer none.
			bob.denied("disposeTerminal", termCh(ut), "permission denied: terminal.kill: "+utURI+" is held by ulla; only its holder or an owner may; bob is user")
			ulla.denied("disposeTerminal", termCh(ot), "permission denied: terminal.kill: "+otURI+" is held by olga; only its holder or an owner may; ulla is user")
			vera.denied("disposeTerminal", termCh(ut), "permission denied: terminal.kill needs role user or owner; vera is viewer")
			ulla.mustCall("disposeTerminal", termCh(ut))
			olga.mustCall("disposeTerminal", termCh("token-"+tr)) // an owner kills another's
			olga.mustCall("disposeTerminal", termCh(ot))

			// forward -L (createTcpConnection): within tcp.allow, and for a
			// user within the role's tcp_allow too; never for a viewer.
			tcp := func(c *mcClient, port int) map[string]any {
				return map[string]any{"channel": fmt.Sprintf("ahp-tcp:/%s-%d", c.id, port), "host": "127.0.0.1", "port": port}
			}
			ulla.mustCall("createTcpConnection", tcp(ulla, allowed))
			olga.mustCall("createTcpConnection", tcp(olga, other))
			ulla.denied("createTcpConnection", tcp(ulla, other), fmt.Sprintf("connect to 127.0.0.1:%d not allowed by policy: permission denied: tcp.open for role user is limited to its tcp_allow (127.0.0.1:%d)", other, allowed))
			vera.denied("createTcpConnection", tcp(vera, allowed), "permission denied: tcp.open needs role user or owner; vera is viewer")

			// The listing and the machine: every role; the daemon's log: not
			// a viewer; processes/signal: an owner only.
			for _, c := range []*mcClient{olga, ulla, vera} {
				c.mustCall("subscribe", map[string]any{"channel": "ahp-otlp://metrics"})
				c.mustCall("processes/list", map[string]any{})
			}
			ulla.mustCall("subscribe", map[string]any{"channel": "ahp-otlp://logs"})
			vera.denied("subscribe", map[string]any{"channel": "ahp-otlp://logs"}, "permission denied: telemetry.logs needs role user or owner; vera is viewer")
			sig := map[string]any{"pid": sleeper.Process.Pid, "signal": "SIGCONT"}
			ulla.denied("processes/signal", sig, "permission denied: processes.signal needs role owner; ulla is user")
			vera.denied("processes/signal", sig, "permission denied: processes.signal needs role owner; vera is viewer")
			olga.mustCall("processes/signal", sig)
		})
	}
}
