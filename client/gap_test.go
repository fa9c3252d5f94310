package client_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/sidecar-dev/sidecar/client"
	"github.com/sidecar-dev/sidecar/rpc"
	"github.com/sidecar-dev/sidecar/transport"
)

// gapHost serves the Pipe end b as a scripted host: it answers
// initialize, and hands every other request (method, id, params, attempt
// per method from 1) to answer, which sends what it likes with send.
func gapHost(t *testing.T, b transport.MessageConn, answer func(send func(string), method, id string, params json.RawMessage, attempt int)) chan struct{} {
	ctx := testCtx(t)
	send := func(s string) {
		if err := b.WriteMessage(ctx, []byte(s)); err != nil {
			t.Error(err)
		}
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		attempts := map[string]int{}
		for {
			raw, err := b.ReadMessage(ctx)
			if err != nil {
				return
			}
			var req struct {
				ID     json.RawMessage `json:"id"`
				Method string          `json:"method"`
				Params json.RawMessage `json:"params"`
			}
			_ = json.Unmarshal(raw, &req)
			if len(req.ID) == 0 {
				continue
			}
			if req.Method == "initialize" {
				send(`{"jsonrpc":"2.0","id":` + string(req.ID) + `,"result":{"protocolVersion":"0.5.0","serverSeq":0,"snapshots":[]}}`)
				continue
			}
			attempts[req.Method]++
			answer(send, req.Method, string(req.ID), req.Params, attempts[req.Method])
		}
	}()
	return served
}

func termAction(ch string, seq int, a string) string {
	return `{"jsonrpc":"2.0","method":"action","params":` + envelope(ch, seq, a) + `}`
}

func envelope(ch string, seq int, a string) string {
	return `{"channel":"` + ch + `","action":` + a + `,"serverSeq":` + fmt.Sprint(seq) + `}`
}

func data(ch string, seq int) string {
	return envelope(ch, seq, fmt.Sprintf(`{"type":"terminal/data","data":"d%d "}`, seq))
}

func pageResult(id string, toSeq, headSeq int, actions ...string) string {
	return `{"jsonrpc":"2.0","id":` + id + `,"result":{"actions":[` + strings.Join(actions, ",") + `],"toSeq":` + fmt.Sprint(toSeq) + `,"headSeq":` + fmt.Sprint(headSeq) + `}}`
}

// subscribed is the subscribe result for request id: a snapshot of ch
// with state (JSON) from fromSeq.
func subscribed(id, ch, state string, fromSeq int) string {
	return `{"jsonrpc":"2.0","id":` + id + `,"result":{"snapshot":{"resource":"` + ch + `","state":` + state + `,"fromSeq":` + fmt.Sprint(fromSeq) + `}}}`
}

// samePages checks the channel/page params sent against want, in order.
func samePages(t *testing.T, pages, want []string) {
	t.Helper()
	if strings.Join(pages, "\n") != strings.Join(want, "\n") {
		t.Errorf("page requests:\n%s\nwant:\n%s", strings.Join(pages, "\n"), strings.Join(want, "\n"))
	}
}

// syncLog collects OnSync's statuses.
type syncLog struct {
	mu      sync.Mutex
	st      []client.SyncStatus
	changed chan struct{} // 1-slot: a status was added
}

func (l *syncLog) add(s client.SyncStatus) {
	l.mu.Lock()
	l.st = append(l.st, s)
	if l.changed == nil {
		l.changed = make(chan struct{}, 1)
	}
	ch := l.changed
	l.mu.Unlock()
	select {
	case ch <- struct{}{}:
	default:
	}
}

// waitCurrent waits (until ctx ends) for the last status told to be
// Current: OnSync says so after the actions are delivered, so Copy may
// return first. It returns the log.
func (l *syncLog) waitCurrent(ctx context.Context) string {
	for {
		l.mu.Lock()
		done := len(l.st) > 0 && l.st[len(l.st)-1].State == client.Current
		if l.changed == nil {
			l.changed = make(chan struct{}, 1)
		}
		ch := l.changed
		l.mu.Unlock()
		if done {
			return l.String()
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return l.String()
		}
	}
}
func (l *syncLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var b strings.Builder
	for _, s := range l.st {
		fmt.Fprintf(&b, "%s %s after=%d paged=%d resub=%v err=%v; ", s.Channel, s.State, s.AfterSeq, s.Paged, s.Resubscribed, s.Err)
	}
	return b.String()
}

// gapCopy opens a terminal subscription to ch on an ordinary Conn that
// tells log of its sync states, against a scripted host (answer, as for
// gapHost: subscribe and channel/page), and copies its output until the
// terminal exits with 0: the output, each channel/page's params in
// order, and the subscription.
func gapCopy(t *testing.T, ch string, log *syncLog, answer func(send func(string), method, id string, params json.RawMessage, attempt int)) (out string, pages []string, sub *client.Subscription) {
	t.Helper()
	ctx := testCtx(t)
	a, b := transport.Pipe(64)
	c := client.NewConn(a, client.Options{ClientID: "c1", Ordinary: true, OnSync: log.add})
	defer c.Close()
	var recorded []string // by the host's goroutine until served
	served := gapHost(t, b, func(send func(string), method, id string, params json.RawMessage, attempt int) {
		if method == "channel/page" {
			recorded = append(recorded, string(params))
		}
		answer(send, method, id, params, attempt)
	})
	defer func() {
		_ = c.Close()
		_ = b.Close(transport.CloseNormal, "")
		<-served
		pages = recorded
	}()
	if err := c.Initialize(ctx); err != nil {
		t.Fatal(err)
	}
	term, err := client.OpenTerminal(ctx, c, ch)
	if err != nil {
		t.Fatal(err)
	}
	var w strings.Builder
	if code, err := term.Copy(ctx, &w, true); err != nil || code == nil || *code != 0 {
		t.Fatalf("Copy = %v, %v", code, err)
	}
	return w.String(), nil, term.Subscription() // pages: set once the host is done
}

// TestGapPagesInOrder (issue 16, seed 003 "treat view/gap as a state
// machine input"): after a channel/gap the subscription is Stale, pages
// the missing actions from the last it delivered (an Overloaded answer
// retried), holds the live actions that arrive meanwhile, and delivers
// everything in serverSeq order, each once; then it is Current again.
// Copy writes the output as if no gap had happened.
func TestGapPagesInOrder(t *testing.T) {
	const ch = "ahp-terminal:/gap"
	var log syncLog
	out, pages, sub := gapCopy(t, ch, &log, func(send func(string), method, id string, params json.RawMessage, attempt int) {
		switch method {
		case "subscribe":
			send(subscribed(id, ch, `{"content":[],"lifecycle":{"status":"running"}}`, 1))
			send(`{"jsonrpc":"2.0","method":"action","params":` + data(ch, 2) + `}`)
			send(`{"jsonrpc":"2.0","method":"action","params":` + data(ch, 3) + `}`)
			send(`{"jsonrpc":"2.0","method":"channel/gap","params":{"channel":"` + ch + `","afterSeq":3}}`)
			send(`{"jsonrpc":"2.0","method":"action","params":` + data(ch, 6) + `}`) // live, after the hole
		case "channel/page":
			switch attempt {
			case 1:
				send(string(rpc.ErrorResponse(json.RawMessage(id), rpc.OverloadedError(4))))
			case 2:
				send(`{"jsonrpc":"2.0","method":"action","params":` + data(ch, 7) + `}`) // live, before the answer
				send(pageResult(id, 5, 7, data(ch, 4), data(ch, 5)))
			case 3:
				send(pageResult(id, 7, 7, data(ch, 6), data(ch, 7)))
				send(`{"jsonrpc":"2.0","method":"action","params":` + data(ch, 8) + `}`)
				send(termAction(ch, 9, `{"type":"terminal/exited","exitCode":0}`))
			}
		}
	})
	if want := "d2 d3 d4 d5 d6 d7 d8 "; out != want {
		t.Errorf("output %q, want %q", out, want)
	}
	wantPages := []string{
		`{"channel":"ahp-terminal:/gap","afterSeq":3,"limit":512}`,
		`{"channel":"ahp-terminal:/gap","afterSeq":3,"limit":512}`, // the Overloaded one again
		`{"channel":"ahp-terminal:/gap","afterSeq":5,"limit":512}`,
	}
	samePages(t, pages, wantPages)
	if want := ch + " stale after=3 paged=0 resub=false err=<nil>; " + ch + " paging after=0 paged=0 resub=false err=<nil>; " +
		ch + " current after=0 paged=4 resub=false err=<nil>; "; log.waitCurrent(testCtx(t)) != want {
		t.Errorf("OnSync told:\n%s\nwant:\n%s", log.String(), want)
	}
	if st := sub.State(); st != client.Current {
		t.Errorf("State() = %v, want current", st)
	}
}

// TestGapEmptyPageGoesOn: a page that holds none of this client's
// actions (every entry in it was another client's rejection echo) but
// ends below the head is not the end of the catch-up: the next page
// starts at its toSeq (seed 003: toSeq is the afterSeq of the next
// page), and the actions after it are delivered.
func TestGapEmptyPageGoesOn(t *testing.T) {
	const ch = "ahp-terminal:/gap-empty"
	var log syncLog
	out, pages, _ := gapCopy(t, ch, &log, func(send func(string), method, id string, params json.RawMessage, attempt int) {
		switch method {
		case "subscribe":
			send(subscribed(id, ch, `{"content":[],"lifecycle":{"status":"running"}}`, 1))
			send(`{"jsonrpc":"2.0","method":"action","params":` + data(ch, 2) + `}`)
			send(`{"jsonrpc":"2.0","method":"channel/gap","params":{"channel":"` + ch + `","afterSeq":2}}`)
		case "channel/page":
			switch attempt {
			case 1:
				send(pageResult(id, 4, 5)) // 3 and 4: not for this client
			case 2:
				send(pageResult(id, 5, 5, data(ch, 5)))
				send(termAction(ch, 6, `{"type":"terminal/exited","exitCode":0}`))
			}
		}
	})
	if want := "d2 d5 "; out != want {
		t.Errorf("output %q, want %q", out, want)
	}
	wantPages := []string{
		`{"channel":"ahp-terminal:/gap-empty","afterSeq":2,"limit":512}`,
		`{"channel":"ahp-terminal:/gap-empty","afterSeq":4,"limit":512}`,
	}
	samePages(t, pages, wantPages)
}

// TestGapTruncatedResubscribes: when the journal no longer reaches back
// (-32051) the subscription subscribes again; Copy redraws from the fresh
// snapshot (after the notice), the held actions it covers are dropped
// and the later ones follow it.
func TestGapTruncatedResubscribes(t *testing.T) {
	const ch = "ahp-terminal:/trunc"
	var log syncLog
	out, _, _ := gapCopy(t, ch, &log, func(send func(string), method, id string, params json.RawMessage, attempt int) {
		switch {
		case method == "subscribe" && attempt == 1:
			send(subscribed(id, ch, `{"content":[{"type":"unclassified","value":"old\r\n"}],"lifecycle":{"status":"running"}}`, 1))
			send(`{"jsonrpc":"2.0","method":"action","params":` + data(ch, 2) + `}`)
			send(`{"jsonrpc":"2.0","method":"channel/gap","params":{"channel":"` + ch + `","afterSeq":2}}`)
			send(`{"jsonrpc":"2.0","method":"action","params":` + data(ch, 9) + `}`) // covered by the new snapshot
		case method == "channel/page":
			send(string(rpc.ErrorResponse(json.RawMessage(id), rpc.JournalTruncatedError(ch, 2))))
		case method == "subscribe" && attempt == 2:
			if string(params) != `{"channel":"ahp-terminal:/trunc"}` {
				t.Errorf("subscribed again with %s, want ordinary", params)
			}
			send(subscribed(id, ch, `{"rows":2,"content":[{"type":"unclassified","value":"old\r\nd2 lost\r\n"},{"type":"unclassified","value":"fresh\r\n$ "}],"lifecycle":{"status":"running"}}`, 10))
			send(`{"jsonrpc":"2.0","method":"action","params":` + data(ch, 11) + `}`)
			send(termAction(ch, 12, `{"type":"terminal/exited","exitCode":0}`))
		}
	})
	notice := "\r\n[sidecar: output skipped: the terminal's journal no longer held it]\r\n"
	if want := "old\r\nd2 " + client.TerminalReset + notice + "fresh\r\n$ d11 "; out != want {
		t.Errorf("output %q, want %q", out, want)
	}
	if want := ch + " stale after=2 paged=0 resub=false err=<nil>; " + ch + " paging after=0 paged=0 resub=false err=<nil>; " +
		ch + " current after=0 paged=0 resub=true err=<nil>; "; log.waitCurrent(testCtx(t)) != want {
		t.Errorf("OnSync told:\n%s\nwant:\n%s", log.String(), want)
	}
}

// TestGapHeldBound: live actions held while a page is awaited are
// bounded; past the bound they are dropped and the subscription
// subscribes again (its snapshot covers them) instead of holding more.
func TestGapHeldBound(t *testing.T) {
	const ch = "ahp-terminal:/bound"
	const flood = client.MaxHeldActions + 10
	var log syncLog
	out, _, _ := gapCopy(t, ch, &log, func(send func(string), method, id string, params json.RawMessage, attempt int) {
		switch {
		case method == "subscribe" && attempt == 1:
			send(subscribed(id, ch, `{"content":[],"lifecycle":{"status":"running"}}`, 1))
			send(`{"jsonrpc":"2.0","method":"channel/gap","params":{"channel":"` + ch + `","afterSeq":1}}`)
		case method == "channel/page":
			for i := range flood { // live, while the page is awaited
				send(`{"jsonrpc":"2.0","method":"action","params":` + data(ch, 3+i) + `}`)
			}
			send(pageResult(id, 2, 2, data(ch, 2)))
		case method == "subscribe" && attempt == 2:
			send(subscribed(id, ch, `{"rows":1,"content":[{"type":"unclassified","value":"now$ "}],"lifecycle":{"status":"running"}}`, 3+flood))
			send(termAction(ch, 4+flood, `{"type":"terminal/exited","exitCode":0}`))
		}
	})
	notice := "\r\n[sidecar: output skipped: the terminal's journal no longer held it]\r\n"
	if want := "d2 " + client.TerminalReset + notice + "now$ "; out != want {
		t.Errorf("output %q, want %q", out, want)
	}
	if !strings.HasSuffix(log.waitCurrent(testCtx(t)), "current after=0 paged=1 resub=true err=<nil>; ") {
		t.Errorf("OnSync told %s, want current after 1 paged and a resubscribe", log.String())
	}
}
