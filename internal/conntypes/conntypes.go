// Package conntypes runs one test body over every transport a client can
// reach the host by (as yamux's testConnTypes does): the in-memory pipe,
// plain AHP over WebSocket (/ahp, with its binary subprotocol), the
// transport-io WebSocket mapping, and transport-io over WebTransport
// (HTTP/3 over loopback UDP). Each gives the test the client's end of a
// fresh connection whose other end the test's serve function serves, as
// `sidecar serve` does. Tests only.
package conntypes

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sidecar-dev/sidecar/transport"
	"github.com/sidecar-dev/sidecar/transport/tlscert"
)

// Token is the bearer token of the real transports' listeners.
const Token = "conntypes-token"

// dialTimeout bounds one dial.
const dialTimeout = 10 * time.Second

// Type is one way to reach a host.
type Type struct {
	// Name names it in subtests: "pipe", "ahp", "tio-websocket",
	// "webtransport".
	Name string
	// Binary says the connection carries data messages in their binary
	// form (transport.CarriesBinary).
	Binary bool
	// Listen starts a listener serving each connection with serve, and
	// returns a dial function for new client connections to it; both end
	// at t's cleanup.
	Listen func(t testing.TB, serve func(ctx context.Context, mc transport.MessageConn)) (dial func(t testing.TB) transport.MessageConn)
}

// All is every Type.
var All = []Type{Pipe, AHP, TIOWebSocket, WebTransport}

// Run runs body once per Type, each a subtest named after it.
func Run(t *testing.T, body func(t *testing.T, ct Type)) {
	for _, ct := range All {
		t.Run(ct.Name, func(t *testing.T) { body(t, ct) })
	}
}

// Pipe is transport.Pipe: no network at all.
var Pipe = Type{Name: "pipe", Listen: func(t testing.TB, serve func(context.Context, transport.MessageConn)) func(testing.TB) transport.MessageConn {
	var wg sync.WaitGroup
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); wg.Wait() })
	return func(t testing.TB) transport.MessageConn {
		a, b := transport.Pipe(64)
		wg.Add(1)
		go func() {
			defer wg.Done()
			serve(ctx, b)
		}()
		t.Cleanup(func() { _ = a.Close(transport.CloseNormal, "") })
		return a
	}
}}

// AHP is plain AHP over WebSocket (/ahp), the sidecar client's binary
// subprotocol chosen.
var AHP = Type{Name: "ahp", Binary: true, Listen: func(t testing.TB, serve func(context.Context, transport.MessageConn)) func(testing.TB) transport.MessageConn {
	srv := httptest.NewServer(transport.AHPHandler(transport.AcceptOptions{Token: Token, ReadLimit: 2 << 20}, serve))
	t.Cleanup(srv.Close)
	url := "ws" + strings.TrimPrefix(srv.URL, "http") + "/ahp"
	return func(t testing.TB) transport.MessageConn {
		ctx, cancel := context.WithTimeout(context.Background(), dialTimeout)
		defer cancel()
		mc, err := transport.DialWebSocket(ctx, url, bearer(), nil, 2<<20, false)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = mc.Close(transport.CloseNormal, "") })
		return mc
	}
}}

// TIOWebSocket is transport-io's WebSocket mapping (/transport-io).
var TIOWebSocket = Type{Name: "tio-websocket", Binary: true, Listen: func(t testing.TB, serve func(context.Context, transport.MessageConn)) func(testing.TB) transport.MessageConn {
	srv := httptest.NewServer(transport.TIOWebSocketHandler(transport.TIOOptions{Token: Token}, serve))
	t.Cleanup(srv.Close)
	url := "ws" + strings.TrimPrefix(srv.URL, "http") + transport.TIOPath
	return func(t testing.TB) transport.MessageConn {
		ctx, cancel := context.WithTimeout(context.Background(), dialTimeout)
		defer cancel()
		mc, err := transport.DialTIOWebSocket(ctx, url, bearer(), nil, false)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = mc.Close(transport.CloseNormal, "") })
		return mc
	}
}}

// WebTransport is transport-io over WebTransport (HTTP/3, QUIC over a
// loopback UDP socket), with a development certificate pinned by its
// SHA-256.
var WebTransport = Type{Name: "webtransport", Binary: true, Listen: func(t testing.TB, serve func(context.Context, transport.MessageConn)) func(testing.TB) transport.MessageConn {
	cert, err := tlscert.LoadOrCreateDev(t.TempDir(), []string{"127.0.0.1"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	pin, err := tlscert.ParsePin(tlscert.Pin(cert))
	if err != nil {
		t.Fatal(err)
	}
	pc, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	srv := transport.NewWebTransportServer(&tls.Config{Certificates: []tls.Certificate{cert}}, transport.TIOOptions{Token: Token}, nil, serve)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(pc) }()
	t.Cleanup(func() {
		_ = srv.Close()
		<-served
	})
	url := "https://" + pc.LocalAddr().String() + transport.TIOPath
	return func(t testing.TB) transport.MessageConn {
		ctx, cancel := context.WithTimeout(context.Background(), dialTimeout)
		defer cancel()
		mc, err := transport.DialWebTransport(ctx, url, bearer(), &tls.Config{InsecureSkipVerify: true, VerifyPeerCertificate: tlscert.VerifyPin(pin)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = mc.Close(transport.CloseNormal, "") })
		return mc
	}
}}

func bearer() http.Header { return http.Header{"Authorization": {"Bearer " + Token}} }
