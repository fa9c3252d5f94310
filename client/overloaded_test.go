package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sidecar-dev/sidecar/rpc"
	"github.com/sidecar-dev/sidecar/transport"
)

// fakeHost answers each request read from mc with answer(attempt, req),
// attempt counting from 1 per method, until mc closes.
func fakeHost(t *testing.T, mc transport.MessageConn, answer func(attempt int, method string, id json.RawMessage) []byte) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		attempts := map[string]int{}
		for {
			raw, err := mc.ReadMessage(context.Background())
			if err != nil {
				return
			}
			var req struct {
				ID     json.RawMessage `json:"id"`
				Method string          `json:"method"`
			}
			if json.Unmarshal(raw, &req) != nil || len(req.ID) == 0 {
				continue
			}
			attempts[req.Method]++
			if err := mc.WriteMessage(context.Background(), answer(attempts[req.Method], req.Method, req.ID)); err != nil {
				return
			}
		}
	}()
	return done
}

var overloadedAnswer = rpc.OverloadedError(16)

// TestCallRetriesOverloaded (issue 16, seed 003 ingress): an Overloaded
// answer is retried (a new request, after a backoff) until the host
// takes it; the caller sees only the result. Before, only
// createTcpConnection was retried.
func TestCallRetriesOverloaded(t *testing.T) {
	a, b := transport.Pipe(16)
	done := fakeHost(t, b, func(attempt int, method string, id json.RawMessage) []byte {
		if attempt <= 3 {
			return rpc.ErrorResponse(id, overloadedAnswer)
		}
		return []byte(fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":{"attempt":%d}}`, id, attempt))
	})
	c := NewConn(a, Options{ClientID: "retry"})
	defer func() { _ = c.Close(); <-done }()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var res struct{ Attempt int }
	if err := c.Call(ctx, "ping", rpc.ChannelParams{Channel: rpc.RootChannel}, &res); err != nil {
		t.Fatal(err)
	}
	if res.Attempt != 4 {
		t.Fatalf("answered at attempt %d, want 4 (3 Overloaded, then the result)", res.Attempt)
	}
}

// TestCallOverloadedUntilContextEnds: a host that stays Overloaded gets
// the request again until the context ends (here: as the third attempt
// arrives, so in flight or in the backoff after it); then the caller gets
// the Overloaded error, not the context's.
func TestCallOverloadedUntilContextEnds(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a, b := transport.Pipe(16)
	done := fakeHost(t, b, func(attempt int, _ string, id json.RawMessage) []byte {
		if attempt == 3 {
			cancel()
		}
		return rpc.ErrorResponse(id, overloadedAnswer)
	})
	c := NewConn(a, Options{ClientID: "retry"})
	defer func() { _ = c.Close(); <-done }()
	err := c.Call(ctx, "ping", rpc.ChannelParams{Channel: rpc.RootChannel}, nil)
	var re *rpc.Error
	if !errors.As(err, &re) || re.Code != rpc.CodeOverloaded {
		t.Fatalf("Call: %v, want the Overloaded error", err)
	}
}

// TestOverloadedBackoff: the waits between attempts double from
// overloadedRetryMin to overloadedRetryMax, each within ±20%.
func TestOverloadedBackoff(t *testing.T) {
	want := []time.Duration{10, 20, 40, 80, 160, 320, 640, 1000, 1000}
	for i, w := range want {
		w *= time.Millisecond
		b := overloadedWait(i + 1)
		if b != w {
			t.Fatalf("wait %d: %v, want %v", i+1, b, w)
		}
		for range 100 {
			if j := jitter(b); j < b*8/10 || j > b*12/10 {
				t.Fatalf("jitter(%v) = %v, outside ±20%%", b, j)
			}
		}
	}
	if b := overloadedWait(1000); b != overloadedRetryMax {
		t.Fatalf("wait 1000: %v", b)
	}
}
