package client

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
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
		{"/ahp 503", fmt.Errorf("dial: %w", &transport.HTTPError{StatusCode: http.StatusServiceUnavailable}), true},
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

// TestDialRetriesUndecided: a host that answers /ahp with 503 (no
// decision on the credential) is dialled again, OnDialRetry told each
// wait, until it answers otherwise (here a 401: Dial returns that at
// once), or until the context ends (the last 503 is the error).
func TestDialRetriesUndecided(t *testing.T) {
	var undecided atomic.Int64 // 503s still to answer
	var seen atomic.Int64
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen.Add(1)
		if undecided.Add(-1) >= 0 {
			http.Error(w, "503 authorize failed: try again", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("WWW-Authenticate", `Bearer realm="sidecar"`)
		http.Error(w, "401 unauthorized: missing or wrong token", http.StatusUnauthorized)
	}))
	defer srv.Close()
	sum := sha256.Sum256(srv.Certificate().Raw)
	url := "wss://" + srv.Listener.Addr().String() + "/ahp"
	var mu sync.Mutex
	var told []error
	opts := Options{CertHash: hex.EncodeToString(sum[:]), ClientName: "undecided-test", Token: "t",
		OnDialRetry: func(err error, wait time.Duration) {
			mu.Lock()
			defer mu.Unlock()
			if wait < undecidedFirstWait*8/10 || wait > undecidedMaxWait*12/10 {
				t.Errorf("wait %v, want %v to %v with jitter", wait, undecidedFirstWait, undecidedMaxWait)
			}
			told = append(told, err)
		}}

	// Two 503s, then a refusal: three tries, two waits, the refusal.
	undecided.Store(2)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err := Dial(ctx, url, opts)
	var he *transport.HTTPError
	if !errors.As(err, &he) || he.StatusCode != http.StatusUnauthorized {
		t.Fatalf("Dial after two 503s then a 401: %v, want the 401", err)
	}
	if n := seen.Load(); n != 3 {
		t.Errorf("%d tries, want 3", n)
	}
	mu.Lock()
	if len(told) != 2 || !Undecided(told[0]) || !Undecided(told[1]) {
		t.Errorf("OnDialRetry told %v, want two 503s", told)
	}
	told = nil
	mu.Unlock()

	// 503 for ever: Dial ends with the context (not later), the 503 its
	// error, after more than one try.
	undecided.Store(1 << 30)
	seen.Store(0)
	ctx2, cancel2 := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel2()
	start := time.Now()
	_, err = Dial(ctx2, url, opts)
	if !Undecided(err) {
		t.Fatalf("Dial with the host undecided throughout: %v, want its 503", err)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("Dial took %v with a 1.5 s context", took)
	}
	if n := seen.Load(); n < 2 {
		t.Errorf("%d tries in 1.5 s, want more than one", n)
	}
}
