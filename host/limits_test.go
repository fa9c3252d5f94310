package host_test

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/sidecar-dev/sidecar/host"
	"github.com/sidecar-dev/sidecar/rpc"
	"github.com/sidecar-dev/sidecar/transport"
)

// TestConnectionLimit: 1024 connections are served at once; the next one
// is closed at once with 1013 and the others are unaffected.
func TestConnectionLimit(t *testing.T) {
	srv := newServer(t, nil)
	conns := make([]*hostConn, 0, 1024)
	for range 1024 {
		conns = append(conns, connect(t, srv))
	}
	// Every one is being served: a ping round trip on each proves it was
	// registered (ServeConn registers before it reads).
	for i, c := range conns {
		c.send(`{"jsonrpc":"2.0","id":1,"method":"ping","params":{"channel":"ahp-root://"}}`)
		if m, err := c.read(); err != nil || string(m.Raw) != `{"id":1,"result":null,"jsonrpc":"2.0"}` {
			t.Fatalf("ping on connection %d: %v %v", i+1, m, err)
		}
	}
	a, b := transport.Pipe(4)
	err := srv.ServeConn(context.Background(), b)
	if !errors.Is(err, host.ErrTooManyConnections) {
		t.Fatalf("connection 1025: %v, want ErrTooManyConnections", err)
	}
	_, rerr := a.ReadMessage(context.Background())
	if code := transport.CloseStatus(rerr); code != transport.CloseTryAgainLater {
		t.Fatalf("connection 1025 closed with %v (%v), want 1013", code, rerr)
	}
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
