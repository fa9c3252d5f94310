package host_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.uber.org/goleak"

	"github.com/sidecar-dev/sidecar/config"
	"github.com/sidecar-dev/sidecar/delivery/bytestream"
	"github.com/sidecar-dev/sidecar/host"
	"github.com/sidecar-dev/sidecar/internal/conntypes"
	"github.com/sidecar-dev/sidecar/internal/syncbuf"
	"github.com/sidecar-dev/sidecar/rpc"
	"github.com/sidecar-dev/sidecar/transport"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// deadline bounds every wait in these tests.
const deadline = 10 * time.Second

// msg is one message read from the host, decoded enough to route it.
type msg struct {
	// Raw is its text; Binary says it came in its binary form (which
	// read turned into the text it stands for).
	Raw    string
	Binary bool
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
	Result json.RawMessage `json:"result"`
	Error  *rpc.Error      `json:"error"`
}

// channel returns params.channel.
func (m *msg) channel() string {
	var p struct {
		Channel string `json:"channel"`
	}
	_ = json.Unmarshal(m.Params, &p)
	return p.Channel
}

// action returns the action of an action notification: its type and raw JSON.
func (m *msg) action() (typ string, raw json.RawMessage, env rpc.ActionEnvelope) {
	if m.Method != rpc.MethodAction {
		return "", nil, env
	}
	_ = json.Unmarshal(m.Params, &env)
	var a rpc.Action
	_ = json.Unmarshal(env.Action, &a)
	return a.Type, env.Action, env
}

func (m *msg) isResponse(id int) bool { return m.Method == "" && string(m.ID) == fmt.Sprint(id) }

// hostConn is the client end of a connection served by a host.Server: a
// Pipe (connect), or one of conntypes' transports (connectOver).
type hostConn struct {
	t      testing.TB
	mc     transport.MessageConn
	served chan error
	nextID int
	// pending holds messages read while waiting for another one, oldest
	// first; until looks here before reading more.
	pending []*msg
	// lose ends the connection as a lost network does (cut); nil: a
	// close with CloseInternalError, which a host takes for a loss.
	lose func()
}

// newServer returns a host.Server on config.Default() changed by tweak, shut
// down when the test ends.
func newServer(t testing.TB, tweak func(*config.Config)) *host.Server {
	t.Helper()
	cfg := config.Default()
	cfg.Terminal.Shell = "/bin/sh"
	cfg.Terminal.Login = false
	if tweak != nil {
		tweak(cfg)
	}
	srv := host.MustNew(t, cfg, hclog.NewNullLogger())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), deadline)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	})
	return srv
}

// logBuffer collects a server's log lines (safe for concurrent writes).
type logBuffer = syncbuf.Buffer

// newLoggingServer is newServer logging at level into the returned buffer.
func newLoggingServer(t testing.TB, level hclog.Level, tweak func(*config.Config)) (*host.Server, *logBuffer) {
	t.Helper()
	cfg := config.Default()
	cfg.Terminal.Shell = "/bin/sh"
	cfg.Terminal.Login = false
	if tweak != nil {
		tweak(cfg)
	}
	logs := &logBuffer{}
	srv := host.MustNew(t, cfg, hclog.New(&hclog.LoggerOptions{Output: logs, Level: level}))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), deadline)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	})
	return srv, logs
}

// connect serves one Pipe end with srv and returns the other.
func connect(t testing.TB, srv *host.Server) *hostConn {
	t.Helper()
	return connectAs(t, srv, "")
}

// connectOver is connect over the transport ct: the test's listener of
// ct (conntypes.Connect) serves the connection with srv, as `sidecar
// serve` does.
func connectOver(t testing.TB, srv *host.Server, ct conntypes.Type) *hostConn {
	t.Helper()
	return connectAsOver(t, srv, ct, "")
}

// connectAsOver is connectOver for a transport authenticated as
// principal. The cleanup closes the connection (if the test did not) and
// waits until the host has ended it.
func connectAsOver(t testing.TB, srv *host.Server, ct conntypes.Type, principal string) *hostConn {
	t.Helper()
	hc := &hostConn{t: t, served: make(chan error, 1), nextID: 1}
	hc.mc = conntypes.Connect(t, ct, func(ctx context.Context, mc transport.MessageConn) { hc.served <- srv.ServeConnAs(ctx, mc, principal) })
	hc.lose = func() { conntypes.Lose(t, hc.mc) }
	t.Cleanup(func() {
		_ = hc.mc.Close(transport.CloseNormal, "test done")
		select {
		case err := <-hc.served:
			hc.served <- err
		case <-time.After(deadline):
			t.Error("ServeConn did not return after the client closed")
		}
	})
	return hc
}

// tioTypes are the conntypes carrying transport-io, whose close codes are
// its own (docs/protocol.md §1): a host's close reaches their clients as
// transport.FromTIOClose(transport.ToTIOClose(code, reason)).
var tioTypes = map[string]bool{conntypes.TIOWebSocket.Name: true, conntypes.WebTransport.Name: true}

// closeSeen returns the close code and reason a client over ct reads when
// the host closes with code and reason: as they are on the pipe; on a
// WebSocket the reason cut to 123 bytes; on transport-io the code mapped
// to its own (4005, 1011 and 1001 for any other reason than "server
// shutting down" become WT_NO_ERROR: 1000).
func closeSeen(ct conntypes.Type, code transport.CloseCode, reason string) (transport.CloseCode, string) {
	switch {
	case ct.Name == conntypes.Pipe.Name:
		return code, reason
	case tioTypes[ct.Name]:
		tc, r := transport.ToTIOClose(code, reason)
		if ct.Name == conntypes.TIOWebSocket.Name {
			r = transport.TruncateReason(r, 123)
		}
		return transport.FromTIOClose(tc, r), r
	}
	return code, transport.TruncateReason(reason, 123)
}

func (hc *hostConn) send(raw string) {
	hc.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	if err := hc.mc.WriteMessage(ctx, []byte(raw)); err != nil {
		hc.t.Fatalf("write %s: %v", raw, err)
	}
}

// sendData sends data at off on the byte stream channel uri as tcp/data,
// in its binary form where the transport carries one.
func (hc *hostConn) sendData(uri string, off int, data []byte) {
	hc.t.Helper()
	enc := bytestream.NewEncoder(rpc.TCPStream, uri)
	if !transport.CarriesBinary(hc.mc) {
		hc.send(string(enc.AppendData(nil, bytestream.DecodedOffset(off), data)))
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	b := enc.Data(bytestream.DecodedOffset(off), data, true).Binary
	if err := hc.mc.(transport.BinaryConn).WriteBinary(ctx, b); err != nil {
		hc.t.Fatalf("write tcp/data: %v", err)
	}
}

// read returns the next message, or the read error (a closed
// connection). A binary form is turned into the text it stands for.
func (hc *hostConn) read() (*msg, error) {
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	raw, binary, err := transport.ReadMessageOrBinary(ctx, hc.mc)
	if err != nil {
		return nil, err
	}
	if binary {
		if raw, err = bytestream.TextOfBinary(nil, raw, transport.ReadLimit(hc.mc)); err != nil {
			hc.t.Fatalf("host sent a bad binary form: %v", err)
		}
	}
	m := &msg{Raw: string(raw), Binary: binary}
	if err := json.Unmarshal(raw, m); err != nil {
		hc.t.Fatalf("host sent invalid JSON %q: %v", raw, err)
	}
	return m, nil
}

// until returns the first message, pending or newly read, that pred
// matches; messages that do not match stay pending for later calls. It also
// returns the pending messages that precede the match.
func (hc *hostConn) until(what string, pred func(*msg) bool) (*msg, []*msg) {
	hc.t.Helper()
	for i, m := range hc.pending {
		if pred(m) {
			before := append([]*msg(nil), hc.pending[:i]...)
			hc.pending = append(hc.pending[:i:i], hc.pending[i+1:]...)
			return m, before
		}
	}
	stop := time.Now().Add(deadline)
	for time.Now().Before(stop) {
		m, err := hc.read()
		if err != nil {
			hc.t.Fatalf("waiting for %s: %v (pending: %s)", what, err, raws(hc.pending))
		}
		if pred(m) {
			return m, append([]*msg(nil), hc.pending...)
		}
		hc.pending = append(hc.pending, m)
	}
	hc.t.Fatalf("no %s within %v (pending: %s)", what, deadline, raws(hc.pending))
	return nil, nil
}

func raws(ms []*msg) string {
	var b strings.Builder
	for _, m := range ms {
		b.WriteString("\n  ")
		b.WriteString(m.Raw)
	}
	return b.String()
}

// call sends a request and returns its response (other messages read
// meanwhile are returned too).
func (hc *hostConn) call(method string, params any) (*msg, []*msg) {
	hc.t.Helper()
	id := hc.nextID
	hc.nextID++
	text, err := rpc.Request(uint64(id), method, params)
	if err != nil {
		hc.t.Fatal(err)
	}
	hc.send(string(text))
	return hc.until(fmt.Sprintf("response %d to %s", id, method), func(m *msg) bool { return m.isResponse(id) })
}

// mustCall is call that fails the test on an error response.
func (hc *hostConn) mustCall(method string, params any) (*msg, []*msg) {
	hc.t.Helper()
	r, other := hc.call(method, params)
	if r.Error != nil {
		hc.t.Fatalf("%s failed: %d %s", method, r.Error.Code, r.Error.Message)
	}
	return r, other
}

// callErr is call that expects an error response with code.
func (hc *hostConn) callErr(method string, params any, code int64) *rpc.Error {
	hc.t.Helper()
	r, _ := hc.call(method, params)
	if r.Error == nil {
		hc.t.Fatalf("%s succeeded (%s), want error %d", method, r.Raw, code)
	}
	if r.Error.Code != code {
		hc.t.Fatalf("%s: error %d %q, want code %d", method, r.Error.Code, r.Error.Message, code)
	}
	return r.Error
}

func (hc *hostConn) initialize(clientID string, initial ...string) rpc.InitializeResult {
	hc.t.Helper()
	r, _ := hc.mustCall(rpc.MethodInitialize, rpc.InitializeParams{
		Channel: rpc.RootChannel, ProtocolVersions: []string{"0.5.0"}, ClientID: clientID,
		InitialSubscriptions: initial,
	})
	var res rpc.InitializeResult
	if err := json.Unmarshal(r.Result, &res); err != nil {
		hc.t.Fatal(err)
	}
	return res
}

// closed reads until the host closes the connection and returns the
// close code and reason.
func (hc *hostConn) closed() (transport.CloseCode, string, []*msg) {
	hc.t.Helper()
	var seen []*msg
	stop := time.Now().Add(deadline)
	for time.Now().Before(stop) {
		m, err := hc.read()
		if err != nil {
			code := transport.CloseStatus(err)
			if code < 0 || errors.Is(err, context.DeadlineExceeded) {
				hc.t.Fatalf("read error %v, want a close", err)
			}
			return code, transport.CloseReason(err), seen
		}
		seen = append(seen, m)
	}
	hc.t.Fatalf("connection not closed within %v (read: %s)", deadline, raws(seen))
	return 0, "", nil
}

// rootTerminals decodes root/terminalsChanged's list.
func rootTerminals(t testing.TB, action json.RawMessage) []rpc.TerminalInfo {
	t.Helper()
	var a rpc.RootTerminalsAction
	if err := json.Unmarshal(action, &a); err != nil {
		t.Fatal(err)
	}
	if a.Terminals == nil {
		t.Fatalf("terminals is null in %s", action)
	}
	return a.Terminals
}

func resources(ts []rpc.TerminalInfo) []string {
	out := make([]string, len(ts))
	for i, x := range ts {
		out[i] = x.Resource
	}
	return out
}

// windowed returns subscribe params offering windowed delivery.
func windowed(ch string, window, frame int64) map[string]any {
	return map[string]any{"channel": ch, "flowControl": map[string]any{"receive": map[string]any{"windowBytes": window, "maximumFrameBytes": frame}}}
}
