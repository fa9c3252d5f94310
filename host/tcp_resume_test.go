package host_test

import (
	"errors"
	"io"
	"net"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	tcpadapter "github.com/sidecar-dev/sidecar/adapters/tcp"
	"github.com/sidecar-dev/sidecar/config"
	"github.com/sidecar-dev/sidecar/delivery"
	"github.com/sidecar-dev/sidecar/host"
	"github.com/sidecar-dev/sidecar/internal/conntypes"
	"github.com/sidecar-dev/sidecar/rpc"
)

// tcpParked opens a TCP channel for client c1 over ct, subscribes, lets
// the destination send "hello" (read as tcp/data, never credited), cuts
// the connection and returns the server, the resume token, the channel
// and the destination's socket.
func tcpParked(t *testing.T, ct conntypes.Type) (*host.Server, string, string, *net.TCPConn) {
	t.Helper()
	srv := newServer(t, nil)
	hc := connectOver(t, srv, ct)
	init := hc.initialize("c1")
	if init.Resume == nil {
		t.Fatal("no resume token")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	uri := "ahp-tcp:/r"
	hc.mustCall(rpc.MethodCreateTCPConnection, map[string]any{"channel": uri, "host": "127.0.0.1", "port": l.Addr().(*net.TCPAddr).Port})
	c, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	dest := c.(*net.TCPConn)
	t.Cleanup(func() { _ = dest.Close() })
	_ = dest.SetDeadline(time.Now().Add(deadline))
	hc.mustCall(rpc.MethodSubscribe, windowed(uri, 64<<10, 16<<10))
	if _, err := io.WriteString(dest, "hello"); err != nil {
		t.Fatal(err)
	}
	if m, _ := hc.until("tcp/data", func(m *msg) bool { return m.Method == rpc.MethodTCPData }); m.Binary != ct.Binary {
		t.Fatalf("tcp/data in its binary form: %v, want %v", m.Binary, ct.Binary)
	}
	hc.cut()
	return srv, init.Resume.Token, uri, dest
}

// TestTCPResumeByOffsets: a TCP channel kept across a cut resumes by
// byte offsets: the host says what it received of the client (0 here),
// and sends again, first, its message from before the cut that holds
// bytes the client lacks (it said it has 2 of the 5: the whole message
// goes, from offset 0; the client drops its head); then new data.
func TestTCPResumeByOffsets(t *testing.T) {
	conntypes.Run(t, func(t *testing.T, ct conntypes.Type) {
		srv, token, uri, dest := tcpParked(t, ct)
		hc := connectOver(t, srv, ct)
		it := window(uri, 0)
		it.Offsets = &rpc.StreamOffsets{Received: 2}
		m, res := hc.reconnect(resumeParams("c1", token, nil, it))
		if m.Error != nil || len(res.Missing) != 0 || res.Windows == nil || len(res.Windows.Items) != 1 {
			t.Fatalf("reconnect: %s", m.Raw)
		}
		got := res.Windows.Items[0]
		if got.Recovery != rpc.RecoveryReplay || got.Offsets == nil || got.Offsets.Received != 0 || got.Offsets.EOF {
			t.Fatalf("result item %+v, want replay with tcp {received 0}", got)
		}
		again, _ := hc.until("tcp/data again", func(m *msg) bool { return m.Method == rpc.MethodTCPData || m.Method == rpc.MethodChannelSnapshot })
		if !strings.Contains(again.Raw, `"offset":0,"data":"aGVsbG8="`) || again.Binary != ct.Binary {
			t.Fatalf("first data message after the resume: %s (binary form %v, want %v)", again.Raw, again.Binary, ct.Binary)
		}
		if _, err := io.WriteString(dest, "world"); err != nil {
			t.Fatal(err)
		}
		next, _ := hc.until("new tcp/data", func(m *msg) bool { return m.Method == rpc.MethodTCPData })
		if !strings.Contains(next.Raw, `"offset":5,"data":"d29ybGQ="`) || next.Binary != ct.Binary {
			t.Fatalf("new data after the resume: %s (binary form %v, want %v)", next.Raw, next.Binary, ct.Binary)
		}
		// The client's direction goes on too.
		hc.sendData(uri, 0, []byte("hi"))
		b := make([]byte, 2)
		if _, err := io.ReadFull(dest, b); err != nil || string(b) != "hi" {
			t.Fatalf("destination read %q, %v", b, err)
		}
	})
}

// TestTCPResumeRefused: a TCP channel asked for without offsets, or with
// offsets that cannot be true, is listed in missing and its socket reset
// (the destination sees ECONNRESET, never an end of stream); one not
// asked for at all is reset too.
func TestTCPResumeRefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		tcp  *rpc.StreamOffsets
		ask  bool
	}{
		{"no offsets", nil, true},
		{"bytes never sent", &rpc.StreamOffsets{Received: 6}, true},
		{"an eof never sent", &rpc.StreamOffsets{Received: 5, EOF: true}, true},
		{"not asked for", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, token, uri, dest := tcpParked(t, conntypes.Pipe)
			hc := connect(t, srv)
			p := resumeParams("c1", token, nil)
			if tc.ask {
				it := window(uri, 0)
				it.Offsets = tc.tcp
				p = resumeParams("c1", token, nil, it)
			}
			m, res := hc.reconnect(p)
			if m.Error != nil {
				t.Fatalf("reconnect: %s", m.Raw)
			}
			if tc.ask && !slices.Contains(res.Missing, uri) {
				t.Fatalf("missing %v, want %s", res.Missing, uri)
			}
			b := make([]byte, 16)
			n, err := dest.Read(b)
			if !errors.Is(err, syscall.ECONNRESET) {
				t.Fatalf("the destination read %q, %v; want a reset", b[:n], err)
			}
		})
	}
}

// TestTCPResumeWindowBudget: a reconnect that keeps several TCP channels
// gives them windows within tcp.window_bytes_per_client, in the order
// asked: the first what it asks (within the budget), the next what is
// left, the last its first window only (FirstWindowBytes) when nothing is.
func TestTCPResumeWindowBudget(t *testing.T) {
	const total = 3 << 20
	srv := newServer(t, func(c *config.Config) {
		c.TCP.WindowBytes = 4 << 20
		c.TCP.WindowBytesPerClient = total
	})
	hc := connect(t, srv)
	init := hc.initialize("c1")
	if init.Resume == nil {
		t.Fatal("no resume token")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	uris := []string{"ahp-tcp:/a", "ahp-tcp:/b", "ahp-tcp:/c"}
	for _, uri := range uris {
		hc.mustCall(rpc.MethodCreateTCPConnection, map[string]any{"channel": uri, "host": "127.0.0.1", "port": l.Addr().(*net.TCPAddr).Port})
		c, err := l.Accept()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		hc.mustCall(rpc.MethodSubscribe, windowed(uri, 64<<10, 16<<10))
	}
	hc.cut()
	hc = connect(t, srv)
	var items []rpc.ReconnectWindowItem
	for _, uri := range uris {
		it := window(uri, 0)
		it.FlowControl.Receive.WindowBytes = 2 << 20
		it.Offsets = &rpc.StreamOffsets{}
		items = append(items, it)
	}
	m, res := hc.reconnect(resumeParams("c1", init.Resume.Token, nil, items...))
	if m.Error != nil || len(res.Missing) != 0 || res.Windows == nil || len(res.Windows.Items) != 3 {
		t.Fatalf("reconnect: %s", m.Raw)
	}
	want := []delivery.UTF16Bytes{2 << 20, 1 << 20, tcpadapter.FirstWindowBytes}
	for i, it := range res.Windows.Items {
		fc := it.FlowControl
		if fc.ClientReceive.WindowBytes != want[i] || fc.HostReceive != fc.ClientReceive || fc.ClientReceive.MaximumFrameBytes != 16<<10 {
			t.Errorf("%s: %+v, want windowBytes %d both ways, frames 16 KiB", it.Channel, fc, want[i])
		}
	}
}
