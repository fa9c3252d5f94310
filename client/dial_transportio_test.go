package client

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
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
	// Well under a QUIC timeout, so that waiting one out (the defect)
	// fails the test rather than passing late; generous for a loopback
	// refusal.
	limit := 2 * time.Second
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
		t.Errorf("Dial took %v, want well under %v", elapsed, limit)
	}
}

// TestDialAutoShortTimeout: a TLS server that answers TCP only (404 to
// the upgrade) and not UDP: auto reports the WebSocket mapping's 404 once
// WebTransport has had webTransportAfterWebSocket more, well within the
// --connect-timeout (it once spent the whole timeout on QUIC).
func TestDialAutoShortTimeout(t *testing.T) {
	srv := httptest.NewTLSServer(http.NotFoundHandler())
	defer srv.Close()
	sum := sha256.Sum256(srv.Certificate().Raw)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err := Dial(ctx, srv.URL+"/", Options{Transport: TransportAuto, CertHash: hex.EncodeToString(sum[:]), ClientName: "short-timeout-test"})
	host := strings.TrimPrefix(srv.URL, "https://")
	if want := host + " has no endpoint /transport-io (HTTP 404): is it a sidecar? One answers"; err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("Dial: %v; want the WebSocket mapping's HTTP 404 (the fallback was tried): %q", err, want)
	}
}

// TestDialNoEndpoint: a TLS server without the endpoint (HTTP 404 to the
// upgrade) is named with the path asked for and the URLs a sidecar
// answers at, under the base path the URL suggests (the transport-io dial
// used to quote the library: "expected handshake response status code
// 101 but got 404"); a page, or a redirect to one, where an upgrade was
// expected (wss://HOST/vm1 of a daemon under /vm1) is worded the same way.
func TestDialNoEndpoint(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/vm1": // what a daemon with base_path /vm1 answers
			http.Redirect(w, r, "/vm1/", http.StatusTemporaryRedirect)
		case "/vm1/":
			_, _ = w.Write([]byte("<!doctype html>"))
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	sum := sha256.Sum256(srv.Certificate().Raw)
	host := strings.TrimPrefix(srv.URL, "https://")
	root := "https://" + host + "/ (transport-io, also the web page) or wss://" + host + "/ahp (plain AHP)"
	atRoot := "is it a sidecar? One answers at " + root + "; one served under a base path (listener.base_path, or a proxy's location /vm1/) at https://" + host + "/vm1/ and wss://" + host + "/vm1/ahp"
	under := func(base string) string {
		return "for a sidecar under " + base + "/ (its listener.base_path, or a proxy's location), use https://" + host + base + "/ (transport-io, also the web page) or wss://" + host + base + "/ahp (plain AHP); for one with no base path, " + root
	}
	for _, tc := range []struct{ url, mode, want string }{
		{srv.URL, TransportWebSocket, host + " has no endpoint /transport-io (HTTP 404): " + atRoot},
		{"wss://" + host + "/ahp", TransportAuto, host + " has no endpoint /ahp (HTTP 404): " + atRoot},
		{srv.URL + "/foo", TransportWebSocket, host + " has no endpoint /foo/transport-io (HTTP 404): " + under("/foo")},
		{srv.URL + "/vm2/", TransportAuto, host + " has no endpoint /vm2/transport-io (HTTP 404): " + under("/vm2")},
		{srv.URL + "/vm2/ahp", TransportAuto, host + " has no endpoint /vm2/ahp (HTTP 404): " + under("/vm2")},
		{"wss://" + host + "/vm2", TransportAuto, host + " has no endpoint /vm2 (HTTP 404): " + under("/vm2")},
		{"wss://" + host + "/vm1", TransportAuto, host + " answered /vm1 with HTTP 307, not a WebSocket upgrade: " + under("/vm1")},
		{"wss://" + host + "/vm1/", TransportAuto, host + " answered /vm1/ with HTTP 200, not a WebSocket upgrade: " + under("/vm1")},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := Dial(ctx, tc.url, Options{Transport: tc.mode, CertHash: hex.EncodeToString(sum[:]), ClientName: "no-endpoint-test"})
		cancel()
		if err == nil || err.Error() != tc.want {
			t.Errorf("Dial(%s, %s): %v\nwant %s", tc.url, tc.mode, err, tc.want)
		}
	}
}

// TestDialWebTransportNoAnswer: --transport webtransport to a UDP port
// nothing answers on says so, within the caller's deadline, with what to
// check (not quic-go's "no recent network activity").
func TestDialWebTransportNoAnswer(t *testing.T) {
	// TCP listens (a refused TCP port says nothing listens at all:
	// TestDialWebTransportNothingListening); UDP does not answer.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	addr := l.Addr().String()
	_, port, _ := net.SplitHostPort(addr)
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	_, err = Dial(ctx, "https://"+addr+"/", Options{Transport: TransportWebTransport, ClientName: "no-answer-test"})
	want := addr + " did not answer over WebTransport (QUIC, UDP port " + port + ")"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("Dial: %v; want %q", err, want)
	}
}

// TestDialWebTransportNothingListening: --transport webtransport to a
// port nothing listens on, TCP refused (a killed daemon), fails at once
// as refused, ECONNREFUSED to errors.Is (forward's GiveUpWhenRefused
// needs it), instead of waiting out QUIC's handshake timeout.
func TestDialWebTransportNothingListening(t *testing.T) {
	addr := closedLoopbackPort(t)
	limit := 2 * time.Second // well under QUIC's handshake timeout
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	start := time.Now()
	_, err := Dial(ctx, "https://"+addr+"/", Options{Transport: TransportWebTransport, ClientName: "refused-test"})
	elapsed := time.Since(start)
	want := "nothing is listening at " + addr + " (connection refused)"
	if err == nil || !strings.Contains(err.Error(), want) || !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("Dial: %v; want %q, ECONNREFUSED to errors.Is", err, want)
	}
	if elapsed >= limit {
		t.Errorf("Dial took %v, want well under %v", elapsed, limit)
	}
}

// TestDialAutoSilentServer: auto against a TCP port that accepts and never
// answers (and no QUIC) runs out of time saying which transports it tried,
// not with the WebSocket library's "failed to send handshake request".
func TestDialAutoSilentServer(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	done := make(chan struct{})
	defer close(done)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() { <-done; _ = c.Close() }()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 1*time.Second)
	defer cancel()
	_, err = Dial(ctx, "https://"+l.Addr().String()+"/", Options{Transport: TransportAuto, ClientName: "silent-test"})
	want := l.Addr().String() + " did not answer in time, neither over WebTransport"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("Dial: %v; want %q", err, want)
	}
	// Plain AHP (wss://): the same, in one sentence without the library's
	// "failed to WebSocket dial: failed to send handshake request: Get ...".
	ctx, cancel = context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err = Dial(ctx, "wss://"+l.Addr().String()+"/ahp", Options{ClientName: "silent-test"})
	want = l.Addr().String() + " did not answer within --connect-timeout: is the address reachable, and is sidecar serve running there?"
	if err == nil || err.Error() != want {
		t.Fatalf("Dial wss: %v; want %q", err, want)
	}
}

// TestCheckURL: the URLs Dial refuses before dialling, in the words the
// CLI prints (it checks them up front: exit 2).
func TestCheckURL(t *testing.T) {
	for raw, want := range map[string]string{
		"https://127.0.0.1:4433":     "",
		"wss://127.0.0.1:4433/ahp":   "",
		"wss://h:1/transport-io":     "",
		"127.0.0.1:4433":             `invalid URL "127.0.0.1:4433": want https://`,
		"ftp://x":                    `invalid URL "ftp://x": scheme must be https://`,
		"https://h:99999":            `port "99999" is not between 1 and 65535`,
		"wss://h:1/ahp#webtransport": "needs an https:// URL",
		"http://h:1#webtransport":    "http://h:1: WebTransport always runs over TLS: use https://",
	} {
		mode := TransportAuto
		if r, ok := strings.CutSuffix(raw, "#webtransport"); ok {
			raw, mode = r, TransportWebTransport
		}
		_, err := CheckURL(raw, mode)
		if want == "" && err != nil || want != "" && (err == nil || !strings.Contains(err.Error(), want)) {
			t.Errorf("CheckURL(%q, %s) = %v, want %q", raw, mode, err, want)
		}
	}
}

// TestDialNotTLS: a port where another service answers (a plain HTTP
// server, an SSH banner) is named as such over both WebSocket endpoints,
// not with crypto/tls's "first record does not look like a TLS handshake"
// or net/http's "server gave HTTP response to HTTPS client".
func TestDialNotTLS(t *testing.T) {
	for name, tc := range map[string]struct{ answer, want string }{
		"http": {"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n", "answered with plain HTTP: is it a sidecar?"},
		"ssh":  {"SSH-2.0-OpenSSH_9.6\r\n", "answered with something that is not TLS: is it a sidecar?"},
	} {
		t.Run(name, func(t *testing.T) {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			served := make(chan struct{})
			go func() {
				defer close(served)
				for {
					c, err := l.Accept()
					if err != nil {
						return
					}
					_, _ = c.Read(make([]byte, 512)) // the ClientHello
					_, _ = c.Write([]byte(tc.answer))
					_ = c.Close()
				}
			}()
			defer func() { _ = l.Close(); <-served }()
			for raw, mode := range map[string]string{
				"wss://" + l.Addr().String() + "/ahp": TransportAuto, // /ahp: no transport-io
				"https://" + l.Addr().String():        TransportWebSocket,
			} {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				_, err := Dial(ctx, raw, Options{Transport: mode, ClientName: "not-tls-test"})
				cancel()
				if want := l.Addr().String() + " " + tc.want; err == nil || !strings.Contains(err.Error(), want) {
					t.Errorf("Dial(%s): %v; want %q", raw, err, want)
				}
			}
		})
	}
}

// TestDialPlainHTTP: http:// asks for no TLS, so auto tries only the
// WebSocket mapping in plain text (WebTransport is always TLS: it used to
// be tried, and could succeed, over TLS); a TLS-only server's 400 says to
// use https://, in the scheme typed.
func TestDialPlainHTTP(t *testing.T) {
	var got []string
	var mu sync.Mutex
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.URL.Path)
		mu.Unlock()
		http.Error(w, "Client sent an HTTP request to an HTTPS server.", http.StatusBadRequest)
	}))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	for raw, want := range map[string]string{
		srv.URL:                          host + " answered plain http:// with HTTP 400: the sidecar always speaks TLS: use https://",
		"ws://" + host + "/ahp":          host + " answered plain ws:// with HTTP 400: the sidecar always speaks TLS: use wss://",
		srv.URL + "/ahp":                 host + " answered plain http:// with HTTP 400: the sidecar always speaks TLS: use https://",
		"ws://" + host + "/transport-io": host + " answered plain ws:// with HTTP 400: the sidecar always speaks TLS: use wss://",
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := Dial(ctx, raw, Options{Transport: TransportAuto, ClientName: "plain-test"})
		cancel()
		if err == nil || err.Error() != want {
			t.Errorf("Dial(%s): %v\nwant %s", raw, err, want)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	slices.Sort(got)
	if want := []string{"/ahp", "/ahp", "/transport-io", "/transport-io"}; !slices.Equal(got, want) {
		t.Errorf("requests %q, want one per dial: %q", got, want)
	}
}

// TestDialBasePathURLs: an https:// (here http://) URL names the daemon's
// base path, and transport-io is dialled beneath it; a URL that ends at
// an endpoint (…/ahp, …/transport-io) is dialled as given.
func TestDialBasePathURLs(t *testing.T) {
	paths := make(chan string, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		paths <- r.URL.Path
		http.NotFound(w, r)
	}))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	for _, tc := range []struct{ url, mode, path string }{
		{srv.URL + "/vm1/", TransportAuto, "/vm1/transport-io"},
		{srv.URL + "/vm1", TransportAuto, "/vm1/transport-io"},
		{srv.URL + "/a/b/", TransportWebSocket, "/a/b/transport-io"},
		{srv.URL + "/vm1/transport-io", TransportAuto, "/vm1/transport-io"},
		{srv.URL + "/vm1/ahp", TransportAuto, "/vm1/ahp"},
		{srv.URL + "/vm1/", TransportAHP, "/vm1/ahp"},
		{srv.URL + "/vm1/transport-io", TransportAHP, "/vm1/ahp"},
		{srv.URL + "/vm1/ahp", TransportWebSocket, "/vm1/transport-io"},
		{"ws://" + host + "/vm1/ahp", TransportAuto, "/vm1/ahp"},
		{"ws://" + host + "/vm1/transport-io", TransportAuto, "/vm1/transport-io"},
		{"ws://" + host, TransportAuto, "/ahp"},
		{"ws://" + host + "/", TransportAuto, "/ahp"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := Dial(ctx, tc.url, Options{Transport: tc.mode, ClientName: "base-path-test"})
		cancel()
		if err == nil {
			t.Fatalf("Dial(%s, %s) succeeded against a 404 server", tc.url, tc.mode)
		}
		if got := <-paths; got != tc.path {
			t.Errorf("Dial(%s, %s) asked for %s, want %s", tc.url, tc.mode, got, tc.path)
		}
	}
}
