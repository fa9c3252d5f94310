package host_test

import (
	"context"
	"net"
	"testing"

	"github.com/sidecar-dev/sidecar/host"
	"github.com/sidecar-dev/sidecar/internal/conntypes"
	"github.com/sidecar-dev/sidecar/rpc"
	"github.com/sidecar-dev/sidecar/transport"
)

// hostConnOver is a hostConn on a connection of type ct to srv, served as
// principal.
func hostConnOver(t *testing.T, srv *host.Server, ct conntypes.Type, principal string) (*hostConn, func(testing.TB) transport.MessageConn) {
	t.Helper()
	dial := ct.Listen(t, func(ctx context.Context, mc transport.MessageConn) { _ = srv.ServeConnAs(ctx, mc, principal) })
	hc := &hostConn{t: t, mc: dial(t), served: make(chan error, 1), nextID: 1}
	return hc, dial
}

// TestGiveUpIsALoss (issue 27 item 3): a client that gives a link up
// closes it 1011 "connection lost"; over transport-io, whose close table
// has no such code, that used to read back as 1000, so the host took it
// for a detach and dropped the client's state. On every transport the
// state is kept: a reconnect with the token resumes it.
func TestGiveUpIsALoss(t *testing.T) {
	conntypes.Run(t, func(t *testing.T, ct conntypes.Type) {
		srv := newServer(t, nil)
		a, dial := hostConnOver(t, srv, ct, "p1")
		init := a.initialize("giver", rpc.RootChannel)
		_ = a.mc.Close(transport.CloseInternalError, "connection lost")
		b := &hostConn{t: t, mc: dial(t), served: make(chan error, 1), nextID: 1}
		m, res := b.reconnect(resumeParams("giver", init.Resume.Token, []string{rpc.RootChannel}))
		if m.Error != nil || res.Type == "" {
			t.Fatalf("reconnect after 1011 connection lost: %s", m.Raw)
		}
	})
}

// TestReconnectResultLost (issue 27 item 3): when the connection that
// sent reconnect is lost before the result goes out, the client's state
// stays kept (seed 000: the client sends reconnect again for the same
// subscriptions): the retry gets its TCP channel resumed with offsets, and
// the destination connection is never reset.
func TestReconnectResultLost(t *testing.T) {
	srv := newServer(t, nil)
	srv.SetRequestLoser(rpc.MethodReconnect)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	a := connectAs(t, srv, "p1")
	init := a.initialize("lost-result", rpc.RootChannel)
	const tcpCh = "ahp-tcp:/lost-result"
	a.mustCall(rpc.MethodCreateTCPConnection, map[string]any{"channel": tcpCh, "host": "127.0.0.1", "port": l.Addr().(*net.TCPAddr).Port})
	dest, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer dest.Close()
	a.mustCall(rpc.MethodSubscribe, map[string]any{"channel": tcpCh, "flowControl": map[string]any{"receive": map[string]any{"windowBytes": 65536, "maximumFrameBytes": 16384}}})
	a.until("snapshot", func(m *msg) bool { return m.Method == rpc.MethodChannelSnapshot && m.channel() == tcpCh })
	a.cut()

	item := window(tcpCh, 0)
	item.Offsets = &rpc.StreamOffsets{}
	params := resumeParams("lost-result", init.Resume.Token, []string{rpc.RootChannel}, item)
	b := connectAs(t, srv, "p1") // its reconnect is lost before its result
	b.send(string(mustJSON(t, map[string]any{"jsonrpc": "2.0", "id": 1, "method": rpc.MethodReconnect, "params": params})))
	if m, err := b.read(); err == nil {
		t.Fatalf("the lost reconnect was answered: %s", m.Raw)
	}

	c := connectAs(t, srv, "p1")
	m, res := c.reconnect(params)
	if m.Error != nil {
		t.Fatalf("the retried reconnect: %s", m.Raw)
	}
	if res.Windows == nil || len(res.Windows.Items) != 1 || res.Windows.Items[0].Channel != tcpCh || res.Windows.Items[0].Offsets == nil || len(res.Missing) != 0 {
		t.Fatalf("the retried reconnect kept %s, want the TCP channel with offsets", m.Raw)
	}
	// The destination was never reset: it still carries bytes.
	if _, err := dest.Write([]byte("still")); err != nil {
		t.Fatal(err)
	}
	c.until("data", func(m *msg) bool { return m.Method == rpc.MethodTCPData && m.channel() == tcpCh })
}
