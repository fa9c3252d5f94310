package client

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sidecar-dev/sidecar/transport"
	"github.com/sidecar-dev/sidecar/transportio"
)

// TestUndecided: what counts as a host that reached no decision on the
// credential (worth another try) and what does not.
func TestUndecided(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"/ahp 503 try again", fmt.Errorf("dial: %w", &transport.HTTPError{StatusCode: http.StatusServiceUnavailable, Reason: transport.ReasonTryAgain}), true},
		{"a proxy's 503", &transport.HTTPError{StatusCode: http.StatusServiceUnavailable}, false},
		{"/ahp 401", &transport.HTTPError{StatusCode: http.StatusUnauthorized}, false},
		{"/ahp 404", &transport.HTTPError{StatusCode: http.StatusNotFound}, false},
		{"transport-io authorize failed", fmt.Errorf("open: %w", &transportio.SessionError{Code: transportio.CloseNoError, Reason: "authorize failed", Remote: true}), true},
		{"transport-io authorize failed, as the transport gives it", &transport.TIOCloseError{SessionError: &transportio.SessionError{Code: transportio.CloseNoError, Reason: "authorize failed", Remote: true}}, true},
		{"transport-io closed for another reason", &transportio.SessionError{Code: transportio.CloseNoError, Reason: "shutting down", Remote: true}, false},
		{"transport-io refusal", &transportio.SessionError{Code: transportio.CloseUnauthorized, Reason: "authorize failed", Remote: true}, false},
		{"other", errors.New("connection reset"), false},
	} {
		if got := Undecided(tc.err); got != tc.want {
			t.Errorf("%s: Undecided(%v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}

// undecidedHost is a TLS server standing in for a daemon's /ahp: it
// answers the daemon's 503 (no decision) to the first undecided requests
// (each after delay), then 401; with proxy set, a 503 without the
// daemon's reason instead.
type undecidedHost struct {
	srv       *httptest.Server
	url, pin  string
	undecided atomic.Int64
	seen      atomic.Int64
	open      atomic.Int64 // connections not yet closed
	delay     atomic.Int64 // time.Duration
	proxy     atomic.Bool
}

func newUndecidedHost(t *testing.T) *undecidedHost {
	h := &undecidedHost{}
	h.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.seen.Add(1)
		if h.undecided.Add(-1) >= 0 {
			time.Sleep(time.Duration(h.delay.Load()))
			if h.proxy.Load() {
				http.Error(w, "Service Unavailable", http.StatusServiceUnavailable)
				return
			}
			http.Error(w, "503 authorize failed: "+transport.ReasonTryAgain, http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("WWW-Authenticate", `Bearer realm="sidecar"`)
		http.Error(w, "401 unauthorized: missing or wrong token", http.StatusUnauthorized)
	}))
	h.srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		switch st {
		case http.StateNew:
			h.open.Add(1)
		case http.StateClosed, http.StateHijacked:
			h.open.Add(-1)
		}
	}
	h.srv.StartTLS()
	t.Cleanup(h.srv.Close)
	sum := sha256.Sum256(h.srv.Certificate().Raw)
	h.url, h.pin = "wss://"+h.srv.Listener.Addr().String()+"/ahp", hex.EncodeToString(sum[:])
	return h
}

// TestDialRetriesUndecided: a host that answers /ahp with the daemon's
// 503 (no decision on the credential) is dialled again, OnDialRetry told
// each wait (250 ms, then doubled, with jitter) and what is left of the
// context, until it answers otherwise (here a 401: Dial returns that at
// once), or until the context ends: then the last undecided answer is the
// error, saying how long it was tried, and the context's end is in it
// too, even when the end cut a try short. A proxy's 503 is not tried
// again.
func TestDialRetriesUndecided(t *testing.T) {
	h := newUndecidedHost(t)
	type told struct {
		err        error
		wait, left time.Duration
	}
	var mu sync.Mutex
	var tells []told
	opts := Options{CertHash: h.pin, ClientName: "undecided-test", Token: "t",
		OnDialRetry: func(err error, wait, left time.Duration) {
			mu.Lock()
			defer mu.Unlock()
			tells = append(tells, told{err, wait, left})
		}}
	taken := func() []told {
		mu.Lock()
		defer mu.Unlock()
		out := tells
		tells = nil
		return out
	}

	// Two 503s, then a refusal: three tries, two waits, the refusal.
	h.undecided.Store(2)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err := Dial(ctx, h.url, opts)
	var he *transport.HTTPError
	if !errors.As(err, &he) || he.StatusCode != http.StatusUnauthorized {
		t.Fatalf("Dial after two 503s then a 401: %v, want the 401", err)
	}
	if n := h.seen.Load(); n != 3 {
		t.Errorf("%d tries, want 3", n)
	}
	// No try's connection is kept idle by the client for later.
	for start := time.Now(); h.open.Load() != 0; time.Sleep(5 * time.Millisecond) {
		if time.Since(start) > 5*time.Second {
			t.Fatalf("%d of the tries' connections still open 5 s after Dial", h.open.Load())
		}
	}
	got := taken()
	if len(got) != 2 {
		t.Fatalf("OnDialRetry told %d times, want 2: %v", len(got), got)
	}
	for i, want := range []time.Duration{undecidedFirstWait, 2 * undecidedFirstWait} {
		g := got[i]
		if !Undecided(g.err) || g.wait < want*8/10 || g.wait > want*12/10 || g.left <= 0 || g.left > 20*time.Second {
			t.Errorf("told %d: %v, wait %v, left %v; want a 503, %v ±20%%, under 20 s", i, g.err, g.wait, g.left, want)
		}
	}

	// 503 for ever: Dial ends with the context, the 503 its error.
	for _, delay := range []time.Duration{0, 300 * time.Millisecond} {
		h.undecided.Store(1 << 30)
		h.seen.Store(0)
		h.delay.Store(int64(delay))
		ctx2, cancel2 := context.WithTimeout(context.Background(), 1500*time.Millisecond)
		start := time.Now()
		_, err = Dial(ctx2, h.url, opts)
		cancel2()
		if !Undecided(err) || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "could not decide on the credential (HTTP 503)") || !strings.Contains(err.Error(), "no decision after trying for") {
			t.Errorf("answers after %v, undecided throughout: %v; want its 503, the time tried, the deadline", delay, err)
		}
		if took := time.Since(start); took > 3*time.Second {
			t.Errorf("answers after %v: Dial took %v with a 1.5 s context", delay, took)
		}
		if n := h.seen.Load(); n < 2 {
			t.Errorf("answers after %v: %d tries in 1.5 s, want more than one", delay, n)
		}
		taken()
	}
	h.delay.Store(0)

	// A proxy's 503: once, no retry, worded as what it is.
	h.undecided.Store(1 << 30)
	h.seen.Store(0)
	h.proxy.Store(true)
	_, err = Dial(ctx, h.url, opts)
	if Undecided(err) || !strings.Contains(err.Error(), "HTTP 503 (unavailable)") {
		t.Errorf("a proxy's 503: %v; want it worded as unavailable, not undecided", err)
	}
	if n := h.seen.Load(); n != 1 {
		t.Errorf("a proxy's 503: %d tries, want 1", n)
	}
	if got := taken(); len(got) != 0 {
		t.Errorf("a proxy's 503: OnDialRetry told %v", got)
	}
}

// TestDialUndecidedCanceled: canceling Dial's context during a wait
// ends it at once with the undecided answer, errors.Is
// context.Canceled.
func TestDialUndecidedCanceled(t *testing.T) {
	h := newUndecidedHost(t)
	h.undecided.Store(1 << 30)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	waiting := make(chan struct{}, 1)
	opts := Options{CertHash: h.pin, ClientName: "undecided-cancel", Token: "t",
		OnDialRetry: func(error, time.Duration, time.Duration) {
			select {
			case waiting <- struct{}{}:
			default:
			}
		}}
	done := make(chan error, 1)
	go func() {
		_, err := Dial(ctx, h.url, opts)
		done <- err
	}()
	select {
	case <-waiting:
	case <-time.After(10 * time.Second):
		t.Fatal("no retry within 10 s")
	}
	cancel()
	select {
	case err := <-done:
		if !Undecided(err) || !errors.Is(err, context.Canceled) {
			t.Fatalf("Dial canceled while waiting: %v; want the undecided answer, context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Dial did not end within 5 s of the cancel")
	}
}
