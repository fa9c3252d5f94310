package client_test

import (
	"encoding/json"
	"io"
	"strconv"
	"strings"
	"testing"

	"github.com/sidecar-dev/sidecar/client"
	"github.com/sidecar-dev/sidecar/transport"
)

// TestCopySnapshotMidStream: a channel/snapshot after the first (the host
// restarting a client that fell behind the terminal's journal) puts a
// notice where output was lost; before, the snapshot mid-stream dropped
// it silently (a channel/gap loses nothing: gap_test.go). After the
// snapshot's notice comes the terminal as it is now, which live output
// continues: the reset to a plain terminal, then the content's last
// part (the screen's redraw), without the scrollback part before it.
// The host here is scripted (ordinary delivery).
func TestCopySnapshotMidStream(t *testing.T) {
	ctx := testCtx(t)
	a, b := transport.Pipe(16)
	c := client.NewConn(a, client.Options{ClientID: "c1", Ordinary: true})
	defer c.Close()
	const ch = "ahp-terminal:/skip"
	state := `{"content":[{"type":"unclaimed","value":"old\r\n"}],"lifecycle":{"status":"running"}}`
	later := `{"rows":3,"claim":{"kind":"client","clientId":"c1"},"content":[{"type":"unclassified","value":"old\r\none\r\nl3\r\n"},{"type":"unclassified","value":"\u001b[2Kl4\r\n\u001b[2Kl5\r\n\u001b[2Kprompt$ \u001b[3;9H"}],"lifecycle":{"status":"running"}}`
	served := scriptedHost(t, b, ch, state, func(action func(int, string) string) []string {
		return []string{
			action(2, `{"type":"terminal/data","data":"one\r\n"}`),
			`{"jsonrpc":"2.0","method":"channel/snapshot","params":{"channel":"` + ch + `","snapshot":{"resource":"` + ch + `","state":` + later + `,"fromSeq":7}}}`,
			action(8, `{"type":"terminal/data","data":"eight\r\n"}`),
			action(9, `{"type":"terminal/exited","exitCode":4}`),
		}
	})
	if err := c.Initialize(ctx); err != nil {
		t.Fatal(err)
	}
	term, err := client.OpenTerminal(ctx, c, ch)
	if err != nil {
		t.Fatal(err)
	}
	claimed := 0
	term.OnClaim = func(err error) {
		if err == nil {
			claimed++
		}
	}
	var out strings.Builder
	code, err := term.Copy(ctx, &out, true)
	if claimed != 1 {
		t.Errorf("OnClaim(nil) called %d times, want once: the snapshot after the skip says c1 holds it", claimed)
	}
	if err != nil || code == nil || *code != 4 {
		t.Fatalf("Copy = %v, %v; want exit code 4", code, err)
	}
	notice := "\r\n[sidecar: output skipped: the terminal's journal no longer held it]\r\n"
	if want := "old\r\none\r\n" + client.TerminalReset + notice + "\x1b[2Kl4\r\n\x1b[2Kl5\r\n\x1b[2Kprompt$ \x1b[3;9H" + "eight\r\n"; out.String() != want {
		t.Errorf("output %q, want %q", out.String(), want)
	}
	_ = c.Close()
	_ = b.Close(transport.CloseNormal, "")
	<-served
}

// TestOnClaimPassedOn: a host-originated terminal/claimed naming this
// client (the holder left while we shared the terminal) calls OnClaim
// with nil; one naming another client does not.
func TestOnClaimPassedOn(t *testing.T) {
	ctx := testCtx(t)
	a, b := transport.Pipe(16)
	c := client.NewConn(a, client.Options{ClientID: "c1", Ordinary: true})
	defer c.Close()
	const ch = "ahp-terminal:/pass"
	state := `{"content":[],"lifecycle":{"status":"running"},"claim":{"kind":"client","clientId":"other"}}`
	served := scriptedHost(t, b, ch, state, func(action func(int, string) string) []string {
		return []string{
			action(2, `{"type":"terminal/claimed","claim":{"kind":"client","clientId":"third"}}`),
			action(3, `{"type":"terminal/claimed","claim":{"kind":"client","clientId":"c1"}}`),
			action(4, `{"type":"terminal/exited","exitCode":0}`),
		}
	})
	if err := c.Initialize(ctx); err != nil {
		t.Fatal(err)
	}
	term, err := client.OpenTerminal(ctx, c, ch)
	if err != nil {
		t.Fatal(err)
	}
	var calls []error
	term.OnClaim = func(err error) { calls = append(calls, err) }
	if _, err := term.Copy(ctx, io.Discard, true); err != nil {
		t.Fatal(err)
	}
	if len(calls) != 1 || calls[0] != nil {
		t.Fatalf("OnClaim calls %v, want one with nil", calls)
	}
	_ = c.Close()
	_ = b.Close(transport.CloseNormal, "")
	<-served
}

// TestCopyDisposedBy: a terminal/exited with the host's disposedBy
// extension (a disposeTerminal ended the program) is reported by
// DisposedBy once Copy returns, with the exit code of the signal; without
// it DisposedBy is "".
func TestCopyDisposedBy(t *testing.T) {
	for _, tc := range []struct {
		name, exited string
		wantCode     int
		wantBy       string
	}{
		{"disposed by another client", `{"type":"terminal/exited","signal":"SIGHUP","signalNumber":1,"disposedBy":"killer-7"}`, 129, "killer-7"},
		{"exited on its own", `{"type":"terminal/exited","exitCode":3}`, 3, ""},
		{"host without the extension", `{"type":"terminal/exited","signal":"SIGHUP","signalNumber":1}`, 129, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testCtx(t)
			a, b := transport.Pipe(16)
			c := client.NewConn(a, client.Options{ClientID: "c1", Ordinary: true})
			defer c.Close()
			const ch = "ahp-terminal:/disposed"
			state := `{"content":[],"lifecycle":{"status":"running"},"claim":{"kind":"client","clientId":"c1"}}`
			served := scriptedHost(t, b, ch, state, func(action func(int, string) string) []string {
				return []string{action(2, tc.exited)}
			})
			if err := c.Initialize(ctx); err != nil {
				t.Fatal(err)
			}
			term, err := client.OpenTerminal(ctx, c, ch)
			if err != nil {
				t.Fatal(err)
			}
			if by := term.DisposedBy(); by != "" {
				t.Errorf("DisposedBy before the exit = %q, want \"\"", by)
			}
			code, err := term.Copy(ctx, io.Discard, true)
			if err != nil || code == nil || *code != tc.wantCode {
				t.Fatalf("Copy = %v, %v; want exit code %d", code, err, tc.wantCode)
			}
			if by := term.DisposedBy(); by != tc.wantBy {
				t.Errorf("DisposedBy = %q, want %q", by, tc.wantBy)
			}
			_ = c.Close()
			_ = b.Close(transport.CloseNormal, "")
			<-served
		})
	}
}

// scriptedHost serves the Pipe end b as a host: it answers initialize, and
// answers subscribe with a snapshot of state (ordinary delivery) followed
// by the messages script returns. It returns when b is closed.
func scriptedHost(t *testing.T, b transport.MessageConn, ch, state string, script func(action func(seq int, a string) string) []string) (served chan struct{}) {
	ctx := testCtx(t)
	send := func(s string) {
		t.Helper()
		if err := b.WriteMessage(ctx, []byte(s)); err != nil {
			t.Error(err)
		}
	}
	action := func(seq int, a string) string {
		return `{"jsonrpc":"2.0","method":"action","params":{"channel":"` + ch + `","action":` + a + `,"serverSeq":` + strconv.Itoa(seq) + `}}`
	}
	served = make(chan struct{})
	go func() {
		defer close(served)
		for {
			raw, err := b.ReadMessage(ctx)
			if err != nil {
				return
			}
			var req struct {
				ID     *json.RawMessage `json:"id"`
				Method string           `json:"method"`
			}
			_ = json.Unmarshal(raw, &req)
			switch req.Method {
			case "initialize":
				send(`{"jsonrpc":"2.0","id":` + string(*req.ID) + `,"result":{"protocolVersion":"0.5.0","serverSeq":0,"snapshots":[]}}`)
			case "subscribe":
				send(`{"jsonrpc":"2.0","id":` + string(*req.ID) + `,"result":{"snapshot":{"resource":"` + ch + `","state":` + state + `,"fromSeq":1}}}`)
				for _, m := range script(action) {
					send(m)
				}
			}
		}
	}()
	return served
}
