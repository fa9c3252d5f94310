package host_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sidecar-dev/sidecar/config"
	"github.com/sidecar-dev/sidecar/host"
	"github.com/sidecar-dev/sidecar/internal/conntypes"
	"github.com/sidecar-dev/sidecar/rpc"
	"github.com/sidecar-dev/sidecar/transport"
)

func TestPingBeforeInitialize(t *testing.T) {
	conntypes.Run(t, func(t *testing.T, ct conntypes.Type) {
		hc := connectOver(t, newServer(t, nil), ct)
		hc.send(`{"jsonrpc":"2.0","id":1,"method":"ping","params":{"channel":"ahp-root://"}}`)
		m, err := hc.read()
		if err != nil {
			t.Fatal(err)
		}
		if want := `{"id":1,"result":null,"jsonrpc":"2.0"}`; m.Raw != want {
			t.Fatalf("ping = %s, want %s", m.Raw, want)
		}
		// Anything else before initialize is refused, and the connection lives.
		e := hc.callErr(rpc.MethodSubscribe, rpc.SubscribeParams{Channel: rpc.RootChannel}, rpc.CodeNotInitialized)
		if e.Message != "subscribe before initialize: send initialize first" {
			t.Fatalf("message %q", e.Message)
		}
		hc.nextID = 7
		hc.send(`{"jsonrpc":"2.0","id":7,"method":"ping"}`)
		if m, _ := hc.until("ping 7", func(m *msg) bool { return m.isResponse(7) }); m.Raw != `{"id":7,"result":null,"jsonrpc":"2.0"}` {
			t.Fatalf("ping without params = %s", m.Raw)
		}
	})
}

func TestMalformedInput(t *testing.T) {
	conntypes.Run(t, func(t *testing.T, ct conntypes.Type) {
		hc := connectOver(t, newServer(t, nil), ct)
		tests := []struct{ in, want string }{
			{`{"jsonrpc":"2.0","id":1,`, `{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"parse error: unexpected end of JSON input"}}`},
			{`[{"jsonrpc":"2.0","id":1,"method":"ping"}]`, `{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"rpc: batch requests are not supported"}}`},
			{`{"jsonrpc":"1.0","id":2,"method":"ping"}`, `{"jsonrpc":"2.0","id":2,"error":{"code":-32600,"message":"invalid request: \"jsonrpc\" must be \"2.0\""}}`},
			{`{"jsonrpc":"2.0","id":1.5,"method":"ping"}`, `{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"invalid request: id must be a string or an integer from 0 to 18446744073709551615"}}`},
			{`{"jsonrpc":"2.0","id":null,"method":"ping"}`, `{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"invalid request: id must be a string or an integer from 0 to 18446744073709551615, not null (leave the id out for a notification)"}}`},
			{`{"jsonrpc":"2.0","id":3}`, `{"jsonrpc":"2.0","id":3,"error":{"code":-32600,"message":"invalid request: no method"}}`},
		}
		for _, tc := range tests {
			hc.send(tc.in)
			m, err := hc.read()
			if err != nil {
				t.Fatal(err)
			}
			if m.Raw != tc.want {
				t.Errorf("for %s\n got %s\nwant %s", tc.in, m.Raw, tc.want)
			}
		}
		hc.initialize("c1")
		e := hc.callErr("resourceRead", map[string]any{"channel": "x"}, rpc.CodeMethodNotFound)
		if e.Message != "method not found: resourceRead" {
			t.Fatalf("message %q", e.Message)
		}
		e = hc.callErr(rpc.MethodSubscribe, map[string]any{"channel": 5}, rpc.CodeInvalidParams)
		if e.Message != `invalid params: "channel" must be a string` {
			t.Fatalf("message %q", e.Message)
		}
	})
}

func TestInitialize(t *testing.T) {
	conntypes.Run(t, func(t *testing.T, ct conntypes.Type) {
		srv := newServer(t, nil)
		t.Run("no initial subscriptions", func(t *testing.T) {
			hc := connectOver(t, srv, ct)
			r, _ := hc.mustCall(rpc.MethodInitialize, map[string]any{"channel": rpc.RootChannel, "protocolVersions": []string{"0.5.0"}, "clientId": "c1"})
			var res rpc.InitializeResult
			if err := json.Unmarshal(r.Result, &res); err != nil {
				t.Fatal(err)
			}
			// serverSeq is the journal's when the result was made: the ports
			// poller may have appended root/portsChanged since.
			if res.ProtocolVersion != "0.5.0" || res.ServerSeq > srv.Journal().Seq() || res.ServerInfo == nil || res.ServerInfo.Name != "sidecar" || res.ServerInfo.Version != host.Version {
				t.Fatalf("initialize result %s", r.Result)
			}
			if !strings.Contains(string(r.Result), `"snapshots":[]`) {
				t.Fatalf("snapshots not [] in %s", r.Result)
			}
			e := hc.callErr(rpc.MethodInitialize, map[string]any{"channel": rpc.RootChannel, "protocolVersions": []string{"0.5.0"}, "clientId": "c1"}, rpc.CodeInvalidRequest)
			if e.Message != "already initialized" {
				t.Fatalf("second initialize: %q", e.Message)
			}
		})
		t.Run("first acceptable offered version", func(t *testing.T) {
			hc := connectOver(t, srv, ct)
			r, _ := hc.mustCall(rpc.MethodInitialize, map[string]any{"channel": rpc.RootChannel, "protocolVersions": []string{"0.4.0", "0.5.3", "0.5.0"}, "clientId": "c2"})
			var res rpc.InitializeResult
			_ = json.Unmarshal(r.Result, &res)
			if res.ProtocolVersion != "0.5.3" {
				t.Fatalf("protocolVersion %q, want 0.5.3", res.ProtocolVersion)
			}
		})
		t.Run("root initial subscription", func(t *testing.T) {
			hc := connectOver(t, srv, ct)
			res := hc.initialize("c3", rpc.RootChannel, "ahp-terminal:/none")
			if len(res.Snapshots) != 1 {
				t.Fatalf("snapshots %+v, want just the root's", res.Snapshots)
			}
			s := res.Snapshots[0]
			// The ports (our extension) are there once the poller's first
			// reading is in, which may be before or after this initialize.
			var st rpc.RootState
			_ = json.Unmarshal(s.State, &st)
			state := strings.Replace(string(s.State), `,"ports":`+string(mustJSON(t, st.Ports)), "", 1)
			if s.Resource != rpc.RootChannel || state != `{"agents":[],"terminals":[]}` || s.FromSeq < res.ServerSeq {
				t.Fatalf("root snapshot %s %s %d (serverSeq %d)", s.Resource, s.State, s.FromSeq, res.ServerSeq)
			}
		})
		t.Run("missing fields", func(t *testing.T) {
			hc := connectOver(t, srv, ct)
			e := hc.callErr(rpc.MethodInitialize, map[string]any{"channel": rpc.RootChannel, "clientId": "x"}, rpc.CodeInvalidParams)
			if e.Message != `invalid params: "protocolVersions" is required` {
				t.Fatalf("message %q", e.Message)
			}
			e = hc.callErr(rpc.MethodInitialize, map[string]any{"channel": rpc.RootChannel, "protocolVersions": []string{"0.5.0"}}, rpc.CodeInvalidParams)
			if e.Message != `invalid params: "clientId" is required` {
				t.Fatalf("message %q", e.Message)
			}
		})
	})
}

func TestUnsupportedVersionClosesWith4005(t *testing.T) {
	conntypes.Run(t, func(t *testing.T, ct conntypes.Type) {
		hc := connectOver(t, newServer(t, nil), ct)
		hc.send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"channel":"ahp-root://","protocolVersions":["9.9.9"],"clientId":"c1"}}`)
		m, err := hc.read()
		if err != nil && ct.Name == conntypes.WebTransport.Name {
			// transportio's WebTransport carrier closes the session as
			// soon as the emits are handed to QUIC; webtransport-go then
			// resets the streams, and what the client had not read yet
			// is gone.
			t.Skipf("known bug: over WebTransport the answer written just before the close is lost: %v", err)
		}
		if err != nil {
			t.Fatal(err)
		}
		want := `{"jsonrpc":"2.0","id":1,"error":{"code":-32005,"message":"unsupported protocol version: offered 9.9.9, host supports ^0.5.0","data":{"supportedVersions":["^0.5.0"]}}}`
		if m.Raw != want {
			t.Fatalf("got  %s\nwant %s", m.Raw, want)
		}
		// transport-io has no 4005: its clients see WT_NO_ERROR (1000)
		// with the reason.
		wantCode, wantReason := closeSeen(ct, transport.CloseVersionMismatch, "no common protocol version")
		code, reason, extra := hc.closed()
		if code != wantCode || reason != wantReason || len(extra) != 0 {
			t.Fatalf("close code %d %q after %s, want %d %q and nothing else", code, reason, raws(extra), wantCode, wantReason)
		}
		select {
		case err := <-hc.served:
			hc.served <- err // for the cleanup
		case <-time.After(deadline):
			t.Fatal("ServeConn still running after the 4005 close")
		}
	})
}

// terminalRun creates a terminal running argv and subscribes to it windowed.
func TestTerminalLifecycleWindowed(t *testing.T) {
	conntypes.Run(t, func(t *testing.T, ct conntypes.Type) {
		srv := newServer(t, nil)
		hc := connectOver(t, srv, ct)
		hc.initialize("c1", rpc.RootChannel)
		const ch = "ahp-terminal:/t1"
		r, _ := hc.mustCall(rpc.MethodCreateTerminal, map[string]any{"channel": ch, "command": []string{"sh", "-c", "echo hello; exit 7"}})
		if string(r.Result) != "null" {
			t.Fatalf("createTerminal result %s, want null", r.Result)
		}
		// root/terminalsChanged carries the new terminal.
		m, _ := hc.until("root/terminalsChanged", func(m *msg) bool {
			typ, _, _ := m.action()
			return typ == rpc.ActionRootTerminals
		})
		_, a, env := m.action()
		if env.Channel != rpc.RootChannel || env.Origin != nil {
			t.Fatalf("root action envelope %s", m.Raw)
		}
		list := rootTerminals(t, a)
		if len(list) != 1 || list[0].Resource != ch || list[0].Title != "sh" || list[0].Claim != (rpc.Claim{Kind: "client", ClientID: "c1"}) || list[0].ExitCode != nil {
			t.Fatalf("terminals %+v", list)
		}

		// Windowed subscribe: the response first, then channel/snapshot.
		id := hc.nextID
		req, err := rpc.Request(uint64(id), rpc.MethodSubscribe, windowed(ch, 65536, 16384))
		if err != nil {
			t.Fatal(err)
		}
		hc.send(string(req))
		var got []*msg
		for {
			m, err := hc.read()
			if err != nil {
				t.Fatal(err)
			}
			if m.isResponse(id) || m.channel() == ch {
				got = append(got, m)
			} else {
				hc.pending = append(hc.pending, m)
			}
			if typ, _, _ := m.action(); typ == rpc.ActionTerminalExited {
				break
			}
			if len(got) > 100 {
				t.Fatalf("no exit in %s", raws(got))
			}
		}
		hc.nextID++
		if !got[0].isResponse(id) {
			t.Fatalf("first message for the channel is %s, want the subscribe response", got[0].Raw)
		}
		if want := `{"flowControl":{"clientReceive":{"windowBytes":65536,"maximumFrameBytes":16384},"hostReceive":{"windowBytes":65536,"maximumFrameBytes":16384}}}`; string(got[0].Result) != want {
			t.Fatalf("subscribe result %s, want %s", got[0].Result, want)
		}
		if got[1].Method != rpc.MethodChannelSnapshot {
			t.Fatalf("first data message %s, want channel/snapshot", got[1].Raw)
		}
		var sp rpc.ChannelSnapshotParams
		if err := json.Unmarshal(got[1].Params, &sp); err != nil {
			t.Fatal(err)
		}
		if sp.Channel != ch || sp.Snapshot.Resource != ch {
			t.Fatalf("snapshot channel %q resource %q, want %q", sp.Channel, sp.Snapshot.Resource, ch)
		}
		var output strings.Builder
		var exit *int
		lastSeq := sp.Snapshot.FromSeq
		for _, m := range got[2:] {
			typ, a, env := m.action()
			if env.ServerSeq <= lastSeq {
				t.Fatalf("serverSeq %d not above %d in %s", env.ServerSeq, lastSeq, m.Raw)
			}
			lastSeq = env.ServerSeq
			switch typ {
			case rpc.ActionTerminalData:
				var d rpc.TerminalDataAction
				_ = json.Unmarshal(a, &d)
				output.WriteString(d.Data)
			case rpc.ActionTerminalExited:
				var x rpc.TerminalExitedAction
				_ = json.Unmarshal(a, &x)
				exit = x.ExitCode
			}
		}
		var st rpc.TerminalState
		_ = json.Unmarshal(sp.Snapshot.State, &st)
		for _, p := range st.Content {
			output.WriteString(p.Value)
		}
		if !strings.Contains(output.String(), "hello") {
			t.Fatalf("output %q does not contain hello", output.String())
		}
		if exit == nil || *exit != 7 {
			t.Fatalf("exit code %v, want 7", exit)
		}
		// The root catalogue then shows the exit code.
		m, _ = hc.until("root/terminalsChanged with exit code", func(m *msg) bool {
			typ, a, _ := m.action()
			if typ != rpc.ActionRootTerminals {
				return false
			}
			l := rootTerminals(t, a)
			return len(l) == 1 && l[0].ExitCode != nil
		})
		_, a, _ = m.action()
		if l := rootTerminals(t, a); *l[0].ExitCode != 7 {
			t.Fatalf("root exit code %d", *l[0].ExitCode)
		}
	})
}

func TestTerminalErrorsAndDispose(t *testing.T) {
	conntypes.Run(t, func(t *testing.T, ct conntypes.Type) {
		srv := newServer(t, nil)
		hc := connectOver(t, srv, ct)
		hc.initialize("c1", rpc.RootChannel)
		create := func(ch string) map[string]any {
			return map[string]any{"channel": ch, "command": []string{"sleep", "30"}}
		}
		hc.mustCall(rpc.MethodCreateTerminal, create("ahp-terminal:/b"))
		hc.mustCall(rpc.MethodCreateTerminal, create("ahp-terminal:/a"))
		// The second terminalsChanged has the full list, sorted.
		m, _ := hc.until("terminalsChanged with two", func(m *msg) bool {
			typ, a, _ := m.action()
			return typ == rpc.ActionRootTerminals && len(rootTerminals(t, a)) == 2
		})
		_, a, _ := m.action()
		if got := resources(rootTerminals(t, a)); !reflect.DeepEqual(got, []string{"ahp-terminal:/a", "ahp-terminal:/b"}) {
			t.Fatalf("terminals %v", got)
		}

		e := hc.callErr(rpc.MethodCreateTerminal, create("ahp-terminal:/a"), rpc.CodeAlreadyExists)
		if e.Message != "terminal already exists: ahp-terminal:/a" {
			t.Fatalf("duplicate: %q", e.Message)
		}
		e = hc.callErr(rpc.MethodSubscribe, windowed("ahp-terminal:/nope", 65536, 16384), rpc.CodeNotFound)
		if e.Message != "no such channel: ahp-terminal:/nope" {
			t.Fatalf("unknown subscribe: %q", e.Message)
		}
		hc.callErr(rpc.MethodSubscribe, map[string]any{"channel": "ahp-terminal:/nope"}, rpc.CodeNotFound)
		for _, bad := range []string{"ahp-terminal:/", "ahp-terminal:x", "ahp-terminal:/a b", "file:///x"} {
			hc.callErr(rpc.MethodCreateTerminal, create(bad), rpc.CodeInvalidParams)
		}
		hc.callErr(rpc.MethodCreateTerminal, map[string]any{"channel": "ahp-terminal:/big", "cols": 5000}, rpc.CodeInvalidParams)
		hc.callErr(rpc.MethodCreateTerminal, map[string]any{"channel": "ahp-terminal:/cwd", "cwd": "/tmp"}, rpc.CodeInvalidParams)

		// Dispose: terminalsChanged without it.
		r, _ := hc.mustCall(rpc.MethodDisposeTerminal, rpc.ChannelParams{Channel: "ahp-terminal:/a"})
		if string(r.Result) != "null" {
			t.Fatalf("dispose result %s", r.Result)
		}
		m, _ = hc.until("terminalsChanged after dispose", func(m *msg) bool {
			typ, a, _ := m.action()
			return typ == rpc.ActionRootTerminals && len(rootTerminals(t, a)) == 1
		})
		_, a, _ = m.action()
		if got := resources(rootTerminals(t, a)); !reflect.DeepEqual(got, []string{"ahp-terminal:/b"}) {
			t.Fatalf("after dispose terminals %v", got)
		}
		hc.callErr(rpc.MethodDisposeTerminal, rpc.ChannelParams{Channel: "ahp-terminal:/a"}, rpc.CodeNotFound)
		hc.callErr(rpc.MethodSubscribe, map[string]any{"channel": "ahp-terminal:/a"}, rpc.CodeNotFound)
		// The URI is free again.
		hc.mustCall(rpc.MethodCreateTerminal, create("ahp-terminal:/a"))
	})
}

func TestTerminalLimits(t *testing.T) {
	srv := newServer(t, func(c *config.Config) { c.Terminal.MaxPerClient = 1; c.Terminal.MaxTotal = 2 })
	hc := connect(t, srv)
	hc.initialize("c1")
	create := func(ch string) map[string]any {
		return map[string]any{"channel": ch, "command": []string{"sleep", "30"}}
	}
	hc.mustCall(rpc.MethodCreateTerminal, create("ahp-terminal:/1"))
	e := hc.callErr(rpc.MethodCreateTerminal, create("ahp-terminal:/2"), rpc.CodePermissionDenied)
	if e.Message != "terminal limit reached: 1 terminals for this client (terminal.max_per_client); dispose one first" {
		t.Fatalf("per-client: %q", e.Message)
	}
	other := connect(t, srv)
	other.initialize("c2")
	other.mustCall(rpc.MethodCreateTerminal, create("ahp-terminal:/2"))
	third := connect(t, srv)
	third.initialize("c3")
	e = third.callErr(rpc.MethodCreateTerminal, create("ahp-terminal:/3"), rpc.CodePermissionDenied)
	if e.Message != "terminal limit reached: 2 terminals on this host (terminal.max_total); dispose one first" {
		t.Fatalf("total: %q", e.Message)
	}
}

func TestRejectedActions(t *testing.T) {
	conntypes.Run(t, func(t *testing.T, ct conntypes.Type) {
		srv := newServer(t, nil)
		hc := connectOver(t, srv, ct)
		hc.initialize("c1", rpc.RootChannel)
		const ch = "ahp-terminal:/r"
		hc.mustCall(rpc.MethodCreateTerminal, map[string]any{"channel": ch, "command": []string{"sleep", "30"}})
		r, _ := hc.mustCall(rpc.MethodSubscribe, map[string]any{"channel": ch})
		var res rpc.SubscribeResult
		if err := json.Unmarshal(r.Result, &res); err != nil || res.Snapshot == nil || res.FlowControl != nil || res.Snapshot.Resource != ch {
			t.Fatalf("ordinary subscribe result %s", r.Result)
		}
		cases := []struct {
			action, reason string
		}{
			{`{"type":"terminal/data","data":"x"}`, "terminal/data is a host-only action"},
			{`{"type":"terminal/exited","exitCode":0}`, "terminal/exited is a host-only action"},
			{`{"type":"terminal/bogus"}`, "unknown action type terminal/bogus"},
			{`{"type":"terminal/input"}`, `terminal/input needs a string "data"`},
			{`{"type":"terminal/resized","cols":0,"rows":5}`, "terminal/resized needs cols and rows between 1 and 4096"},
		}
		for i, tc := range cases {
			seq := uint64(i + 1)
			hc.send(`{"jsonrpc":"2.0","method":"dispatchAction","params":{"channel":"` + ch + `","clientSeq":` + utoa(seq) + `,"action":` + tc.action + `}}`)
			m, _ := hc.until("echo of "+tc.action, func(m *msg) bool {
				_, _, env := m.action()
				return env.Channel == ch && env.Origin != nil && env.Origin.ClientSeq == seq
			})
			_, a, env := m.action()
			if env.Origin.ClientID != "c1" || env.RejectionReason != tc.reason || string(a) != tc.action {
				t.Errorf("echo %s, want action %s rejected with %q", m.Raw, tc.action, tc.reason)
			}
		}
		// An accepted action is echoed with origin and no rejectionReason.
		hc.send(`{"jsonrpc":"2.0","method":"dispatchAction","params":{"channel":"` + ch + `","clientSeq":50,"action":{"type":"terminal/titleChanged","title":"T"}}}`)
		m, _ := hc.until("accepted title", func(m *msg) bool {
			_, _, env := m.action()
			return env.Origin != nil && env.Origin.ClientSeq == 50
		})
		if _, _, env := m.action(); env.RejectionReason != "" || !strings.Contains(m.Raw, `"origin":{"clientId":"c1","clientSeq":50}`) {
			t.Fatalf("accepted echo %s", m.Raw)
		}
		// Root actions are not client-dispatchable.
		hc.send(`{"jsonrpc":"2.0","method":"dispatchAction","params":{"channel":"ahp-root://","clientSeq":60,"action":{"type":"root/terminalsChanged","terminals":[]}}}`)
		m, _ = hc.until("root rejection", func(m *msg) bool {
			_, _, env := m.action()
			return env.Origin != nil && env.Origin.ClientSeq == 60
		})
		if _, _, env := m.action(); env.Channel != rpc.RootChannel || env.RejectionReason != "root actions are not client-dispatchable on this host" {
			t.Fatalf("root echo %s", m.Raw)
		}
	})
}

func utoa(n uint64) string { b, _ := json.Marshal(n); return string(b) }

func TestCreditBeyondSentCloses1002(t *testing.T) {
	conntypes.Run(t, func(t *testing.T, ct conntypes.Type) {
		srv := newServer(t, nil)
		hc := connectOver(t, srv, ct)
		hc.initialize("c1")
		const ch = "ahp-terminal:/v"
		hc.mustCall(rpc.MethodCreateTerminal, map[string]any{"channel": ch, "command": []string{"sleep", "30"}})
		hc.mustCall(rpc.MethodSubscribe, windowed(ch, 65536, 16384))
		snap, _ := hc.until("channel/snapshot", func(m *msg) bool { return m.Method == rpc.MethodChannelSnapshot })
		sent := len([]rune(snap.Raw)) * 2 // ASCII snapshot: 2 UTF-16 bytes per character
		// Credit exactly what was sent is fine; one more byte is a violation.
		hc.send(`{"jsonrpc":"2.0","method":"channel/credit","params":{"channel":"` + ch + `","consumedBytes":` + utoa(uint64(sent)) + `}}`)
		hc.send(`{"jsonrpc":"2.0","id":99,"method":"ping"}`)
		hc.until("ping after valid credit", func(m *msg) bool { return m.isResponse(99) })
		hc.send(`{"jsonrpc":"2.0","method":"channel/credit","params":{"channel":"` + ch + `","consumedBytes":` + utoa(uint64(sent+1)) + `}}`)
		code, reason, _ := hc.closed()
		if code != transport.CloseProtocolError {
			t.Fatalf("close code %d (%q), want 1002", code, reason)
		}
		if _, want := closeSeen(ct, code, "delivery: credit beyond sent on ahp-terminal:/v: consumedBytes "+utoa(uint64(sent+1))+" > sent "+utoa(uint64(sent))); reason != want {
			t.Fatalf("close reason %q, want %q", reason, want)
		}
	})
}

func TestShutdownClosesConnectionsAndKillsTerminals(t *testing.T) {
	conntypes.Run(t, func(t *testing.T, ct conntypes.Type) {
		srv := newServer(t, nil)
		hc := connectOver(t, srv, ct)
		hc.initialize("c1")
		hc.mustCall(rpc.MethodCreateTerminal, map[string]any{"channel": "ahp-terminal:/s", "command": []string{"sleep", "1000"}})
		ctx, cancel := context.WithTimeout(context.Background(), deadline)
		defer cancel()
		// The client reads meanwhile, as clients do: over /ahp the host's
		// close waits for the client's close frame (coder/websocket's
		// close handshake, up to 5 s), which a client sends as it reads.
		ended := make(chan error, 1)
		go func() {
			for {
				if _, err := hc.mc.ReadMessage(ctx); err != nil {
					ended <- err
					return
				}
			}
		}()
		start := time.Now()
		if err := srv.Shutdown(ctx); err != nil {
			t.Fatalf("Shutdown: %v", err)
		}
		// Shutdown returns only after every terminal's reader saw its process
		// end, within the kill grace.
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("Shutdown took %v", d)
		}
		err := <-ended
		if code, reason := transport.CloseStatus(err), transport.CloseReason(err); code != transport.CloseGoingAway || reason != "server shutting down" {
			t.Fatalf("close %d %q (%v), want 1001 server shutting down", code, reason, err)
		}
		// New connections are refused with 1001: ServeConn's part, on a
		// pipe (over WebTransport the close can overtake the handshake
		// and fail the dial instead: the close bug that
		// TestUnsupportedVersionClosesWith4005 meets).
		a, b := transport.Pipe(1)
		if err := srv.ServeConn(context.Background(), b); !errors.Is(err, host.ErrShuttingDown) {
			t.Fatalf("ServeConn after Shutdown = %v", err)
		}
		if _, err := a.ReadMessage(ctx); transport.CloseStatus(err) != transport.CloseGoingAway {
			t.Fatalf("refused conn read %v, want close 1001", err)
		}
	})
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestHostileHeadersAnswered: input that closed the connection with 1000
// and no answer (a message of 1,048,000 '[', 100,000 levels inside
// params, an id beyond uint64, a "Method" key) gets an error response
// (with the id when one can be read) and the connection stays open.
func TestHostileHeadersAnswered(t *testing.T) {
	t.Parallel()
	conntypes.Run(t, func(t *testing.T, ct conntypes.Type) {
		srv := newServer(t, nil)
		hc := connectOver(t, srv, ct)
		hc.initialize("hostile")
		deep := strings.Repeat("[", 100000) + strings.Repeat("]", 100000)
		for _, c := range []struct{ in, id, code string }{
			{strings.Repeat("[", 1048000), `null`, "-32600"},
			{`{"jsonrpc":"2.0","id":2,"method":"ping","params":` + deep + `}`, `2`, "-32600"},
			{`{"jsonrpc":"2.0","id":99999999999999999999,"method":"ping"}`, `null`, "-32600"},
			{`{"jsonrpc":"2.0","id":4,"Method":"ping"}`, `4`, "-32600"},
		} {
			hc.send(c.in)
			m, _ := hc.until("the answer to "+c.in[:min(len(c.in), 40)], func(m *msg) bool { return m.Error != nil })
			if string(m.ID) != c.id || !strings.Contains(m.Raw, `"code":`+c.code) {
				t.Errorf("answer to %.40s…: %s, want id %s and code %s", c.in, m.Raw, c.id, c.code)
			}
		}
		hc.mustCall(rpc.MethodPing, map[string]any{"channel": rpc.RootChannel}) // still open
	})
}

// TestPipelinedPings: 1000 pings pipelined by a client that reads only
// once 268 are sent, then everything: each is answered exactly once (a
// result, or Overloaded when 16 were in progress) and the connection
// stays open. The host stops reading while the protected queue (256) has
// no room for a response, instead of closing with 4008 at the 257th
// unread answer (it did, 4 runs of 4). Over the pipe only: the counts
// are a pipe of 8 messages'; a socket's buffers hold all 1000 answers.
func TestPipelinedPings(t *testing.T) {
	t.Parallel()
	srv := newServer(t, nil)
	a, z := transport.Pipe(8) // a socket's worth of unread answers, not thousands
	hc := &hostConn{t: t, mc: a, served: make(chan error, 1), nextID: 1}
	go func() { hc.served <- srv.ServeConn(context.Background(), z) }()
	t.Cleanup(func() { _ = a.Close(transport.CloseNormal, ""); <-hc.served })
	hc.initialize("pipeliner")
	const n, readAfter = 1000, 268 // past 256 responses queued + 8 in the pipe + 1 being written; short of where the host stops reading (274 sent)
	sent := make(chan error, 1)
	enough := make(chan struct{})
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), deadline)
		defer cancel()
		for i := range n {
			if i == readAfter {
				close(enough)
			}
			if err := hc.mc.WriteMessage(ctx, []byte(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"ping","params":{"channel":"ahp-root://"}}`, 1000+i))); err != nil {
				if i < readAfter {
					close(enough)
				}
				sent <- err
				return
			}
		}
		sent <- nil
	}()
	select {
	case <-enough:
	case err := <-sent: // a sender that stopped before
		t.Fatalf("sending: %v", err)
	}
	seen := map[string]int{}
	for len(seen) < n {
		m, err := hc.read()
		if err != nil {
			t.Fatalf("after %d answers: %v", len(seen), err)
		}
		if m.Method != "" {
			continue
		}
		if m.Error != nil && (m.Error.Code != rpc.CodeOverloaded || string(m.Error.Data) != `{"kind":"overloaded","retryable":true,"capacity":16}`) {
			t.Fatalf("ping answered with an error: %s", m.Raw)
		}
		if seen[string(m.ID)]++; seen[string(m.ID)] > 1 {
			t.Fatalf("ping %s answered twice", m.ID)
		}
	}
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	hc.mustCall(rpc.MethodPing, map[string]any{"channel": rpc.RootChannel}) // still open
}
