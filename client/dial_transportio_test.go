package client

import (
	"context"
	"errors"
	"net"
	"net/url"
	"strings"
	"syscall"
	"testing"
	"time"
)

// closedLoopbackPort returns 127.0.0.1:PORT with nothing listening on it
// (it was free a moment ago), over TCP and, almost surely, UDP.
func closedLoopbackPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return addr
}

// TestDialAutoNothingListening: --transport auto against a port nothing
// listens on fails at once, saying so, instead of waiting out the
// WebTransport budget (QUIC gets no answer from a closed UDP port).
func TestDialAutoNothingListening(t *testing.T) {
	addr := closedLoopbackPort(t)
	// Shorter than the budget, so that waiting it out (the defect) fails
	// the test rather than passing late; generous for a loopback refusal.
	limit := webTransportBudget * 2 / 3
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	start := time.Now()
	_, err := Dial(ctx, "https://"+addr+"/", Options{Transport: TransportAuto, ClientName: "probe-test"})
	elapsed := time.Since(start)
	if err == nil {
		t.Fatalf("Dial to %s (nothing listening) succeeded", addr)
	}
	want := "nothing is listening at " + addr + " (connection refused)"
	if !strings.Contains(err.Error(), want) {
		t.Errorf("Dial error %q, want it to say %q", err, want)
	}
	if elapsed >= limit {
		t.Errorf("Dial took %v, want well under the WebTransport budget %v", elapsed, webTransportBudget)
	}
}

// TestProbeRefused: the TCP probe of --transport auto cancels the
// WebTransport attempt and reports only a refusal; a port that accepts
// leaves the attempt alone.
func TestProbeRefused(t *testing.T) {
	t.Run("refused cancels", func(t *testing.T) {
		u := &url.URL{Scheme: "https", Host: closedLoopbackPort(t)}
		ctx, cancel := context.WithTimeout(context.Background(), webTransportBudget)
		defer cancel()
		err := <-probeRefused(ctx, cancel, u)
		if !errors.Is(err, syscall.ECONNREFUSED) {
			t.Fatalf("probe of %s: %v, want ECONNREFUSED", u.Host, err)
		}
		if !errors.Is(ctx.Err(), context.Canceled) {
			t.Errorf("attempt's context: %v, want canceled by the probe", ctx.Err())
		}
	})
	t.Run("listening leaves the attempt alone", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		u := &url.URL{Scheme: "https", Host: l.Addr().String()}
		ctx, cancel := context.WithTimeout(context.Background(), webTransportBudget)
		defer cancel()
		if err := <-probeRefused(ctx, cancel, u); err != nil {
			t.Fatalf("probe of a listening port: %v, want nil", err)
		}
		if ctx.Err() != nil {
			t.Errorf("attempt's context: %v, want it still running", ctx.Err())
		}
		// The probe connected and closed at once: the listener holds it.
		_ = l.(*net.TCPListener).SetDeadline(time.Now().Add(webTransportBudget))
		c, err := l.Accept()
		if err != nil {
			t.Fatalf("the probe did not connect: %v", err)
		}
		_ = c.Close()
	})
}
