package client_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.uber.org/goleak"

	"github.com/sidecar-dev/sidecar/client"
	"github.com/sidecar-dev/sidecar/config"
	"github.com/sidecar-dev/sidecar/delivery"
	"github.com/sidecar-dev/sidecar/host"
	"github.com/sidecar-dev/sidecar/rpc"
	"github.com/sidecar-dev/sidecar/transport"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const testDeadline = 30 * time.Second

// pair is a client.Conn talking to a host.Server over an in-memory Pipe.
type pair struct {
	srv *host.Server
	c   *client.Conn
}

func newPair(t *testing.T, opts client.Options, tweak func(*config.Config)) *pair {
	t.Helper()
	cfg := config.Default()
	cfg.Terminal.Shell = "/bin/sh"
	cfg.Terminal.Login = false
	if tweak != nil {
		tweak(cfg)
	}
	a, b := transport.Pipe(64)
	return newPairOver(t, a, b, opts, cfg)
}

// newPairOver is newPair over a given transport pair (a the client's end,
// b the host's) and config.
func newPairOver(t *testing.T, a, b transport.MessageConn, opts client.Options, cfg *config.Config) *pair {
	t.Helper()
	srv, err := host.New(cfg, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.ServeConn(context.Background(), b) }()
	c := client.NewConn(a, opts)
	t.Cleanup(func() {
		_ = c.Close()
		select {
		case <-served:
		case <-time.After(testDeadline):
			t.Error("ServeConn did not return after the client closed")
		}
		ctx, cancel := context.WithTimeout(context.Background(), testDeadline)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	})
	return &pair{srv: srv, c: c}
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testDeadline)
	t.Cleanup(cancel)
	return ctx
}

func TestInitializeAndCall(t *testing.T) {
	p := newPair(t, client.Options{ClientID: "c1", ClientName: "test"}, nil)
	ctx := testCtx(t)
	// ping works before initialize.
	if err := p.c.Ping(ctx); err != nil {
		t.Fatalf("Ping before initialize: %v", err)
	}
	// Another request before initialize is a JSON-RPC error.
	err := p.c.Call(ctx, rpc.MethodSubscribe, rpc.SubscribeParams{Channel: rpc.RootChannel}, nil)
	var re *rpc.Error
	if !errors.As(err, &re) || re.Code != rpc.CodeNotInitialized {
		t.Fatalf("subscribe before initialize = %v, want -32600", err)
	}
	if err := p.c.Initialize(ctx); err != nil {
		t.Fatal(err)
	}
	res := p.c.Initialized()
	if res.ProtocolVersion != "0.5.0" || res.ServerInfo == nil || res.ServerInfo.Name != "sidecar" || res.Snapshots == nil {
		t.Fatalf("Initialized() = %+v", res)
	}
	if p.c.ClientID() != "c1" {
		t.Fatalf("ClientID %q", p.c.ClientID())
	}
	// Call decodes results and returns *rpc.Error for error responses.
	var sub rpc.SubscribeResult
	if err := p.c.Call(ctx, rpc.MethodSubscribe, rpc.SubscribeParams{Channel: rpc.RootChannel}, &sub); err != nil {
		t.Fatal(err)
	}
	if sub.Snapshot == nil || sub.Snapshot.Resource != rpc.RootChannel {
		t.Fatalf("subscribe result %+v", sub)
	}
	err = p.c.Call(ctx, rpc.MethodCreateTerminal, map[string]any{"channel": "bad"}, nil)
	if !errors.As(err, &re) || re.Code != rpc.CodeInvalidParams {
		t.Fatalf("bad createTerminal = %v, want -32602", err)
	}
	st, err := p.c.RootState(ctx)
	if err != nil || st.Terminals == nil || st.Agents == nil {
		t.Fatalf("RootState = %+v, %v", st, err)
	}
}

func TestInitializeVersionMismatch(t *testing.T) {
	old := client.ProtocolVersions
	client.ProtocolVersions = []string{"9.9.9"}
	defer func() { client.ProtocolVersions = old }()
	p := newPair(t, client.Options{ClientID: "c1"}, nil)
	err := p.c.Initialize(testCtx(t))
	if err == nil || err.Error() != "protocol version mismatch: this client speaks AHP 9.9.9, the server supports ^0.5.0" {
		t.Fatalf("Initialize = %v", err)
	}
	select {
	case <-p.c.Done():
	case <-time.After(testDeadline):
		t.Fatal("connection not closed after -32005")
	}
	if !strings.Contains(p.c.Err().Error(), "code 4005") {
		t.Fatalf("Err() = %v, want the 4005 close", p.c.Err())
	}
}

func createTerminal(t *testing.T, c *client.Conn, ch string, argv ...string) {
	t.Helper()
	if err := c.Call(testCtx(t), rpc.MethodCreateTerminal, map[string]any{"channel": ch, "command": argv}, nil); err != nil {
		t.Fatalf("createTerminal %v: %v", argv, err)
	}
}

func TestOpenTerminalCopy(t *testing.T) {
	for _, ordinary := range []bool{false, true} {
		t.Run(fmt.Sprint("ordinary=", ordinary), func(t *testing.T) {
			p := newPair(t, client.Options{ClientID: "c1", Ordinary: ordinary}, nil)
			ctx := testCtx(t)
			if err := p.c.Initialize(ctx); err != nil {
				t.Fatal(err)
			}
			const ch = "ahp-terminal:/copy"
			createTerminal(t, p.c, ch, "sh", "-c", `printf 'one\ntwo <&> "q"\n'; printf tail; exit 3`)
			term, err := client.OpenTerminal(ctx, p.c, ch)
			if err != nil {
				t.Fatal(err)
			}
			if sub := term.Subscription(); sub.Windowed == ordinary {
				t.Fatalf("Windowed = %v with Ordinary %v", sub.Windowed, ordinary)
			}
			var out strings.Builder
			code, err := term.Copy(ctx, &out, true)
			if err != nil {
				t.Fatal(err)
			}
			if code == nil || *code != 3 {
				t.Fatalf("exit code %v, want 3", code)
			}
			// The PTY turns \n into \r\n (onlcr).
			if want := "one\r\ntwo <&> \"q\"\r\ntail"; out.String() != want {
				t.Fatalf("output %q, want %q", out.String(), want)
			}
		})
	}
}

// countWriter counts bytes and checks they are all 'x'.
type countWriter struct {
	n   atomic.Int64
	bad atomic.Int64
}

func (w *countWriter) Write(p []byte) (int, error) {
	for _, b := range p {
		if b != 'x' {
			w.bad.Add(1)
		}
	}
	w.n.Add(int64(len(p)))
	return len(p), nil
}

func TestWindowedCreditsFlow(t *testing.T) {
	small := delivery.Limits{WindowBytes: 4096, MaximumFrameBytes: 1024}
	p := newPair(t, client.Options{ClientID: "c1", Receive: small}, nil)
	ctx := testCtx(t)
	if err := p.c.Initialize(ctx); err != nil {
		t.Fatal(err)
	}
	const ch = "ahp-terminal:/flood"
	const total = 300_000 // ~150 windows of output
	createTerminal(t, p.c, ch, "sh", "-c", fmt.Sprintf("head -c %d /dev/zero | tr '\\0' x", total))
	term, err := client.OpenTerminal(ctx, p.c, ch)
	if err != nil {
		t.Fatal(err)
	}
	sub := term.Subscription()
	if !sub.Windowed || sub.ClientReceive != small || sub.HostReceive != small {
		t.Fatalf("negotiated windowed %v clientReceive %+v hostReceive %+v", sub.Windowed, sub.ClientReceive, sub.HostReceive)
	}
	var w countWriter
	code, err := term.Copy(ctx, &w, true)
	if err != nil {
		t.Fatal(err)
	}
	if code == nil || *code != 0 {
		t.Fatalf("exit %v", code)
	}
	if w.n.Load() != total || w.bad.Load() != 0 {
		t.Fatalf("received %d bytes (%d not 'x'), want %d", w.n.Load(), w.bad.Load(), total)
	}
}

// readUntil consumes terminal output from sub, releasing every message,
// until the output seen so far contains want; it returns the output.
func readUntil(t *testing.T, ctx context.Context, sub *client.Subscription, out *strings.Builder, want string) {
	t.Helper()
	for !strings.Contains(out.String(), want) {
		m, err := sub.Next(ctx)
		if err != nil {
			t.Fatalf("waiting for %q (have %q): %v", want, out.String(), err)
		}
		switch m.Method {
		case rpc.MethodChannelSnapshot:
			var sp rpc.ChannelSnapshotParams
			_ = json.Unmarshal(m.Params, &sp)
			var st rpc.TerminalState
			_ = json.Unmarshal(sp.Snapshot.State, &st)
			for _, c := range st.Content {
				out.WriteString(c.Value)
			}
		case rpc.MethodAction:
			var env rpc.ActionEnvelope
			_ = json.Unmarshal(m.Params, &env)
			var a struct {
				Type string `json:"type"`
				Data string `json:"data"`
			}
			_ = json.Unmarshal(env.Action, &a)
			if a.Type == rpc.ActionTerminalData {
				out.WriteString(a.Data)
			}
			if env.RejectionReason != "" {
				t.Fatalf("action rejected: %s", m.Raw)
			}
		}
		m.Release()
	}
}

func TestLargeInputThroughSmallHostWindow(t *testing.T) {
	small := delivery.Limits{WindowBytes: 4096, MaximumFrameBytes: 1024}
	p := newPair(t, client.Options{ClientID: "c1", Receive: small}, nil)
	ctx := testCtx(t)
	if err := p.c.Initialize(ctx); err != nil {
		t.Fatal(err)
	}
	const ch = "ahp-terminal:/in"
	const n = 100_000
	createTerminal(t, p.c, ch, "sh", "-c", fmt.Sprintf("stty raw -echo; echo READY; head -c %d | sha256sum; echo DONE", n))
	term, err := client.OpenTerminal(ctx, p.c, ch)
	if err != nil {
		t.Fatal(err)
	}
	sub := term.Subscription()
	if sub.HostReceive != small {
		t.Fatalf("hostReceive %+v", sub.HostReceive)
	}
	var out strings.Builder
	readUntil(t, ctx, sub, &out, "READY")
	// Printable ASCII including the characters JSON escapes, so fragments
	// split inside escapes are exercised too.
	alphabet := []byte(`abcdefghijklmnopqrstuvwxyz"\0123456789 {}[]:,<&>`)
	input := make([]byte, n)
	for i := range input {
		input[i] = alphabet[(i*7+i/13)%len(alphabet)]
	}
	// One terminal/input action of ~100 KB: far above hostReceive's 1024-byte
	// frames and 4096-byte window.
	if err := term.Input(ctx, input); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(input)
	readUntil(t, ctx, sub, &out, "DONE")
	if !strings.Contains(out.String(), hex.EncodeToString(sum[:])) {
		t.Fatalf("terminal output %q does not contain the input's sha256 %x", out.String(), sum)
	}
	sent, consumed, l := sub.Window()
	if l != small || sent <= delivery.UTF16Bytes(2*n) || consumed != sent {
		t.Fatalf("our window: sent %d consumed %d limits %+v; want > %d sent, all of it credited", sent, consumed, l, 2*n)
	}
}

func TestServerShutdownEndsConn(t *testing.T) {
	p := newPair(t, client.Options{ClientID: "c1"}, nil)
	ctx := testCtx(t)
	if err := p.c.Initialize(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.c.Done():
	case <-time.After(testDeadline):
		t.Fatal("client not closed by server shutdown")
	}
	if got := p.c.Err(); got == nil || got.Error() != "the server is shutting down" {
		t.Fatalf("Err() = %v", got)
	}
	if err := p.c.Ping(ctx); err == nil {
		t.Fatal("Ping after shutdown succeeded")
	}
}

// TestYesInterruptSmallWindow: `yes` through a 16 KiB window with 8 KiB
// frames, then Ctrl-C as input. A 4 KiB PTY read of "y\r\n" is a message
// whose channel/frame fragments add up to more than the window (the
// escapes double once more in a fragment's data): the host must not stall
// on it, and the interrupt must end the program within a bound.
func TestYesInterruptSmallWindow(t *testing.T) {
	small := delivery.Limits{WindowBytes: 16384, MaximumFrameBytes: 8192}
	p := newPair(t, client.Options{ClientID: "c1", Receive: small}, nil)
	ctx := testCtx(t)
	if err := p.c.Initialize(ctx); err != nil {
		t.Fatal(err)
	}
	const ch = "ahp-terminal:/yes"
	createTerminal(t, p.c, ch, "yes")
	term, err := client.OpenTerminal(ctx, p.c, ch)
	if err != nil {
		t.Fatal(err)
	}
	if sub := term.Subscription(); sub.ClientReceive != small {
		t.Fatalf("clientReceive %+v, want %+v", sub.ClientReceive, small)
	}
	w := &signalWriter{after: 256 << 10, reached: make(chan struct{})}
	type result struct {
		code *int
		err  error
	}
	done := make(chan result, 1)
	go func() {
		code, err := term.Copy(ctx, w, true)
		done <- result{code, err}
	}()
	select {
	case <-w.reached:
	case r := <-done:
		t.Fatalf("Copy ended early: %v %v", r.code, r.err)
	case <-time.After(10 * time.Second):
		t.Fatalf("only %d bytes of yes in 10s", w.n.Load())
	}
	if err := term.Input(ctx, []byte{3}); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatal(r.err)
		}
		if r.code == nil || *r.code != 128+2 {
			t.Fatalf("exit %v, want 130 (SIGINT)", r.code)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("yes not ended within 10s of Ctrl-C (%d bytes copied)", w.n.Load())
	}
}

// signalWriter counts bytes and closes reached once after bytes were written.
type signalWriter struct {
	n       atomic.Int64
	after   int64
	reached chan struct{}
	once    sync.Once
}

func (w *signalWriter) Write(p []byte) (int, error) {
	if w.n.Add(int64(len(p))) >= w.after {
		w.once.Do(func() { close(w.reached) })
	}
	return len(p), nil
}
