package host_test

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/sidecar-dev/sidecar/config"
	"github.com/sidecar-dev/sidecar/host"
	"github.com/sidecar-dev/sidecar/rpc"
	"github.com/sidecar-dev/sidecar/transport"
)

// TestConnectionBounds (issue 27 item 11): the listener block's bounds,
// each met exactly: a principal's connections not initialized yet
// (max_uninitialized), a principal's connections (max_connections_per_
// principal: another principal still has room), and the host's
// (max_connections). The one past a bound is closed at once with 1013
// naming it; the others are unaffected, and a slot frees when its
// connection initializes or ends.
func TestConnectionBounds(t *testing.T) {
	srv := newServer(t, func(c *config.Config) {
		c.Listener.MaxConnections, c.Listener.MaxConnectionsPerPrincipal, c.Listener.MaxUninitialized = 6, 4, 2
	})
	refused := func(principal, want string) {
		t.Helper()
		a, b := transport.Pipe(4)
		if err := srv.ServeConnAs(context.Background(), b, principal); !errors.Is(err, host.ErrTooManyConnections) {
			t.Fatalf("%s: ServeConnAs = %v, want ErrTooManyConnections", principal, err)
		}
		_, rerr := a.ReadMessage(context.Background())
		if code, reason := transport.CloseStatus(rerr), transport.CloseReason(rerr); code != transport.CloseTryAgainLater || reason != want {
			t.Fatalf("%s: closed %v %q, want 1013 %q", principal, code, reason, want)
		}
	}
	p1 := []*hostConn{connectAs(t, srv, "p1"), connectAs(t, srv, "p1")}
	for _, c := range p1 { // served: registered before it reads
		c.send(`{"jsonrpc":"2.0","id":1,"method":"ping"}`)
		if _, err := c.read(); err != nil {
			t.Fatal(err)
		}
	}
	refused("p1", "too many connections not initialized yet for this token (listener.max_uninitialized, 2)")
	p1[0].initialize("c1")
	p1 = append(p1, connectAs(t, srv, "p1"))
	p1[1].initialize("c2")
	p1[2].initialize("c3")
	p1 = append(p1, connectAs(t, srv, "p1"))
	p1[3].initialize("c4")
	refused("p1", "too many connections for this token (listener.max_connections_per_principal, 4)")
	p2 := []*hostConn{connectAs(t, srv, "p2"), connectAs(t, srv, "p2")}
	for i, c := range p2 {
		c.initialize("d" + strconv.Itoa(i))
	}
	refused("p3", "too many connections on this host (listener.max_connections, 6)")
	// One ends: its slot is free again.
	_ = p2[1].mc.Close(transport.CloseNormal, "")
	<-p2[1].served
	p2[1].served <- nil // for the cleanup
	connectAs(t, srv, "p3").initialize("e")
}

// TestInputQueueBound: input for a program that does not read it queues
// up to 1 MiB (host/terminal.go maxInputQueueBytes); beyond that a
// terminal/input is echoed back rejected instead of being held.
func TestInputQueueBound(t *testing.T) {
	srv := newServer(t, nil)
	hc := connect(t, srv)
	hc.initialize("input-flood")
	uri := "ahp-terminal:/deaf"
	// Raw mode: a full line buffer then blocks the writer (in canonical
	// mode the line discipline would discard the excess instead).
	hc.mustCall(rpc.MethodCreateTerminal, rpc.CreateTerminalParams{Channel: uri,
		Command: []string{"sh", "-c", "stty raw -echo; echo ready; exec sleep 300"}})
	hc.mustCall(rpc.MethodSubscribe, rpc.SubscribeParams{Channel: uri})
	var out strings.Builder
	hc.until("ready", func(m *msg) bool {
		if typ, raw, _ := m.action(); typ == rpc.ActionTerminalData {
			var a rpc.TerminalDataAction
			_ = json.Unmarshal(raw, &a)
			out.WriteString(a.Data)
		}
		return strings.Contains(out.String(), "ready")
	})
	chunk := strings.Repeat("x", 64<<10)
	const sends = 24 // 1.5 MiB in all
	for i := 1; i <= sends; i++ {
		hc.send(`{"jsonrpc":"2.0","method":"dispatchAction","params":{"channel":"` + uri + `","clientSeq":` + strconv.Itoa(i) +
			`,"action":{"type":"terminal/input","data":"` + chunk + `"}}}`)
	}
	accepted, rejected := 0, 0
	for accepted+rejected < sends {
		m, _ := hc.until("the echo of an input", func(m *msg) bool {
			typ, _, env := m.action()
			return typ == rpc.ActionTerminalInput && env.Origin != nil
		})
		_, _, env := m.action()
		switch {
		case env.RejectionReason == "":
			accepted++
		case strings.Contains(env.RejectionReason, "input queue full"):
			rejected++
		default:
			t.Fatalf("input %d rejected: %q", env.Origin.ClientSeq, env.RejectionReason)
		}
	}
	// At most 1 MiB waits unwritten, plus what the PTY itself absorbed.
	if rejected == 0 || accepted > 16+2 {
		t.Fatalf("accepted %d, rejected %d of %d 64 KiB inputs; want the queue to stop near 1 MiB", accepted, rejected, sends)
	}
}
