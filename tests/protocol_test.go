package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// TestProtocolBeforeInitialize: ping is answered before initialize with
// result null; any other request gets an error.
func TestProtocolBeforeInitialize(t *testing.T) {
	t.Parallel()
	s := startServer(t, "")
	rc := s.dialRaw(t)
	m := rc.call("ping", map[string]any{"channel": "ahp-root://"})
	if m.Error != nil || string(m.Result) != "null" || !bytes.Contains(m.raw, []byte(`"result":null`)) {
		t.Errorf("ping before initialize = %s, want result null", m.raw)
	}
	m = rc.call("subscribe", map[string]any{"channel": "ahp-root://"})
	if m.Error == nil {
		t.Errorf("subscribe before initialize = %s, want an error", m.raw)
	} else if m.Error.Code != -32600 {
		t.Errorf("subscribe before initialize: code %d, want -32600 (%s)", m.Error.Code, m.raw)
	}
	// The connection still works: initialize now succeeds.
	rc.initialize("late-init")
}

// TestProtocolVersionMismatch: no common version → -32005 with
// data.supportedVersions, then the server closes the connection.
func TestProtocolVersionMismatch(t *testing.T) {
	t.Parallel()
	s := startServer(t, "")
	rc := s.dialRaw(t)
	m := rc.call("initialize", map[string]any{"channel": "ahp-root://", "protocolVersions": []string{"9.9.9"}, "clientId": "old"})
	if m.Error == nil || m.Error.Code != -32005 {
		t.Fatalf("initialize 9.9.9 = %s, want error -32005", m.raw)
	}
	var data struct {
		SupportedVersions []string `json:"supportedVersions"`
	}
	if err := json.Unmarshal(m.Error.Data, &data); err != nil || len(data.SupportedVersions) == 0 {
		t.Errorf("error data = %s, want supportedVersions", m.Error.Data)
	}
	extra, err := rc.waitClosed(10 * time.Second)
	if len(extra) > 0 {
		t.Errorf("messages after the -32005 error: %q", extra)
	}
	// The host's own close code for "no common protocol version".
	if code := websocket.CloseStatus(err); code != 4005 {
		t.Errorf("connection ended with %v (close code %d), want close code 4005", err, code)
	}
}

// TestProtocolErrorsAndShapes: JSON-RPC errors for malformed input, and
// array-typed fields as [] (never null).
func TestProtocolErrorsAndShapes(t *testing.T) {
	t.Parallel()
	s := startServer(t, "")
	rc := s.dialRaw(t)
	init := rc.initialize("shapes-client")
	if !bytes.Contains(init.raw, []byte(`"snapshots":[]`)) {
		t.Errorf("initialize result without initialSubscriptions: %s, want \"snapshots\":[]", init.raw)
	}
	var ir struct {
		ProtocolVersion string `json:"protocolVersion"`
	}
	_ = json.Unmarshal(init.Result, &ir)
	if ir.ProtocolVersion != "0.5.0" {
		t.Errorf("protocolVersion = %q, want 0.5.0", ir.ProtocolVersion)
	}

	t.Run("root snapshot arrays", func(t *testing.T) {
		m := rc.mustCall("subscribe", map[string]any{"channel": "ahp-root://"})
		for _, want := range []string{`"agents":[]`, `"terminals":[]`} {
			if !bytes.Contains(m.raw, []byte(want)) {
				t.Errorf("root snapshot %s: want %s", m.raw, want)
			}
		}
		rc.sendJSON(map[string]any{"jsonrpc": "2.0", "method": "unsubscribe", "params": map[string]any{"channel": "ahp-root://"}})
	})
	t.Run("parse error", func(t *testing.T) {
		rc.send(`{"jsonrpc":"2.0","id":77,"method":"ping",`)
		raw, ok := rc.next(waitTimeout)
		if !ok {
			t.Fatal("no answer to malformed JSON")
		}
		m := decode(t, raw)
		if m.Error == nil || m.Error.Code != -32700 || string(m.ID) != "null" {
			t.Errorf("malformed JSON answered %s, want error -32700 with id null", raw)
		}
	})
	t.Run("method not found", func(t *testing.T) {
		m := rc.call("noSuchMethod", map[string]any{"channel": "ahp-root://"})
		if m.Error == nil || m.Error.Code != -32601 {
			t.Errorf("unknown method answered %s, want -32601", m.raw)
		}
	})
	t.Run("invalid params", func(t *testing.T) {
		m := rc.call("subscribe", map[string]any{"channel": 42})
		if m.Error == nil || m.Error.Code != -32602 || !strings.Contains(m.Error.Message, "channel") {
			t.Errorf("subscribe channel=42 answered %s, want -32602 naming \"channel\"", m.raw)
		}
	})
	t.Run("not found", func(t *testing.T) {
		m := rc.call("subscribe", map[string]any{"channel": "ahp-terminal:/nope"})
		if m.Error == nil || m.Error.Code != -32008 {
			t.Errorf("subscribe ahp-terminal:/nope answered %s, want -32008", m.raw)
		}
	})
	t.Run("dispatchAction echoes", func(t *testing.T) {
		uri := "ahp-terminal:/echo-1"
		rc.mustCall("createTerminal", map[string]any{"channel": uri, "command": []string{"sh", "-c", "read x; echo in-$x"}})
		sub := rc.mustCall("subscribe", map[string]any{"channel": uri})
		if !bytes.Contains(sub.raw, []byte(`"content":[`)) {
			t.Errorf("terminal snapshot %s: content must be an array", sub.raw)
		}
		rc.sendJSON(map[string]any{"jsonrpc": "2.0", "method": "dispatchAction", "params": map[string]any{
			"channel": uri, "clientSeq": 1, "action": map[string]any{"type": "terminal/data", "data": "forged"}}})
		rej := rc.waitNotification("echo of terminal/data", func(m message) bool {
			return envelope(t, m).Action.Type == "terminal/data" && envelope(t, m).Origin != nil
		})
		e := envelope(t, rej)
		if e.RejectionReason == "" || e.Origin.ClientID != "shapes-client" || e.Origin.ClientSeq != 1 {
			t.Errorf("client terminal/data echoed as %s, want rejectionReason and origin {shapes-client 1}", rej.raw)
		}
		rc.sendJSON(map[string]any{"jsonrpc": "2.0", "method": "dispatchAction", "params": map[string]any{
			"channel": uri, "clientSeq": 2, "action": map[string]any{"type": "terminal/input", "data": "yo\r"}}})
		ack := rc.waitNotification("echo of terminal/input", func(m message) bool { return envelope(t, m).Action.Type == "terminal/input" })
		e = envelope(t, ack)
		if e.RejectionReason != "" || e.Origin == nil || e.Origin.ClientID != "shapes-client" || e.Origin.ClientSeq != 2 || e.Channel != uri || e.ServerSeq == 0 {
			t.Errorf("terminal/input echoed as %s, want origin {shapes-client 2}, no rejection", ack.raw)
		}
		var out strings.Builder
		rc.waitNotification("program output", func(m message) bool {
			out.WriteString(actionData(t, m))
			return strings.Contains(out.String(), "in-yo\r\n")
		})
		rc.mustCall("disposeTerminal", map[string]any{"channel": uri})
	})
}

type actionEnvelope struct {
	Channel string `json:"channel"`
	Action  struct {
		Type     string `json:"type"`
		Data     string `json:"data"`
		ExitCode *int   `json:"exitCode"`
		Signal   string `json:"signal"`
	} `json:"action"`
	ServerSeq uint64 `json:"serverSeq"`
	Origin    *struct {
		ClientID  string `json:"clientId"`
		ClientSeq uint64 `json:"clientSeq"`
	} `json:"origin"`
	RejectionReason string `json:"rejectionReason"`
}

func envelope(t *testing.T, m message) actionEnvelope {
	t.Helper()
	var e actionEnvelope
	if m.Method == "action" {
		if err := json.Unmarshal(m.Params, &e); err != nil {
			t.Fatalf("bad action envelope %s: %v", m.raw, err)
		}
	}
	return e
}

// TestProtocolMalformedTCPBytes: a client that chose the subprotocol
// ahp-tcp-data (docs/protocol.md) and sends a binary message that is no
// such payload gets close 1002 naming it, and the host logs a warning;
// other clients are unaffected.
func TestProtocolMalformedTCPBytes(t *testing.T) {
	t.Parallel()
	s := startServer(t, "")
	other := s.dialRaw(t)
	other.initialize("bystander")
	rc := s.dialRawOffering(t, "ahp-tcp-data")
	if got := rc.c.Subprotocol(); got != "ahp-tcp-data" {
		t.Fatalf("subprotocol %q chosen, want ahp-tcp-data", got)
	}
	rc.initialize("bad-bytes")
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := rc.c.Write(ctx, websocket.MessageBinary, []byte{1, 2, 3}); err != nil {
		t.Fatal(err)
	}
	_, err := rc.waitClosed(waitTimeout)
	if code := websocket.CloseStatus(err); code != websocket.StatusProtocolError || !strings.Contains(err.Error(), "ahp-tcp-data") {
		t.Errorf("malformed binary message: connection ended with %v (code %d), want 1002 naming ahp-tcp-data", err, code)
	}
	if _, ok := s.p.stderr.waitMatch(waitTimeout, func(log string) bool {
		return strings.Contains(log, `"@message":"bad message, closing"`) && strings.Contains(log, `"code":1002`)
	}); !ok {
		t.Errorf("no \"bad message, closing\" log line with code 1002:\n%s", tail(s.p.stderr.String(), 2000))
	}
	if m := other.call("ping", map[string]any{"channel": "ahp-root://"}); m.Error != nil {
		t.Errorf("bystander ping: %s", m.raw)
	}
}

// TestProtocolOversizedMessage: a text frame over the read limit closes
// that connection with 1009; other clients are unaffected.
func TestProtocolOversizedMessage(t *testing.T) {
	t.Parallel()
	s := startServer(t, "")
	other := s.dialRaw(t)
	other.initialize("bystander")
	rc := s.dialRaw(t)
	rc.initialize("big-sender")
	big := `{"jsonrpc":"2.0","id":9,"method":"ping","params":{"channel":"ahp-root://","pad":"` + strings.Repeat("x", 2<<20) + `"}}`
	wrote := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		wrote <- rc.c.Write(ctx, websocket.MessageText, []byte(big))
	}()
	_, err := rc.waitClosed(waitTimeout)
	<-wrote
	if code := websocket.CloseStatus(err); code != websocket.StatusMessageTooBig {
		t.Errorf("oversized message: connection ended with %v (code %d), want 1009", err, code)
	}
	// The log names the limit the message passed: the /ahp read limit in
	// UTF-8 bytes (1 MiB with the default 512 KiB TCP frames), not
	// delivery.max_message_bytes (UTF-16 bytes of a reassembled message).
	if _, ok := s.p.stderr.waitMatch(waitTimeout, func(log string) bool {
		return strings.Contains(log, `"@message":"message too big, closing"`) && strings.Contains(log, `"limit_utf8_bytes":1048576`)
	}); !ok {
		t.Errorf("no \"message too big\" log line with limit_utf8_bytes 1048576:\n%s", tail(s.p.stderr.String(), 2000))
	}
	// The bystander and a new connection still work.
	if m := other.call("ping", map[string]any{"channel": "ahp-root://"}); m.Error != nil {
		t.Errorf("bystander ping: %s", m.raw)
	}
	fresh := s.dialRaw(t)
	fresh.initialize("after-big")
	if m := fresh.call("ping", map[string]any{"channel": "ahp-root://"}); m.Error != nil || string(m.Result) != "null" {
		t.Errorf("new connection ping: %s", m.raw)
	}
}

// TestRootCatalogue: root/terminalsChanged carries the full list on create,
// exit and dispose (an empty list as []), with the creator's claim; and
// the errors of duplicate create, unknown dispose and a second initialize.
func TestRootCatalogue(t *testing.T) {
	t.Parallel()
	s := startServer(t, "")
	rc := s.dialRaw(t)
	rc.initialize("catalogue-client")
	rc.mustCall("subscribe", map[string]any{"channel": "ahp-root://"})
	uri := "ahp-terminal:/cat-1"
	type info struct {
		Resource string `json:"resource"`
		Title    string `json:"title"`
		Claim    struct {
			Kind     string `json:"kind"`
			ClientID string `json:"clientId"`
		} `json:"claim"`
		ExitCode *int `json:"exitCode"`
	}
	terminals := func(m message) ([]info, bool) {
		var p struct {
			Action struct {
				Type      string `json:"type"`
				Terminals []info `json:"terminals"`
			} `json:"action"`
		}
		if m.Method != "action" || m.channelOf() != "ahp-root://" {
			return nil, false
		}
		if err := json.Unmarshal(m.Params, &p); err != nil || p.Action.Type != "root/terminalsChanged" {
			return nil, false
		}
		return p.Action.Terminals, true
	}
	// The catalogue action may arrive before or after the response.
	var early *message
	resp := rc.response(rc.request("createTerminal", map[string]any{"channel": uri, "name": "cat-title", "command": []string{"sh", "-c", "read x; exit 4"}}), func(m message) {
		if _, ok := terminals(m); ok && early == nil {
			early = &m
		}
	})
	if resp.Error != nil {
		t.Fatalf("createTerminal: %s", resp.raw)
	}
	var m message
	if early != nil {
		m = *early
	} else {
		m = rc.waitNotification("terminalsChanged on create", func(m message) bool { _, ok := terminals(m); return ok })
	}
	list, _ := terminals(m)
	if len(list) != 1 || list[0].Resource != uri || list[0].Title != "cat-title" || list[0].Claim.Kind != "client" || list[0].Claim.ClientID != "catalogue-client" || list[0].ExitCode != nil {
		t.Errorf("terminalsChanged after create: %s", m.raw)
	}

	if d := rc.call("createTerminal", map[string]any{"channel": uri, "command": []string{"true"}}); d.Error == nil || d.Error.Code != -32010 {
		t.Errorf("duplicate createTerminal answered %s, want -32010", d.raw)
	}
	if d := rc.call("disposeTerminal", map[string]any{"channel": "ahp-terminal:/never"}); d.Error == nil || d.Error.Code != -32008 {
		t.Errorf("disposeTerminal of an unknown terminal answered %s, want -32008", d.raw)
	}
	if d := rc.call("initialize", map[string]any{"channel": "ahp-root://", "protocolVersions": []string{"0.5.0"}, "clientId": "again"}); d.Error == nil {
		t.Errorf("second initialize answered %s, want an error", d.raw)
	}

	// Input ends the program with status 4: the catalogue shows it.
	rc.mustCall("subscribe", map[string]any{"channel": uri})
	rc.sendJSON(map[string]any{"jsonrpc": "2.0", "method": "dispatchAction", "params": map[string]any{
		"channel": uri, "clientSeq": 1, "action": map[string]any{"type": "terminal/input", "data": "\r"}}})
	m = rc.waitNotification("terminalsChanged on exit", func(m message) bool {
		l, ok := terminals(m)
		return ok && len(l) == 1 && l[0].ExitCode != nil
	})
	if list, _ := terminals(m); *list[0].ExitCode != 4 {
		t.Errorf("terminalsChanged after exit: %s, want exitCode 4", m.raw)
	}
	// Here too the catalogue action may arrive before the response.
	disposed := func(m message) bool {
		l, ok := terminals(m)
		return ok && len(l) == 0
	}
	early = nil
	resp = rc.response(rc.request("disposeTerminal", map[string]any{"channel": uri}), func(m message) {
		if disposed(m) && early == nil {
			early = &m
		}
	})
	if resp.Error != nil {
		t.Fatalf("disposeTerminal: %s", resp.raw)
	}
	if early != nil {
		m = *early
	} else {
		m = rc.waitNotification("terminalsChanged on dispose", disposed)
	}
	if !bytes.Contains(m.raw, []byte(`"terminals":[]`)) {
		t.Errorf("terminalsChanged after dispose: %s, want \"terminals\":[]", m.raw)
	}
	// The disposed terminal is gone.
	if d := rc.call("subscribe", map[string]any{"channel": uri}); d.Error == nil || d.Error.Code != -32008 {
		t.Errorf("subscribe to a disposed terminal answered %s, want -32008", d.raw)
	}
}

// TestSnapshotKeepsFirstLine: a late subscriber's snapshot holds the
// terminal's whole output while it is far below terminal.scrollback_bytes
// (1 MiB): nothing was trimmed, so nothing may be missing, not even the
// first line.
func TestSnapshotKeepsFirstLine(t *testing.T) {
	t.Parallel()
	s := startServer(t, "")
	ra := s.dialRaw(t)
	ra.initialize("writer")
	uri := "ahp-terminal:/lines-1"
	ra.mustCall("createTerminal", map[string]any{"channel": uri, "command": []string{"sh", "-c", "for i in $(seq 1 50); do echo line-$i; done; read x"}})
	sub := ra.mustCall("subscribe", map[string]any{"channel": uri})
	var want strings.Builder
	for i := 1; i <= 50; i++ {
		fmt.Fprintf(&want, "line-%d\r\n", i)
	}
	var out strings.Builder
	out.WriteString(snapshotContent(t, sub.Result))
	ra.waitNotification("all 50 lines", func(m message) bool {
		out.WriteString(actionData(t, m))
		return strings.Contains(out.String(), "line-50\r\n")
	})
	if out.String() != want.String() {
		t.Fatalf("live output %q, want %q", out.String(), want.String())
	}
	// A second client subscribes now: ordinary (snapshot in the result).
	rb := s.dialRaw(t)
	rb.initialize("late-reader")
	m := rb.mustCall("subscribe", map[string]any{"channel": uri})
	if got := snapshotContent(t, m.Result); got != want.String() {
		t.Errorf("BUG: late subscriber's snapshot content is not the terminal's output (%d bytes, far below scrollback_bytes): %s", want.Len(), diffAt(got, want.String()))
	}
	ra.mustCall("disposeTerminal", map[string]any{"channel": uri})
}
