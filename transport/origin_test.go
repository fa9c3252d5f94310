package transport

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/sidecar-dev/sidecar/auth"
)

func TestNormalizeOrigin(t *testing.T) {
	for in, want := range map[string]string{
		"https://Example.COM":      "https://example.com:443",
		"https://example.com:443/": "https://example.com:443",
		"http://example.com":       "http://example.com:80",
		"https://[::1]:4433":       "https://[::1]:4433",
		"https://127.0.0.1:4433":   "https://127.0.0.1:4433",
		"null":                     "",
		"ftp://x":                  "",
		"https://x/path":           "",
		"https://x:0":              "",
		"https://u@x":              "",
	} {
		got, ok := NormalizeOrigin(in)
		if got != want || ok != (want != "") {
			t.Errorf("NormalizeOrigin(%q) = %q, %v; want %q", in, got, ok, want)
		}
	}
}

func TestOriginsAllowed(t *testing.T) {
	addr := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 4433}
	o := NewOrigins(SelfOrigins(addr, "box"), []string{"https://app.example.com", "http://plain.example:8080"})
	for origin, want := range map[string]bool{
		"":                               true, // no browser
		"https://127.0.0.1:4433":         true,
		"https://localhost:4433":         true,
		"https://[::1]:4433":             true,
		"https://box:4433":               true,
		"https://app.example.com":        true,
		"https://app.example.com:443":    true,
		"http://plain.example:8080":      true,
		"http://127.0.0.1:4433":          false, // the listener is TLS
		"https://127.0.0.1:4434":         false, // another port
		"https://evil.example:4433":      false, // whatever Host it sends
		"https://app.example.com:8443":   false,
		"null":                           false,
		"https://app.example.com.evil.x": false,
	} {
		if got := o.Allowed(origin); got != want {
			t.Errorf("Allowed(%q) = %v, want %v", origin, got, want)
		}
	}
	all := SelfOrigins(&net.TCPAddr{IP: net.IPv4zero, Port: 9})
	if !slices.Contains(all, "https://127.0.0.1:9") || !slices.Contains(all, "https://localhost:9") {
		t.Errorf("SelfOrigins(0.0.0.0:9) = %v, want loopback names too", all)
	}
	if got := SelfOrigins(&net.TCPAddr{IP: net.IPv4(10, 1, 2, 3), Port: 9}); !slices.Equal(got, []string{"https://10.1.2.3:9"}) {
		t.Errorf("SelfOrigins(10.1.2.3:9) = %v", got)
	}
}

// originServer serves /ahp and /transport-io (WebSocket mapping) over TLS
// behind one Origins rule that allows the server's own origin and
// https://ok.example; refusals are collected.
func originServer(t *testing.T) (base string, refused chan string) {
	t.Helper()
	refused = make(chan string, 16)
	cert, _ := devCert(t)
	mux := http.NewServeMux()
	hs := httptest.NewUnstartedServer(mux)
	hs.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	hs.StartTLS()
	t.Cleanup(hs.Close)
	origins := NewOrigins(SelfOrigins(hs.Listener.Addr().(*net.TCPAddr)), []string{"https://ok.example"})
	origins.OnRefuse = func(r *http.Request, origin string) { refused <- r.URL.Path + " " + origin }
	mux.Handle("/ahp", AHPHandler(AcceptOptions{Auth: auth.NewStatic("tok"), Origins: origins, ReadLimit: 1 << 20}, echoServe))
	mux.Handle(TIOPath, TIOWebSocketHandler(TIOOptions{Auth: auth.NewStatic("tok"), Origins: origins}, echoServe))
	return hs.URL, refused
}

// Every endpoint applies the same rule: the listener's own origin (its
// address and https, not the Host header) and listener.origins pass; any
// other is answered 403 and reported with the origin.
func TestOriginRuleWebSocket(t *testing.T) {
	base, refused := originServer(t)
	self := base // https://127.0.0.1:PORT
	port := base[strings.LastIndexByte(base, ':'):]
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	defer client.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, path := range []string{"/ahp", TIOPath} {
		url := "wss" + strings.TrimPrefix(base, "https") + path + "?token=tok"
		for _, c := range []struct {
			origin, host string
			ok           bool
		}{
			{"", "", true},
			{self, "", true},
			{"https://localhost" + port, "", true},
			{"https://ok.example", "", true},
			{"http://127.0.0.1" + port, "", false},                        // wrong scheme for a TLS listener
			{"https://evil.example" + port, "evil.example" + port, false}, // Host agrees with Origin: still refused
			{"https://other.example", "", false},
		} {
			h := http.Header{}
			if c.origin != "" {
				h.Set("Origin", c.origin)
			}
			if c.host != "" {
				h.Set("Host", c.host)
			}
			conn, res, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPClient: client, HTTPHeader: h, Host: c.host})
			if c.ok {
				if err != nil {
					t.Errorf("%s origin %q: %v, want accepted", path, c.origin, err)
					continue
				}
				conn.CloseNow()
				continue
			}
			if err == nil {
				conn.CloseNow()
			}
			if res == nil || res.StatusCode != http.StatusForbidden {
				t.Errorf("%s origin %q: %v (response %v), want 403", path, c.origin, err, res)
				continue
			}
			select {
			case got := <-refused:
				if got != path+" "+c.origin {
					t.Errorf("refusal reported as %q, want %q", got, path+" "+c.origin)
				}
			default:
				t.Errorf("%s origin %q refused without a report", path, c.origin)
			}
		}
	}
}

// WebTransport: the rule is checked before webtransport-go's own (which
// wants Origin equal to Host and answers a bare 400): a foreign origin
// gets 403 and is reported, the own origin and listener.origins pass.
func TestOriginRuleWebTransport(t *testing.T) {
	cert, pin := devCert(t)
	pc, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	port := pc.LocalAddr().(*net.UDPAddr).Port
	refused := make(chan string, 4)
	origins := NewOrigins(SelfOrigins(&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port}), []string{"https://ok.example"})
	origins.OnRefuse = func(_ *http.Request, origin string) { refused <- origin }
	srv := NewWebTransportServer(&tls.Config{Certificates: []tls.Certificate{cert}}, TIOOptions{Auth: auth.NewStatic("tok"), Origins: origins}, nil, echoServe)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(pc) }()
	defer func() { srv.Close(); <-served }()

	url := "https://" + pc.LocalAddr().String() + TIOPath + "?token=tok"
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, c := range []struct {
		origin string
		ok     bool
	}{
		{"", true},
		{"https://127.0.0.1:" + strconv.Itoa(port), true},
		{"https://localhost:" + strconv.Itoa(port), true},
		{"https://ok.example", true},
		{"https://evil.example:" + strconv.Itoa(port), false},
		{"http://127.0.0.1:" + strconv.Itoa(port), false},
	} {
		h := http.Header{}
		if c.origin != "" {
			h.Set("Origin", c.origin)
		}
		mc, err := DialWebTransport(ctx, url, h, pinned(t, pin))
		if c.ok {
			if err != nil {
				t.Errorf("origin %q: %v, want accepted", c.origin, err)
				continue
			}
			roundTrip(t, mc)
			mc.Close(CloseNormal, "")
			continue
		}
		var se *HTTPError
		if !errors.As(err, &se) || se.StatusCode != http.StatusForbidden {
			if mc != nil {
				mc.Close(CloseNormal, "")
			}
			t.Errorf("origin %q: %v, want HTTP 403", c.origin, err)
			continue
		}
		select {
		case got := <-refused:
			if got != c.origin {
				t.Errorf("refusal reported for %q, want %q", got, c.origin)
			}
		default:
			t.Errorf("origin %q refused without a report", c.origin)
		}
	}
}
