package client

import (
	"context"
	"errors"
	"net/url"
	"slices"
	"sync"
	"time"

	"github.com/sidecar-dev/sidecar/delivery"
)

// SetTuneRTT sets the round trip t's window tuning compares with, so
// tests can make every window count as consumed fast (a long one) or
// never (zero disables growth by making no window fast enough).
func SetTuneRTT(t *TCPConn, d time.Duration) {
	t.tune.mu.Lock()
	t.tune.rtt = d
	t.tune.rttFixed = true
	t.tune.mu.Unlock()
}

// GrowOffers records the limits t's window tuning offers from now on;
// the returned func gives those offered so far.
func GrowOffers(t *TCPConn) func() []delivery.Limits {
	var mu sync.Mutex
	var offers []delivery.Limits
	t.tune.mu.Lock()
	t.tune.onGrow = func(next delivery.Limits) {
		mu.Lock()
		offers = append(offers, next)
		mu.Unlock()
	}
	t.tune.mu.Unlock()
	return func() []delivery.Limits {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(offers)
	}
}

// ReadBufferSize is t.readBufferSize: ReadFrom's next buffer size for a
// wanted one.
func ReadBufferSize(t *TCPConn, want int) int { return t.readBufferSize(want) }

// Unreleased is what t has received but not released yet (UTF-16 bytes).
func Unreleased(t *TCPConn) int64 {
	in, _ := t.sub.parts()
	received, released := in.Counters()
	return int64(received - released)
}

// Write-ahead bounds, for tests.
const (
	MaxRememberedBytes   = maxRememberedBytes
	MaxRememberedActions = maxRememberedActions
)

// Remember pushes n dispatchActions of textBytes each through an
// outQueue, each handed to the writer and none echoed, and returns how
// many stay remembered, their bytes, and how many the bound forgot.
func Remember(n, textBytes int) (remembered, bytes, forgotten int) {
	q := newOutQueue()
	text := make([]byte, textBytes)
	for i := 1; i <= n; i++ {
		_ = q.push(context.Background(), text, delivery.UTF16Bytes(2*textBytes), false, nil, uint64(i))
		q.Next()
	}
	return len(q.wal), q.walBytes, q.forgotten
}

// MaxHeldActions is maxHeldActions, for tests.
const MaxHeldActions = maxHeldActions

// ReceivedBytes returns the UTF-16 bytes of data messages t has received
// (delivered or not yet read).
func ReceivedBytes(t *TCPConn) delivery.UTF16Bytes {
	in, _ := t.sub.parts()
	if in == nil {
		return 0
	}
	received, _ := in.Counters()
	return received
}

// PinMismatch is the dial error a certificate pin mismatch with text msg
// becomes (explainDial), for a test Dialer to refuse with.
func PinMismatch(msg string) error {
	return explainDial(&url.URL{Host: "127.0.0.1:1"}, errors.New(msg))
}
