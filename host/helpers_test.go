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
	"github.com/sidecar-dev/sidecar/host"
	"github.com/sidecar-dev/sidecar/internal/syncbuf"
	"github.com/sidecar-dev/sidecar/rpc"
	"github.com/sidecar-dev/sidecar/transport"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// deadline bounds every wait in these tests.
const deadline = 10 * time.Second

// msg is one message read from the host, decoded enough to route it.
type msg struct {
	Raw    string
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

// hostConn is the client end of a Pipe served by a host.Server.
type hostConn struct {
	t      testing.TB
	mc     transport.MessageConn
	served chan error
	nextID int
	// pending holds messages read while waiting for another one, oldest
	// first; until looks here before reading more.
	pending []*msg
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

func (hc *hostConn) send(raw string) {
	hc.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	if err := hc.mc.WriteMessage(ctx, []byte(raw)); err != nil {
		hc.t.Fatalf("write %s: %v", raw, err)
	}
}

// read returns the next message, or the read error (a closed pipe).
func (hc *hostConn) read() (*msg, error) {
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	raw, err := hc.mc.ReadMessage(ctx)
	if err != nil {
		return nil, err
	}
	m := &msg{Raw: string(raw)}
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

// closed reads until the host closes the pipe and returns the close code.
func (hc *hostConn) closed() (transport.CloseCode, string, []*msg) {
	hc.t.Helper()
	var seen []*msg
	stop := time.Now().Add(deadline)
	for time.Now().Before(stop) {
		m, err := hc.read()
		if err != nil {
			var pe *transport.PipeCloseError
			if !errors.As(err, &pe) {
				hc.t.Fatalf("read error %v, want a pipe close", err)
			}
			return pe.Code, pe.Reason, seen
		}
		seen = append(seen, m)
	}
	hc.t.Fatalf("pipe not closed within %v (read: %s)", deadline, raws(seen))
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
