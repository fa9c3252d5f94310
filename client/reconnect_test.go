package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sidecar-dev/sidecar/client"
	"github.com/sidecar-dev/sidecar/internal/syncbuf"
	"github.com/sidecar-dev/sidecar/rpc"
	"github.com/sidecar-dev/sidecar/transport"
)

// errCut is what both ends of a cut link read: no close code, as when a
// network path dies (transport.CloseStatus is -1).
var errCut = errors.New("cut: connection reset")

// cutLink is an in-memory transport whose two ends can be cut at once:
// from then on every read and write fails with errCut on both, and
// neither peer sees a close from the other (a lost transport).
type cutLink struct {
	once sync.Once
	cut  chan struct{}
}

func (l *cutLink) Cut() { l.once.Do(func() { close(l.cut) }) }

// newCutLink returns the client's and the server's ends.
func newCutLink() (*cutLink, transport.MessageConn, transport.MessageConn) {
	l := &cutLink{cut: make(chan struct{})}
	a, b := transport.Pipe(64)
	return l, &cutEnd{MessageConn: a, l: l}, &cutEnd{MessageConn: b, l: l, swallow: true}
}

// cutEnd is one end of a cutLink. The server's end swallows what it
// writes after the cut, as a socket's buffer takes writes until the
// reset arrives, so its reader is the first to see the loss. (A host
// whose writer fails first closes "for cause" and keeps no state: see
// the report of this test's branch.)
type cutEnd struct {
	transport.MessageConn
	l       *cutLink
	swallow bool
}

func (e *cutEnd) isCut() bool {
	select {
	case <-e.l.cut:
		return true
	default:
		return false
	}
}

func (e *cutEnd) ReadMessage(ctx context.Context) ([]byte, error) {
	if e.isCut() {
		return nil, errCut
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		select {
		case <-e.l.cut:
			cancel()
		case <-stop:
		}
	}()
	b, err := e.MessageConn.ReadMessage(ctx)
	if e.isCut() {
		return nil, errCut
	}
	return b, err
}

func (e *cutEnd) WriteMessage(ctx context.Context, text []byte) error {
	if e.isCut() {
		if e.swallow {
			return nil
		}
		return errCut
	}
	return e.MessageConn.WriteMessage(ctx, text)
}

// Close after a cut frees the pipe without the peer reading a close code
// first (it reads errCut).
func (e *cutEnd) Close(code transport.CloseCode, reason string) error {
	return e.MessageConn.Close(code, reason)
}

// links is a Dialer whose links the test can cut, and that hands each
// new server end to serve (a scripted host, or host.ServeConn).
type links struct {
	mu     sync.Mutex
	all    []*cutLink
	serve  func(transport.MessageConn)
	refuse error // when set, dialing fails with it
}

func (d *links) Dial(ctx context.Context) (transport.MessageConn, error) {
	d.mu.Lock()
	refuse := d.refuse
	d.mu.Unlock()
	if refuse != nil {
		return nil, refuse
	}
	l, a, b := newCutLink()
	d.mu.Lock()
	d.all = append(d.all, l)
	d.mu.Unlock()
	go d.serve(b)
	return a, nil
}

// CutLast cuts the newest link.
func (d *links) CutLast() {
	d.mu.Lock()
	l := d.all[len(d.all)-1]
	d.mu.Unlock()
	l.Cut()
}

func (d *links) Refuse(err error) {
	d.mu.Lock()
	d.refuse = err
	d.mu.Unlock()
}

// statuses records OnReconnect's steps.
type statuses struct {
	mu  sync.Mutex
	all []client.ReconnectStatus
	ch  chan client.ReconnectStatus
}

func newStatuses() *statuses { return &statuses{ch: make(chan client.ReconnectStatus, 256)} }

func (s *statuses) on(st client.ReconnectStatus) {
	s.mu.Lock()
	s.all = append(s.all, st)
	s.mu.Unlock()
	s.ch <- st
}

// await returns the next status in state want, failing on timeout.
func (s *statuses) await(t *testing.T, want client.ReconnectState) client.ReconnectStatus {
	t.Helper()
	timer := time.NewTimer(testDeadline)
	defer timer.Stop()
	for {
		select {
		case st := <-s.ch:
			if st.State == want {
				return st
			}
		case <-timer.C:
			s.mu.Lock()
			defer s.mu.Unlock()
			var b []string
			for _, x := range s.all {
				b = append(b, fmt.Sprintf("%v#%d(%v)", x.State, x.Attempt, x.Err))
			}
			t.Fatalf("no %v status in time; had %s", want, strings.Join(b, "; "))
		}
	}
}

// srvMsg is a message a scripted host read.
type srvMsg struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
}

// rhost speaks the host side of the protocol on one link, as the
// test directs.
type rhost struct {
	t  *testing.T
	mc transport.MessageConn
}

// next reads the next message other than channel/credit (and answers
// pings).
func (h *rhost) next(ctx context.Context) srvMsg {
	h.t.Helper()
	for {
		raw, err := h.mc.ReadMessage(ctx)
		if err != nil {
			h.t.Fatalf("scripted host: read: %v", err)
		}
		var m srvMsg
		if err := json.Unmarshal(raw, &m); err != nil {
			h.t.Fatalf("scripted host: %v in %s", err, raw)
		}
		switch m.Method {
		case rpc.MethodChannelCredit:
			continue
		case rpc.MethodPing, rpc.MethodDisposeTerminal:
			h.reply(ctx, m.ID, nil)
			continue
		}
		return m
	}
}

func (h *rhost) expect(ctx context.Context, method string) srvMsg {
	h.t.Helper()
	m := h.next(ctx)
	if m.Method != method {
		h.t.Fatalf("scripted host: got %s %s, want %s", m.Method, m.Params, method)
	}
	return m
}

func (h *rhost) send(ctx context.Context, text string) {
	h.t.Helper()
	if err := h.mc.WriteMessage(ctx, []byte(text)); err != nil {
		h.t.Fatalf("scripted host: write: %v", err)
	}
}

func (h *rhost) reply(ctx context.Context, id json.RawMessage, result any) {
	b, _ := json.Marshal(result)
	h.send(ctx, fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":%s}`, id, b))
}

func (h *rhost) data(ctx context.Context, seq uint64, text string) {
	a, _ := json.Marshal(rpc.TerminalDataAction{Type: rpc.ActionTerminalData, Data: text})
	h.send(ctx, fmt.Sprintf(`{"jsonrpc":"2.0","method":"action","params":{"channel":%q,"action":%s,"serverSeq":%d}}`, testTerm, a, seq))
}

// echo sends the echo of our dispatchAction clientSeq cseq (its action
// as received).
func (h *rhost) echo(ctx context.Context, seq uint64, cseq uint64, action json.RawMessage) {
	h.send(ctx, fmt.Sprintf(`{"jsonrpc":"2.0","method":"action","params":{"channel":%q,"action":%s,"serverSeq":%d,"origin":{"clientId":"c1","clientSeq":%d}}}`, testTerm, action, seq, cseq))
}

func (h *rhost) snapshot(ctx context.Context, fromSeq uint64, content string) {
	st, _ := json.Marshal(rpc.TerminalState{Title: "t", Rows: 24, Content: []rpc.ContentPart{{Type: "unclassified", Value: content}}, Lifecycle: rpc.Lifecycle{Status: "running"}})
	h.send(ctx, fmt.Sprintf(`{"jsonrpc":"2.0","method":"channel/snapshot","params":{"channel":%q,"snapshot":{"resource":%q,"state":%s,"fromSeq":%d}}}`, testTerm, testTerm, st, fromSeq))
}

const testTerm = "ahp-terminal:/t1"

// dispatched decodes a dispatchAction.
func dispatched(t *testing.T, m srvMsg) (uint64, string, json.RawMessage) {
	t.Helper()
	if m.Method != rpc.MethodDispatchAction {
		t.Fatalf("got %s %s, want dispatchAction", m.Method, m.Params)
	}
	var p rpc.DispatchActionParams
	if err := json.Unmarshal(m.Params, &p); err != nil {
		t.Fatal(err)
	}
	var a rpc.TerminalDataAction
	_ = json.Unmarshal(p.Action, &a)
	return p.ClientSeq, a.Data, p.Action
}

var testFlow = rpc.NegotiatedFlowControl{ClientReceive: client.DefaultReceive, HostReceive: client.DefaultReceive}

// scriptedSetup dials through d with a scripted host on the first link:
// initialize (resume offered, graceMs), a windowed terminal subscription
// with its snapshot (fromSeq 7) and output "A" (8). It returns the host
// of the first link and the hosts of later links, one per dial.
func scriptedSetup(t *testing.T, ctx context.Context, graceMs int64, opts client.Options) (*client.Conn, *client.Terminal, *rhost, chan *rhost, *links) {
	t.Helper()
	hosts := make(chan *rhost, 8)
	d := &links{serve: func(mc transport.MessageConn) { hosts <- &rhost{t: t, mc: mc} }}
	opts.Dialer = d.Dial
	opts.ClientID = "c1"
	if opts.ReconnectDelay == 0 {
		opts.ReconnectDelay = 5 * time.Millisecond
	}
	type dialed struct {
		c   *client.Conn
		err error
	}
	dc := make(chan dialed, 1)
	go func() {
		c, err := client.Dial(ctx, "", opts)
		dc <- dialed{c, err}
	}()
	h := <-hosts
	m := h.expect(ctx, rpc.MethodInitialize)
	h.reply(ctx, m.ID, rpc.InitializeResult{ProtocolVersion: "0.5.0", ServerSeq: 6, Snapshots: []rpc.Snapshot{},
		Resume: &rpc.Resume{Token: "tok", GraceMs: graceMs}})
	r := <-dc
	if r.err != nil {
		t.Fatal(r.err)
	}
	c := r.c
	t.Cleanup(func() { _ = c.Close() })
	tc := make(chan *client.Terminal, 1)
	go func() {
		term, err := client.OpenTerminal(ctx, c, testTerm)
		if err != nil {
			t.Error(err)
		}
		tc <- term
	}()
	m = h.expect(ctx, rpc.MethodSubscribe)
	h.reply(ctx, m.ID, rpc.SubscribeResult{FlowControl: &testFlow})
	term := <-tc
	if term == nil {
		t.FailNow()
	}
	h.snapshot(ctx, 7, "")
	h.data(ctx, 8, "A")
	return c, term, h, hosts, d
}

// output collects what Copy writes.
type output struct{ syncbuf.Buffer }

func (o *output) await(t *testing.T, want string) {
	t.Helper()
	deadline := time.Now().Add(testDeadline)
	for o.String() != want {
		if time.Now().After(deadline) {
			t.Fatalf("output %q, want %q", o.String(), want)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// TestReconnectScriptedReplay: a cut after input whose echo was lost (y)
// and input the host never got (z); the reconnect carries the resume
// token and lastAppliedServerSeq, the replay's echo of y stops y from
// being sent again, z is sent again once the replay reached headSeq, and
// input typed during the cut (w) follows it; a call in flight at the cut
// fails with ErrConnectionLost, one made during the cut waits and goes
// through; output arrives once each.
func TestReconnectScriptedReplay(t *testing.T) {
	ctx := testCtx(t)
	st := newStatuses()
	c, term, h, hosts, d := scriptedSetup(t, ctx, 60_000, client.Options{OnReconnect: st.on})
	var out output
	copied := make(chan error, 1)
	go func() {
		_, err := term.Copy(ctx, &out, true)
		copied <- err
	}()
	out.await(t, "A")

	for _, k := range []string{"x", "y", "z"} {
		if err := term.Input(ctx, []byte(k)); err != nil {
			t.Fatal(err)
		}
	}
	seq, data, ax := dispatched(t, h.next(ctx))
	if seq != 1 || data != "x" {
		t.Fatalf("first input: %d %q", seq, data)
	}
	h.echo(ctx, 9, 1, ax)
	h.data(ctx, 10, "B")
	_, _, ay := dispatched(t, h.next(ctx)) // applied as 11, echo lost in the cut
	dispatched(t, h.next(ctx))             // z: lost in the cut
	out.await(t, "AB")

	inflight := make(chan error, 1)
	go func() {
		inflight <- c.Call(ctx, rpc.MethodCreateTerminal, rpc.CreateTerminalParams{Channel: "ahp-terminal:/other"}, nil)
	}()
	h.expect(ctx, rpc.MethodCreateTerminal) // never answered
	d.CutLast()
	if err := <-inflight; !errors.Is(err, client.ErrConnectionLost) {
		t.Fatalf("in-flight call: %v, want ErrConnectionLost", err)
	}
	st.await(t, client.Lost)
	if err := term.Input(ctx, []byte("w")); err != nil { // typed during the cut
		t.Fatal(err)
	}
	during := make(chan error, 1)
	go func() {
		during <- c.Call(ctx, rpc.MethodDisposeTerminal, rpc.ChannelParams{Channel: "ahp-terminal:/other"}, nil)
	}()
	select {
	case <-c.Done():
		t.Fatal("Done closed while reconnecting")
	default:
	}

	h2 := <-hosts
	m := h2.expect(ctx, rpc.MethodReconnect)
	var p rpc.ReconnectParams
	if err := json.Unmarshal(m.Params, &p); err != nil {
		t.Fatal(err)
	}
	if p.ClientID != "c1" || p.ResumeToken != "tok" || len(p.Subscriptions) != 1 || p.Subscriptions[0] != testTerm ||
		p.Windows == nil || len(p.Windows.Items) != 1 || p.Windows.Items[0].LastAppliedServerSeq != 10 ||
		*p.Windows.Items[0].FlowControl.Receive != client.DefaultReceive {
		t.Fatalf("reconnect params %s", m.Params)
	}
	h2.reply(ctx, m.ID, rpc.ReconnectResult{Type: rpc.ReconnectReplay, Missing: []string{}, ServerSeq: 11,
		Windows: &rpc.ReconnectResultWindows{Items: []rpc.ReconnectResultItem{{Channel: testTerm, FlowControl: testFlow, Recovery: rpc.RecoveryReplay, HeadSeq: 11}}},
		Resume:  &rpc.Resume{Token: "tok2", GraceMs: 60_000}})
	h2.echo(ctx, 11, 2, ay) // the replay
	seq, data, az := dispatched(t, h2.next(ctx))
	if seq != 3 || data != "z" {
		t.Fatalf("first after the replay: clientSeq %d %q, want 3 \"z\" (sent again, y not)", seq, data)
	}
	h2.echo(ctx, 12, 3, az)
	seq, data, aw := dispatched(t, h2.next(ctx))
	if seq != 4 || data != "w" {
		t.Fatalf("then: clientSeq %d %q, want 4 \"w\"", seq, data)
	}
	h2.echo(ctx, 13, 4, aw)
	res := st.await(t, client.Resumed)
	if res.UnknownFate != 0 || len(res.Missing) != 0 {
		t.Fatalf("resumed %+v", res)
	}
	h2.data(ctx, 14, "C")
	out.await(t, "ABC")

	// A second cut: the new token, and lastApplied 14.
	d.CutLast()
	h3 := <-hosts
	m = h3.expect(ctx, rpc.MethodReconnect)
	p = rpc.ReconnectParams{}
	_ = json.Unmarshal(m.Params, &p)
	if p.ResumeToken != "tok2" || p.Windows.Items[0].LastAppliedServerSeq != 14 {
		t.Fatalf("second reconnect params %s", m.Params)
	}
	h3.reply(ctx, m.ID, rpc.ReconnectResult{Type: rpc.ReconnectReplay, Missing: []string{}, ServerSeq: 14,
		Windows: &rpc.ReconnectResultWindows{Items: []rpc.ReconnectResultItem{{Channel: testTerm, FlowControl: testFlow, Recovery: rpc.RecoveryReplay, HeadSeq: 14}}}})
	st.await(t, client.Resumed)
	h3.data(ctx, 15, "D")
	out.await(t, "ABCD")
	if err := term.Input(ctx, []byte("v")); err != nil {
		t.Fatal(err)
	}
	if seq, data, _ = dispatched(t, h3.next(ctx)); seq != 5 || data != "v" {
		t.Fatalf("after the second cut: %d %q, want 5 \"v\"", seq, data)
	}
	select {
	case err := <-during:
		// Answered by h2 (read before "w"), or lost at the second cut.
		if err != nil && !errors.Is(err, client.ErrConnectionLost) {
			t.Fatalf("call made during the cut: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("the call made during the cut never returned")
	}
	_ = c.Close()
	<-copied
}

// TestReconnectScriptedSnapshot: after snapshot recovery, input sent
// before the cut without an echo is not sent again and is reported as of
// unknown fate; input typed during the cut is sent; the new snapshot
// shows as a skip.
func TestReconnectScriptedSnapshot(t *testing.T) {
	ctx := testCtx(t)
	st := newStatuses()
	_, term, h, hosts, d := scriptedSetup(t, ctx, 60_000, client.Options{OnReconnect: st.on})
	var out output
	go func() { _, _ = term.Copy(ctx, &out, true) }()
	out.await(t, "A")
	_ = term.Input(ctx, []byte("y"))
	_ = term.Input(ctx, []byte("z"))
	dispatched(t, h.next(ctx))
	dispatched(t, h.next(ctx))
	d.CutLast()
	st.await(t, client.Lost)
	_ = term.Input(ctx, []byte("w"))
	h2 := <-hosts
	m := h2.expect(ctx, rpc.MethodReconnect)
	h2.reply(ctx, m.ID, rpc.ReconnectResult{Type: rpc.ReconnectReplay, Missing: []string{}, ServerSeq: 40,
		Windows: &rpc.ReconnectResultWindows{Items: []rpc.ReconnectResultItem{{Channel: testTerm, FlowControl: testFlow, Recovery: rpc.RecoverySnapshot, HeadSeq: 40}}}})
	h2.snapshot(ctx, 40, "line1\nline2\n$ ")
	if seq, data, _ := dispatched(t, h2.next(ctx)); seq != 3 || data != "w" {
		t.Fatalf("after snapshot recovery: %d %q, want only 3 \"w\"", seq, data)
	}
	res := st.await(t, client.Resumed)
	if res.UnknownFate != 2 {
		t.Fatalf("UnknownFate %d, want 2", res.UnknownFate)
	}
	out.await(t, "A"+client.TerminalReset+"\r\n[sidecar: output skipped: the terminal's journal no longer held it]\r\nline1\nline2\n$ ")
}

// TestReconnectReplayBecomesSnapshot (issue 27 item 2): a reconnect result
// that announces a replay, followed by a channel/snapshot instead (the
// host's journal was trimmed before the resume), replaces the state:
// input sent before the cut without an echo is not sent again (nothing
// proves it unapplied); input typed during the cut is.
func TestReconnectReplayBecomesSnapshot(t *testing.T) {
	ctx := testCtx(t)
	st := newStatuses()
	_, term, h, hosts, d := scriptedSetup(t, ctx, 60_000, client.Options{OnReconnect: st.on})
	var out output
	go func() { _, _ = term.Copy(ctx, &out, true) }()
	out.await(t, "A")
	_ = term.Input(ctx, []byte("y"))
	_ = term.Input(ctx, []byte("z"))
	dispatched(t, h.next(ctx))
	dispatched(t, h.next(ctx))
	d.CutLast()
	st.await(t, client.Lost)
	_ = term.Input(ctx, []byte("w"))
	h2 := <-hosts
	m := h2.expect(ctx, rpc.MethodReconnect)
	h2.reply(ctx, m.ID, rpc.ReconnectResult{Type: rpc.ReconnectReplay, Missing: []string{}, ServerSeq: 40,
		Windows: &rpc.ReconnectResultWindows{Items: []rpc.ReconnectResultItem{{Channel: testTerm, FlowControl: testFlow, Recovery: rpc.RecoveryReplay, HeadSeq: 40}}}})
	st.await(t, client.Resumed)
	h2.snapshot(ctx, 40, "line1\n$ ")
	if seq, data, _ := dispatched(t, h2.next(ctx)); seq != 3 || data != "w" {
		t.Fatalf("after a snapshot in place of the replay: %d %q, want only 3 \"w\" (y and z not sent again)", seq, data)
	}
}

// TestReconnectGivesUp: each reason to stop ends the Conn with a
// *ReconnectError matching it and ErrConnectionLost, Done closes, and
// the terminal's Copy returns that error.
func TestReconnectGivesUp(t *testing.T) {
	for _, tc := range []struct {
		name  string
		grace int64
		host  func(ctx context.Context, h *rhost, d *links)
		want  error
	}{
		{"expired", 60_000, func(ctx context.Context, h *rhost, d *links) {
			m := h.expect(ctx, rpc.MethodReconnect)
			h.send(ctx, fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"error":{"code":-32008,"message":"nothing to resume","data":{"kind":"expired"}}}`, m.ID))
		}, client.ErrResumeExpired},
		{"refused", 60_000, func(ctx context.Context, h *rhost, d *links) {
			m := h.expect(ctx, rpc.MethodReconnect)
			h.send(ctx, fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"error":{"code":-32009,"message":"wrong token","data":{"kind":"refused"}}}`, m.ID))
		}, client.ErrResumeRefused},
		{"unauthorized", 60_000, nil, client.ErrUnauthorized},
		{"certificate", 60_000, nil, client.ErrCertificateMismatch},
		{"grace", 300, nil, client.ErrGraceEnded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testCtx(t)
			st := newStatuses()
			c, term, _, hosts, d := scriptedSetup(t, ctx, tc.grace, client.Options{OnReconnect: st.on})
			copied := make(chan error, 1)
			go func() {
				_, err := term.Copy(ctx, &output{}, true)
				copied <- err
			}()
			switch tc.name {
			case "unauthorized":
				d.Refuse(fmt.Errorf("refused the token (HTTP 401): %w", client.ErrUnauthorized))
			case "certificate":
				d.Refuse(client.PinMismatch("127.0.0.1:1: certificate pin mismatch: server presented sha256 9d58, expected 5a78"))
			case "grace":
				d.Refuse(errors.New("connection refused"))
			}
			d.CutLast()
			if tc.host != nil {
				tc.host(ctx, <-hosts, d)
			}
			gave := st.await(t, client.GaveUp)
			<-c.Done()
			var re *client.ReconnectError
			if err := c.Err(); !errors.As(err, &re) || !errors.Is(err, tc.want) || !errors.Is(err, client.ErrConnectionLost) || gave.Err != err {
				t.Fatalf("Err %v (status %v), want a *ReconnectError matching %v and ErrConnectionLost", err, gave.Err, tc.want)
			}
			if err := <-copied; !errors.Is(err, tc.want) {
				t.Fatalf("Copy: %v", err)
			}
			if err := c.Ping(ctx); !errors.Is(err, tc.want) {
				t.Fatalf("Ping after giving up: %v", err)
			}
		})
	}
}

// TestReconnectNotKept: a subscription listed in missing ends with
// ErrNotKept; the Conn carries on.
func TestReconnectNotKept(t *testing.T) {
	ctx := testCtx(t)
	st := newStatuses()
	c, term, _, hosts, d := scriptedSetup(t, ctx, 60_000, client.Options{OnReconnect: st.on})
	d.CutLast()
	h2 := <-hosts
	m := h2.expect(ctx, rpc.MethodReconnect)
	h2.reply(ctx, m.ID, rpc.ReconnectResult{Type: rpc.ReconnectReplay, Missing: []string{testTerm}, ServerSeq: 8,
		Windows: &rpc.ReconnectResultWindows{Items: []rpc.ReconnectResultItem{}}})
	res := st.await(t, client.Resumed)
	if len(res.Missing) != 1 || res.Missing[0] != testTerm {
		t.Fatalf("Missing %v", res.Missing)
	}
	for {
		_, err := term.Subscription().Next(ctx)
		if err != nil {
			if !errors.Is(err, client.ErrNotKept) {
				t.Fatalf("Next: %v, want ErrNotKept", err)
			}
			break
		}
	}
	called := make(chan error, 1)
	go func() {
		called <- c.Call(ctx, rpc.MethodCreateTerminal, rpc.CreateTerminalParams{Channel: "ahp-terminal:/t2"}, nil)
	}()
	m = h2.expect(ctx, rpc.MethodCreateTerminal)
	h2.reply(ctx, m.ID, nil)
	if err := <-called; err != nil {
		t.Fatalf("a call after the reconnect: %v", err)
	}
}

// TestRememberBound: the write-ahead log of one subscription keeps at
// most MaxRememberedActions entries and MaxRememberedBytes, forgetting
// the oldest sent ones (counted: unknown fate after a reconnect).
func TestRememberBound(t *testing.T) {
	for _, tc := range []struct {
		name            string
		n, size         int
		wantN, wantGone int
	}{
		{"under", 10, 8, 10, 0},
		{"count", client.MaxRememberedActions + 5, 8, client.MaxRememberedActions, 5},
		{"bytes", 2*client.MaxRememberedBytes/(64<<10) + 1, 64 << 10, client.MaxRememberedBytes / (64 << 10), client.MaxRememberedBytes/(64<<10) + 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, b, gone := client.Remember(tc.n, tc.size)
			if n != tc.wantN || gone != tc.wantGone || b > client.MaxRememberedBytes || b != n*tc.size {
				t.Fatalf("remembered %d (%d bytes), forgot %d; want %d, %d", n, b, gone, tc.wantN, tc.wantGone)
			}
		})
	}
}

// TestReconnectBeforeGraceEnds: however long the backoff has grown, one
// attempt falls a tenth of the grace before its end (where the host
// surely still holds the state), and a last one at the end itself; an
// attempt under way is announced as Connecting.
func TestReconnectBeforeGraceEnds(t *testing.T) {
	ctx := testCtx(t)
	st := newStatuses()
	const grace = 2000 * time.Millisecond
	c, _, _, _, d := scriptedSetup(t, ctx, grace.Milliseconds(), client.Options{OnReconnect: st.on,
		ReconnectDelay: time.Minute, ReconnectMaxDelay: time.Minute})
	d.Refuse(errors.New("connection refused"))
	d.CutLast()
	first := st.await(t, client.Retrying)
	// From the loss to the attempt before the end: 1.8 s, less the time
	// it took to notice the loss and announce the attempt.
	if first.Attempt != 1 || first.Next > grace-grace/10 || first.Next < grace-grace/10-500*time.Millisecond {
		t.Fatalf("first attempt %d after %v, want 1 after at most %v and close to it", first.Attempt, first.Next, grace-grace/10)
	}
	if conn := st.await(t, client.Connecting); conn.Attempt != 1 {
		t.Fatalf("Connecting for attempt %d, want 1", conn.Attempt)
	}
	second := st.await(t, client.Retrying)
	if second.Attempt != 2 || second.Next > grace/10 {
		t.Fatalf("second attempt %d after %v, want 2 after at most %v (at the grace's end)", second.Attempt, second.Next, grace/10)
	}
	gave := st.await(t, client.GaveUp)
	if !errors.Is(gave.Err, client.ErrGraceEnded) || gave.Attempt != 2 {
		t.Fatalf("gave up after %d attempts with %v, want 2 and ErrGraceEnded", gave.Attempt, gave.Err)
	}
	<-c.Done()
}
