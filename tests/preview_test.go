package tests

// The port preview (package preview) through the real binary: a
// workload app on loopback (preview_app_test.go) opened at
// <base>/ports/<port>/ with the session cookie of POST /web/session, or
// the token; its page, assets, a large download, an upload, server-sent
// events, a WebSocket echo, redirects and cookies; and every request
// refused without a login, cross-site, or to a port the policy refuses.

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/target"
	"github.com/chromedp/chromedp"
	"github.com/coder/websocket"
)

// previewBig is the download's size: 256 MiB, or $SIDECAR_PREVIEW_BIG_MIB.
func previewBig() int64 {
	if v, err := strconv.Atoi(os.Getenv("SIDECAR_PREVIEW_BIG_MIB")); err == nil && v > 0 {
		return int64(v) << 20
	}
	return 256 << 20
}

// pageBase is the server's base path ("" or "/vm1").
func (s *server) pageBase() string {
	return strings.TrimSuffix(strings.TrimPrefix(s.url, "wss://"+s.host), "/ahp")
}

// previewURL is port's preview on s, path appended ("/" for its root).
func (s *server) previewURL(port int, path string) string {
	return fmt.Sprintf("https://%s%s/ports/%d%s", s.host, s.pageBase(), port, path)
}

// previewClient is an HTTP/1.1 client pinned to s with keep-alive, that
// does not follow redirects; bounded by each request's context.
func (s *server) previewClient(t *testing.T) *http.Client {
	tr := &http.Transport{TLSClientConfig: s.tlsConfig(), MaxIdleConnsPerHost: 4}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// previewLogin posts the token to /web/session and returns the session
// cookie, checking its attributes.
func (s *server) previewLogin(t *testing.T, c *http.Client) *http.Cookie {
	t.Helper()
	resp := do(t, c, "POST", "https://"+s.host+s.pageBase()+"/web/session", nil, http.Header{"Authorization": {"Bearer " + s.token}})
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST /web/session: %s %s", resp.Status, body)
	}
	var sc *http.Cookie
	for _, k := range resp.Cookies() {
		if k.Name == "sidecar_preview" {
			sc = k
		}
	}
	wantPath := s.pageBase()
	if wantPath == "" {
		wantPath = "/"
	}
	if sc == nil || len(sc.Value) < 40 || !sc.HttpOnly || !sc.Secure || sc.SameSite != http.SameSiteStrictMode || sc.Path != wantPath || sc.MaxAge <= 0 {
		t.Fatalf("session cookie %+v (Set-Cookie %q), want HttpOnly, Secure, SameSite=Strict, Path=%s, a Max-Age", sc, resp.Header.Values("Set-Cookie"), wantPath)
	}
	return sc
}

// do sends one request (body may be nil) bounded by waitTimeout for its
// headers; the caller reads and closes the body (closed at cleanup).
func do(t *testing.T, c *http.Client, method, url string, body io.Reader, hdr http.Header) *http.Response {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	for k, vs := range hdr {
		req.Header[k] = vs
	}
	if h := hdr.Get("Host"); h != "" {
		req.Host = h
	}
	ctx, cancel := context.WithCancel(context.Background())
	timer := time.AfterFunc(waitTimeout, cancel)
	req = req.WithContext(ctx)
	resp, err := c.Do(req)
	timer.Stop()
	if err != nil {
		cancel()
		t.Fatalf("%s %s: %v", method, url, err)
	}
	t.Cleanup(func() { resp.Body.Close(); cancel() })
	return resp
}

// readAll reads resp's body within waitTimeout.
func readAll(t *testing.T, resp *http.Response) string {
	t.Helper()
	timer := time.AfterFunc(waitTimeout, func() { resp.Body.Close() })
	defer timer.Stop()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading %s: %v", resp.Request.URL, err)
	}
	return string(b)
}

func cookieHeader(c *http.Cookie) http.Header {
	return http.Header{"Cookie": {c.Name + "=" + c.Value}}
}

// expect checks resp's status and, when body is not "", its exact body.
func expect(t *testing.T, resp *http.Response, status int, body string) string {
	t.Helper()
	got := readAll(t, resp)
	if resp.StatusCode != status || (body != "" && got != body) {
		t.Fatalf("%s %s: %s %q, want %d %q", resp.Request.Method, resp.Request.URL, resp.Status, tail(got, 300), status, body)
	}
	return got
}

// TestPreviewProxiesApp: logged in with the session cookie, the preview
// serves the app's page and assets, a 256 MiB download and an upload
// (SHA-256 both ways), server-sent events one at a time as sent, a
// WebSocket echo; rewrites redirects and the app's cookies under the
// prefix; sets X-Forwarded-*; and the app never sees the session cookie
// or the token, whether the request came with the cookie or the token.
func TestPreviewProxiesApp(t *testing.T) {
	for _, base := range []string{"", "/vm1"} {
		t.Run("base="+base, func(t *testing.T) {
			app := startPreviewApp(t)
			listener := ""
			if base != "" {
				listener = "  base_path = \"" + base + "\"\n"
			}
			s := startServerListener(t, listener, "metrics {\n  listen = \"127.0.0.1:0\"\n}\n")
			c := s.previewClient(t)
			sc := s.previewLogin(t, c)
			ck := cookieHeader(sc)
			prefix := base + "/ports/" + strconv.Itoa(app.port)

			expect(t, do(t, c, "GET", s.previewURL(app.port, "/"), nil, ck), 200, appHTML)
			expect(t, do(t, c, "GET", s.previewURL(app.port, "/rel.css"), nil, ck), 200, appRelCSS)
			expect(t, do(t, c, "GET", s.previewURL(app.port, "/abs.js"), nil, ck), 200, appAbsJS)
			// Kept alive: the three came on one connection to the app.
			if r := app.requests(); len(r) != 3 || r[0].Remote != r[1].Remote || r[1].Remote != r[2].Remote {
				t.Errorf("the app got %d requests from %v, want 3 on one kept-alive connection", len(r), r)
			}
			// An app's own ?token= (Jupyter's) is passed on, and the daemon
			// does not take it for its own (no warning about the URL).
			expect(t, do(t, c, "GET", s.previewURL(app.port, "/rel.css?token=apps-own"), nil, ck), 200, appRelCSS)
			// Without its slash: redirected to it, the query kept.
			resp := do(t, c, "GET", s.previewURL(app.port, "")+"?q=1", nil, ck)
			expect(t, resp, http.StatusPermanentRedirect, "")
			if loc := resp.Header.Get("Location"); loc != prefix+"/?q=1" {
				t.Errorf("Location %q, want %q", loc, prefix+"/?q=1")
			}

			// The app's redirects and cookies, under the prefix.
			resp = do(t, c, "GET", s.previewURL(app.port, "/redirect"), nil, ck)
			expect(t, resp, http.StatusFound, "")
			if loc := resp.Header.Get("Location"); loc != prefix+"/rel.css?x=1" {
				t.Errorf("relative redirect: Location %q, want %q", loc, prefix+"/rel.css?x=1")
			}
			resp = do(t, c, "GET", s.previewURL(app.port, "/redirect-abs"), nil, ck)
			expect(t, resp, http.StatusFound, "")
			if loc := resp.Header.Get("Location"); loc != prefix+"/rel.css" {
				t.Errorf("absolute redirect to the app: Location %q, want %q", loc, prefix+"/rel.css")
			}
			resp = do(t, c, "GET", s.previewURL(app.port, "/setcookie"), nil, ck)
			expect(t, resp, 200, "")
			wantCookies := []string{"app=1; Path=" + prefix + "/; HttpOnly", "deep=2; Path=" + prefix + "/sub"}
			if got := resp.Header.Values("Set-Cookie"); strings.Join(got, "|") != strings.Join(wantCookies, "|") {
				t.Errorf("Set-Cookie %q, want %q (Domain dropped, the forged session cookie dropped)", got, wantCookies)
			}
			if v := resp.Header.Get("Clear-Site-Data"); v != "" {
				t.Errorf("Clear-Site-Data %q reached the browser", v)
			}

			// What the app is told, and not told: with the cookie (and an
			// app cookie beside it), and with the token.
			hdr := http.Header{"Cookie": {"app=1; " + sc.Name + "=" + sc.Value + "; other=x"},
				"Connection": {"X-Hop"}, "X-Hop": {"1"}, "X-Forwarded-Prefix": {"/forged"}}
			body := expect(t, do(t, c, "GET", s.previewURL(app.port, "/headers"), nil, hdr), 200, "")
			var got struct {
				Host   string
				Header http.Header
			}
			if err := json.Unmarshal([]byte(body), &got); err != nil {
				t.Fatal(err)
			}
			if got.Host != "localhost:"+strconv.Itoa(app.port) || got.Header.Get("Cookie") != "app=1; other=x" ||
				got.Header.Get("X-Forwarded-Prefix") != prefix || got.Header.Get("X-Forwarded-Host") != s.host ||
				got.Header.Get("X-Forwarded-Proto") != "https" || got.Header.Get("X-Forwarded-For") != "127.0.0.1" ||
				got.Header.Get("X-Hop") != "" || len(got.Header.Values("X-Forwarded-Prefix")) != 1 {
				t.Errorf("the app got Host %q and headers %v", got.Host, got.Header)
			}
			expect(t, do(t, c, "GET", s.previewURL(app.port, "/headers"), nil, http.Header{"Authorization": {"Bearer " + s.token}}), 200, "")

			// Server-sent events: event i+1 is sent only once the test
			// has read event i, so a proxy that batched would hang here.
			resp = do(t, c, "GET", s.previewURL(app.port, "/sse?n=5&paced=1"), nil, ck)
			if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
				t.Fatalf("SSE: %s %q", resp.Status, resp.Header.Get("Content-Type"))
			}
			br := bufio.NewReader(resp.Body)
			for i := range 5 {
				var lines []string
				deadline := time.AfterFunc(waitTimeout, func() { resp.Body.Close() })
				for {
					line, err := br.ReadString('\n')
					if err != nil {
						t.Fatalf("SSE event %d: %v (got %q)", i, err, lines)
					}
					if line == "\n" {
						break
					}
					lines = append(lines, line)
				}
				deadline.Stop()
				if want := fmt.Sprintf("data: event %d\n", i); strings.Join(lines, "") != want {
					t.Fatalf("SSE event %d: %q, want %q", i, lines, want)
				}
				if i < 4 {
					app.sseNext <- struct{}{}
				}
			}
			resp.Body.Close()

			// WebSocket echo, a text and a 1 MiB binary message.
			ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
			defer cancel()
			wsURL := "wss" + strings.TrimPrefix(s.previewURL(app.port, "/ws"), "https")
			ws, _, err := websocket.Dial(ctx, wsURL, &websocket.DialOptions{HTTPClient: s.previewClient(t), HTTPHeader: ck})
			if err != nil {
				t.Fatalf("WebSocket through the preview: %v", err)
			}
			ws.SetReadLimit(4 << 20)
			for _, m := range [][]byte{[]byte("hello"), bigBlock} {
				typ := websocket.MessageText
				if len(m) > 100 {
					typ = websocket.MessageBinary
				}
				if err := ws.Write(ctx, typ, m); err != nil {
					t.Fatal(err)
				}
				gt, gb, err := ws.Read(ctx)
				if err != nil || gt != typ || string(gb) != string(m) {
					t.Fatalf("WebSocket echo: %v %v %d bytes (sent %d)", err, gt, len(gb), len(m))
				}
			}
			_ = ws.Close(websocket.StatusNormalClosure, "")

			// An upload, streamed to the app.
			up := int64(16 << 20)
			pr, pw := io.Pipe()
			go func() { pw.CloseWithError(writeBig(pw, up)) }()
			upBody := expect(t, do(t, c, "POST", s.previewURL(app.port, "/upload"), pr, ck), 200, "")
			if want := fmt.Sprintf("%d %s", up, bigSHA256(up)); upBody != want {
				t.Errorf("upload: app got %q, want %q", upBody, want)
			}

			// The download, streamed through (chunked: no length known).
			n := previewBig()
			start := time.Now()
			resp = do(t, c, "GET", s.previewURL(app.port, "/big?chunked=1&n="+strconv.FormatInt(n, 10)), nil, ck)
			h := sha256.New()
			timer := time.AfterFunc(4*waitTimeout, func() { resp.Body.Close() })
			got2, err := io.Copy(h, resp.Body)
			timer.Stop()
			if err != nil || got2 != n || hex.EncodeToString(h.Sum(nil)) != bigSHA256(n) {
				t.Fatalf("download: %d of %d bytes, err %v, SHA-256 %x want %s", got2, n, err, h.Sum(nil), bigSHA256(n))
			}
			t.Logf("download of %d MiB through the preview: %v", n>>20, time.Since(start).Round(time.Millisecond))

			app.neverSawCredentials(t, s.token, sc.Value)
			if strings.Contains(s.p.stderr.String(), "token in the URL query") {
				t.Error("the app's ?token= was taken for the daemon's")
			}

			// The traffic is counted.
			var m []string
			if _, ok := s.p.stderr.waitMatch(waitTimeout, func(text string) bool {
				m = metricsLine.FindStringSubmatch(text)
				return m != nil
			}); !ok {
				t.Fatal("no metrics listening line")
			}
			mt := scrapeMetrics(t, m[1])
			if v := mt["sidecar_preview_received_bytes_total"]; v < float64(n) {
				t.Errorf("sidecar_preview_received_bytes_total %v, want at least the download's %d", v, n)
			}
			if v := mt["sidecar_preview_sent_bytes_total"]; v < float64(up) {
				t.Errorf("sidecar_preview_sent_bytes_total %v, want at least the upload's %d", v, up)
			}
			// 4 GETs of the page and assets, 2 redirects, setcookie, 2
			// headers, SSE, WebSocket, upload, download (the 308 is the
			// daemon's own).
			if v := mt[`sidecar_preview_requests_total{result="proxied"}`]; v != 13 {
				t.Errorf(`sidecar_preview_requests_total{result="proxied"} %v, want 13`, v)
			}
			if v := mt["sidecar_preview_upgrades_total"]; v != 1 {
				t.Errorf("sidecar_preview_upgrades_total %v, want 1", v)
			}
			if v := mt["sidecar_preview_active"]; v != 0 {
				t.Errorf("sidecar_preview_active %v, want 0", v)
			}
		})
	}
}

// TestPreviewRefused: no cookie, a garbage one, one revoked by logout, an
// expired one, one of a daemon under another base path: every preview
// request is refused (401), WebSocket upgrades included, and never
// reaches the app; so are cross-site requests (403), a port the policy
// refuses (the daemon's own; any port when tcp.allow leaves out
// loopback), bodies over the bound (413) and requests over the
// per-principal bound (429).
func TestPreviewRefused(t *testing.T) {
	app := startPreviewApp(t)
	s := startServerListener(t, "  base_path = \"/vm1\"\n", "preview {\n  session_ttl = \"2s\"\n  max_connections_per_principal = 2\n  max_body_bytes = 1000\n}\n")
	other := startServerListener(t, "  base_path = \"/vm2\"\n", "")
	c := s.previewClient(t)
	sc := s.previewLogin(t, c)
	otherCookie := other.previewLogin(t, other.previewClient(t))
	before := len(app.requests())

	refused := func(what string, hdr http.Header) {
		t.Helper()
		for _, path := range []string{"/", "/abs.js", "/headers"} {
			expect(t, do(t, c, "GET", s.previewURL(app.port, path), nil, hdr), http.StatusUnauthorized, "")
		}
		expect(t, do(t, c, "POST", s.previewURL(app.port, "/upload"), strings.NewReader("x"), hdr), http.StatusUnauthorized, "")
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		wsURL := "wss" + strings.TrimPrefix(s.previewURL(app.port, "/ws"), "https")
		if ws, resp, err := websocket.Dial(ctx, wsURL, &websocket.DialOptions{HTTPClient: c, HTTPHeader: hdr}); err == nil || resp == nil || resp.StatusCode != http.StatusUnauthorized {
			if ws != nil {
				ws.CloseNow()
			}
			t.Fatalf("%s: WebSocket upgrade not refused with 401: %v %v", what, resp, err)
		}
	}
	refused("no cookie", nil)
	refused("a garbage cookie", http.Header{"Cookie": {"sidecar_preview=" + strings.Repeat("A", 43)}})
	refused("another base path's cookie", cookieHeader(otherCookie))
	refused("a wrong token", http.Header{"Authorization": {"Bearer wrong"}})

	// Cross-site, with a valid cookie.
	expect(t, do(t, c, "GET", s.previewURL(app.port, "/"), nil, http.Header{"Cookie": {"sidecar_preview=" + sc.Value}, "Sec-Fetch-Site": {"cross-site"}}), http.StatusForbidden, "")
	expect(t, do(t, c, "POST", s.previewURL(app.port, "/upload"), strings.NewReader("x"), http.Header{"Cookie": {"sidecar_preview=" + sc.Value}, "Origin": {"https://evil.example"}}), http.StatusForbidden, "")

	// The policy: the daemon's own listener.
	_, ownPort, _ := strings.Cut(s.host, ":")
	op, _ := strconv.Atoi(ownPort)
	body := expect(t, do(t, c, "GET", s.previewURL(op, "/"), nil, cookieHeader(sc)), http.StatusForbidden, "")
	if !strings.Contains(body, "not allowed by policy") {
		t.Errorf("own port: %q", body)
	}

	// The body bound.
	expect(t, do(t, c, "POST", s.previewURL(app.port, "/upload"), strings.NewReader(strings.Repeat("x", 1001)), cookieHeader(sc)), http.StatusRequestEntityTooLarge, "")

	// The per-principal bound: two streams held, the third refused; one
	// ended, a new one passes.
	held := []*http.Response{
		do(t, c, "GET", s.previewURL(app.port, "/sse?n=1&hold=1"), nil, cookieHeader(sc)),
		do(t, c, "GET", s.previewURL(app.port, "/sse?n=1&hold=1"), nil, cookieHeader(sc)),
	}
	expect(t, do(t, c, "GET", s.previewURL(app.port, "/rel.css"), nil, cookieHeader(sc)), http.StatusTooManyRequests, "")
	held[0].Body.Close()
	deadline := time.Now().Add(waitTimeout)
	for {
		resp := do(t, c, "GET", s.previewURL(app.port, "/rel.css"), nil, cookieHeader(sc))
		readAll(t, resp)
		if resp.StatusCode == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a closed stream did not give its place back: %s", resp.Status)
		}
	}
	held[1].Body.Close()

	// Logout revokes the session and clears the cookie.
	resp := do(t, c, "POST", "https://"+s.host+"/vm1/web/logout", nil, cookieHeader(sc))
	expect(t, resp, 200, "")
	if sc2 := resp.Cookies(); len(sc2) != 1 || sc2[0].Name != "sidecar_preview" || sc2[0].MaxAge >= 0 {
		t.Errorf("logout Set-Cookie %q, want the cookie cleared", resp.Header.Values("Set-Cookie"))
	}
	refused("a revoked cookie", cookieHeader(sc))

	// An expired one (session_ttl 2s): waits for the expiry itself.
	sc3 := s.previewLogin(t, c)
	expect(t, do(t, c, "GET", s.previewURL(app.port, "/rel.css"), nil, cookieHeader(sc3)), 200, appRelCSS)
	<-time.After(2100 * time.Millisecond)
	refused("an expired cookie", cookieHeader(sc3))

	// Nothing refused reached the app.
	for _, r := range app.requests()[before:] {
		if r.Path != "/rel.css" && r.Path != "/sse" {
			t.Errorf("a refused request reached the app: %s", r.Path)
		}
	}
	app.neverSawCredentials(t, s.token, sc.Value, sc3.Value)
}

// TestPreviewPolicyRefusesPort: with tcp.allow leaving out 127.0.0.0/8,
// a port on 127.0.0.1 is refused (403) even logged in, as forward is.
func TestPreviewPolicyRefusesPort(t *testing.T) {
	app := startPreviewApp(t)
	s := startServer(t, "tcp {\n  allow = [\"10.0.0.0/8\"]\n}\n")
	c := s.previewClient(t)
	sc := s.previewLogin(t, c)
	body := expect(t, do(t, c, "GET", s.previewURL(app.port, "/"), nil, cookieHeader(sc)), http.StatusForbidden, "")
	if !strings.Contains(body, "not allowed by policy") {
		t.Errorf("refusal %q", body)
	}
	if n := len(app.requests()); n != 0 {
		t.Errorf("the app got %d requests", n)
	}
}

// TestPreviewSubdomain: with preview.subdomain, port N is served at
// https://N.<subdomain>/ (the Host header; loopback), after a ticket of
// /web/ticket is redeemed at /.sidecar/login for a host-only cookie and a
// page that moves on to /; the
// absolute asset works there; without the cookie, refused.
func TestPreviewSubdomain(t *testing.T) {
	app := startPreviewApp(t)
	s := startServer(t, "preview {\n  subdomain = \"preview.test\"\n}\n")
	c := s.previewClient(t)
	_, port, _ := strings.Cut(s.host, ":")
	host := fmt.Sprintf("%d.preview.test:%s", app.port, port)
	root := "https://" + s.host

	expect(t, do(t, c, "GET", root+"/abs.js", nil, http.Header{"Host": {host}}), http.StatusUnauthorized, "")

	resp := do(t, c, "POST", root+"/web/ticket", nil, http.Header{"Authorization": {"Bearer " + s.token}})
	var tk struct{ Ticket string }
	if err := json.Unmarshal([]byte(expect(t, resp, 200, "")), &tk); err != nil || tk.Ticket == "" {
		t.Fatalf("ticket: %v %q", err, tk)
	}
	resp = do(t, c, "GET", root+"/.sidecar/login?ticket="+tk.Ticket, nil, http.Header{"Host": {host}})
	if page := expect(t, resp, 200, ""); !strings.Contains(page, `<meta http-equiv="refresh" content="0; url=/">`) || resp.Header.Get("Referrer-Policy") != "no-referrer" {
		t.Errorf("login answer: Referrer-Policy %q, page %q; want a refresh to /", resp.Header.Get("Referrer-Policy"), page)
	}
	var sc *http.Cookie
	for _, k := range resp.Cookies() {
		if k.Name == "sidecar_preview" {
			sc = k
		}
	}
	if sc == nil || sc.Domain != "" || sc.Path != "/" || !sc.HttpOnly || !sc.Secure || sc.SameSite != http.SameSiteStrictMode {
		t.Fatalf("subdomain cookie %+v", sc)
	}
	hdr := http.Header{"Host": {host}, "Cookie": {"sidecar_preview=" + sc.Value}}
	expect(t, do(t, c, "GET", root+"/", nil, hdr), 200, appHTML)
	expect(t, do(t, c, "GET", root+"/abs.js", nil, hdr), 200, appAbsJS)
	// Its own origin is allowed; another is not.
	hdr.Set("Origin", "https://"+host)
	expect(t, do(t, c, "GET", root+"/rel.css", nil, hdr), 200, appRelCSS)
	hdr.Set("Origin", "https://1.preview.test:"+port)
	expect(t, do(t, c, "GET", root+"/rel.css", nil, hdr), http.StatusForbidden, "")
	// The ticket was single-use.
	expect(t, do(t, c, "GET", root+"/.sidecar/login?ticket="+tk.Ticket, nil, http.Header{"Host": {host}}), http.StatusUnauthorized, "")
	// The page itself, at the daemon's own host, is unaffected.
	expect(t, do(t, c, "GET", root+"/", nil, nil), 200, "")
	app.neverSawCredentials(t, s.token, sc.Value)
}

// TestPreviewLs: sidecar ls prints each listening port's preview URL,
// and ls --json has it, under the daemon's base path; the URL serves the
// app to the token.
func TestPreviewLs(t *testing.T) {
	app := startPreviewApp(t)
	s := startServerListener(t, "  base_path = \"/vm1\"\n", "")
	want := s.previewURL(app.port, "/")
	deadline := time.Now().Add(waitTimeout)
	for {
		out, stderr, code := s.run(t, append([]string{"ls", s.url, "--json"}, s.connArgs()...)...)
		if code != 0 {
			t.Fatalf("ls --json: exit %d: %s", code, stderr)
		}
		var st struct {
			Ports []struct {
				Port    int    `json:"port"`
				Preview string `json:"preview"`
			} `json:"ports"`
		}
		if err := json.Unmarshal([]byte(out), &st); err != nil {
			t.Fatalf("ls --json: %v\n%s", err, out)
		}
		found := ""
		for _, p := range st.Ports {
			if p.Port == app.port {
				found = p.Preview
			}
		}
		if found == want {
			break
		}
		if found != "" || time.Now().After(deadline) {
			t.Fatalf("ls --json: port %d has preview %q, want %q\n%s", app.port, found, want, out)
		}
		<-time.After(200 * time.Millisecond) // the host reads its ports every 3 s
	}
	out, _, code := s.run(t, append([]string{"ls", s.url}, s.connArgs()...)...)
	if code != 0 || !strings.Contains(out, "PREVIEW") || !strings.Contains(out, want) {
		t.Fatalf("ls: exit %d, no %s:\n%s", code, want, out)
	}
	c := s.previewClient(t)
	expect(t, do(t, c, "GET", want, nil, http.Header{"Authorization": {"Bearer " + s.token}}), 200, appHTML)
}

// TestWebPagePreview: headless Chromium logged in to the page sees the
// app's port as a link, clicks it, and the app loads in a new tab
// through the preview: its page, the relative stylesheet and script,
// server-sent events, a WebSocket echo; the absolute script reaches the
// daemon instead, and back on the page the port says it looks broken
// under the prefix. The session cookie is HttpOnly (the app's scripts do
// not see it) and never reaches the app.
func TestWebPagePreview(t *testing.T) {
	chromiumPath(t)
	app := startPreviewApp(t)
	s := startServer(t, "")
	b := newBrowser(t)
	b.login(pageURL(s, "websocket"), s.token)
	b.poll("connected", `document.getElementById("status").textContent === "connected (WebSocket)"`, waitTimeout)
	link := fmt.Sprintf(`#ports a.preview[data-port="%d"]`, app.port)
	b.poll("the port's preview link", fmt.Sprintf(`document.querySelector(%q) !== null`, link), waitTimeout)
	var href string
	if err := b.eval(fmt.Sprintf(`document.querySelector(%q).href`, link), &href); err != nil || href != s.previewURL(app.port, "/") {
		t.Fatalf("link href %q (%v), want %q", href, err, s.previewURL(app.port, "/"))
	}
	// The daemon's own port is not linked.
	_, own, _ := strings.Cut(s.host, ":")
	var ownLinked bool
	if err := b.eval(fmt.Sprintf(`document.querySelector('#ports a.preview[data-port="%s"]') !== null`, own), &ownLinked); err != nil || ownLinked {
		t.Errorf("the daemon's own port %s is linked (%v)", own, err)
	}

	opened := chromedp.WaitNewTarget(b.ctx, func(info *target.Info) bool { return strings.Contains(info.URL, "/ports/") })
	b.must("click the port", chromedp.Click(link, chromedp.ByQuery))
	var id target.ID
	select {
	case id = <-opened:
	case <-time.After(waitTimeout):
		t.Fatal("clicking the port opened no tab")
	}
	tabCtx, cancel := chromedp.NewContext(b.ctx, chromedp.WithTargetID(id))
	defer cancel()
	// Attached with the tab's own context: a first Run with a context
	// that ends (a timeout) would detach from it.
	if err := chromedp.Run(tabCtx); err != nil {
		t.Fatalf("attach to the preview tab: %v", err)
	}
	tab := &browser{t: t, ctx: tabCtx}
	tab.poll("the app's page with its relative stylesheet and script",
		`document.title === "preview app" && window.relLoaded === true && getComputedStyle(document.getElementById("title")).color === "rgb(1, 2, 3)"`, waitTimeout)
	tab.poll("server-sent events", `JSON.stringify(window.sse) === '["event 0","event 1","event 2"]'`, waitTimeout)
	tab.poll("the WebSocket echo", `window.wsEcho === "hello through the preview"`, waitTimeout)
	var state struct {
		Abs    bool   `json:"abs"`
		Cookie string `json:"cookie"`
		URL    string `json:"url"`
	}
	if err := tab.eval(`({abs: window.absLoaded === true, cookie: document.cookie, url: location.href})`, &state); err != nil {
		t.Fatal(err)
	}
	if state.Abs || strings.Contains(state.Cookie, "sidecar_preview") || state.URL != s.previewURL(app.port, "/") {
		t.Errorf("in the preview tab: %+v (want the absolute script not loaded, no session cookie visible, at %s)", state, s.previewURL(app.port, "/"))
	}

	// Back on the page: the port says it looks broken under the prefix.
	b.must("back to the page", chromedp.ActionFunc(func(ctx context.Context) error {
		return target.ActivateTarget(chromedp.FromContext(b.ctx).Target.TargetID).Do(ctx)
	}))
	b.poll("the broken-under-the-prefix hint", fmt.Sprintf(`(document.querySelector(%q)?.parentElement.querySelector(".port-hint")?.textContent ?? "").includes("/abs.js")`, link), waitTimeout)
	app.neverSawCredentials(t, s.token)
}

// TestPreviewBounds: request headers over preview.max_header_bytes are
// refused (431) before the app; a proxied stream on which nothing moves
// for preview.idle_timeout is closed, and its place given back.
func TestPreviewBounds(t *testing.T) {
	app := startPreviewApp(t)
	s := startServer(t, "preview {\n  max_header_bytes = 2000\n  idle_timeout = \"1s\"\n  max_connections_per_principal = 1\n}\n")
	c := s.previewClient(t)
	sc := s.previewLogin(t, c)
	before := len(app.requests())
	hdr := cookieHeader(sc)
	hdr.Set("X-Big", strings.Repeat("b", 2000))
	expect(t, do(t, c, "GET", s.previewURL(app.port, "/headers"), nil, hdr), http.StatusRequestHeaderFieldsTooLarge, "")
	if n := len(app.requests()) - before; n != 0 {
		t.Errorf("the app got %d requests over the header bound", n)
	}

	// One event, then silence: the idle timeout (1 s) cuts the stream.
	start := time.Now()
	resp := do(t, c, "GET", s.previewURL(app.port, "/sse?n=1&hold=1"), nil, cookieHeader(sc))
	timer := time.AfterFunc(waitTimeout, func() { resp.Body.Close() })
	b, err := io.ReadAll(resp.Body)
	timer.Stop()
	took := time.Since(start)
	if string(b) != "data: event 0\n\n" || err == nil || took < time.Second || took > waitTimeout/2 {
		t.Fatalf("idle stream: %q, %v after %v; want the event, then an error after about 1 s", b, err, took)
	}
	// Its place (max_connections_per_principal = 1) is free again.
	expect(t, do(t, c, "GET", s.previewURL(app.port, "/rel.css"), nil, cookieHeader(sc)), 200, appRelCSS)
}

// TestWebPagePreviewSubdomain: in subdomain mode (Chromium resolves
// *.preview.test to 127.0.0.1), the page's "own origin" button opens the
// port at https://N.preview.test:PORT/ with a ticket, and the app loads
// at /, its absolute script included, SSE and WebSocket too.
func TestWebPagePreviewSubdomain(t *testing.T) {
	chromiumPath(t)
	app := startPreviewApp(t)
	s := startServer(t, "preview {\n  subdomain = \"preview.test\"\n}\n")
	b := newBrowser(t, chromedp.Flag("host-resolver-rules", "MAP *.preview.test 127.0.0.1"))
	b.login(pageURL(s, "websocket"), s.token)
	b.poll("connected", `document.getElementById("status").textContent === "connected (WebSocket)"`, waitTimeout)
	button := fmt.Sprintf(`#ports a.preview[data-port="%d"] ~ button.own-origin`, app.port)
	b.poll("the port's own-origin button", fmt.Sprintf(`document.querySelector(%q) !== null`, button), waitTimeout)
	_, port, _ := strings.Cut(s.host, ":")
	origin := fmt.Sprintf("https://%d.preview.test:%s", app.port, port)
	opened := chromedp.WaitNewTarget(b.ctx, func(info *target.Info) bool { return strings.HasPrefix(info.URL, origin) || info.URL == "about:blank" })
	b.must("click own origin", chromedp.Click(button, chromedp.ByQuery))
	var id target.ID
	select {
	case id = <-opened:
	case <-time.After(waitTimeout):
		t.Fatal("the button opened no tab")
	}
	tabCtx, cancel := chromedp.NewContext(b.ctx, chromedp.WithTargetID(id))
	defer cancel()
	if err := chromedp.Run(tabCtx); err != nil {
		t.Fatalf("attach to the preview tab: %v", err)
	}
	tab := &browser{t: t, ctx: tabCtx}
	tab.poll("the app at / on its own origin, its absolute script loaded",
		fmt.Sprintf(`location.href === %q && window.relLoaded === true && window.absLoaded === true`, origin+"/"), waitTimeout)
	tab.poll("server-sent events", `JSON.stringify(window.sse) === '["event 0","event 1","event 2"]'`, waitTimeout)
	tab.poll("the WebSocket echo", `window.wsEcho === "hello through the preview"`, waitTimeout)
	app.neverSawCredentials(t, s.token)
}

// TestPreviewTokenNeverReachesApp: logged in with the cookie, requests
// that also carry the token, in every form a reviewer sent it (a second
// Authorization header after another one, Bearer and a tab, a bare
// token, Proxy-Authorization, ?token= and ?ticket=), reach the app
// without it; the app's own Authorization and ?token= pass.
func TestPreviewTokenNeverReachesApp(t *testing.T) {
	app := startPreviewApp(t)
	s := startServer(t, "")
	c := s.previewClient(t)
	sc := s.previewLogin(t, c)
	with := func(k string, vs ...string) http.Header {
		h := cookieHeader(sc)
		h[k] = vs
		return h
	}
	for _, tc := range []struct {
		name, query string
		hdr         http.Header
	}{
		{"two Authorization headers", "", with("Authorization", "Bearer other", "Bearer "+s.token)},
		{"Bearer and a tab", "", with("Authorization", "Bearer\t"+s.token)},
		{"a bare token", "", with("Authorization", s.token)},
		{"Proxy-Authorization", "", with("Proxy-Authorization", "Bearer "+s.token)},
		{"?token=", "?token=" + s.token + "&keep=1", cookieHeader(sc)},
		{"?ticket=", "?ticket=" + s.token, cookieHeader(sc)},
	} {
		expect(t, do(t, c, "GET", s.previewURL(app.port, "/headers"+tc.query), nil, tc.hdr), 200, "")
	}
	expect(t, do(t, c, "GET", s.previewURL(app.port, "/headers?token=apps-own"), nil, with("Authorization", "Bearer apps-own")), 200, "")
	reqs := app.requests()
	if len(reqs) != 7 {
		t.Fatalf("the app got %d requests, want 7", len(reqs))
	}
	if q := reqs[4].Query; q != "keep=1" {
		t.Errorf("?token=T&keep=1 reached the app as %q, want %q", q, "keep=1")
	}
	if last := reqs[6]; last.Query != "token=apps-own" || last.Header.Get("Authorization") != "Bearer apps-own" {
		t.Errorf("the app's own credentials: query %q, Authorization %q", last.Query, last.Header.Get("Authorization"))
	}
	app.neverSawCredentials(t, s.token, sc.Value)
}

// TestPreviewLogoutEndsStreams: a WebSocket and an event stream opened
// through the preview with a session cookie are closed when the page
// logs out (at once: well before the session's 3 s life), and a
// WebSocket of a session left to expire is closed at its expiry; one of
// another session goes on.
func TestPreviewLogoutEndsStreams(t *testing.T) {
	app := startPreviewApp(t)
	s := startServer(t, "preview {\n  session_ttl = \"3s\"\n}\n")
	c := s.previewClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*waitTimeout)
	defer cancel()
	wsURL := "wss" + strings.TrimPrefix(s.previewURL(app.port, "/ws"), "https")
	open := func(sc *http.Cookie) *websocket.Conn {
		t.Helper()
		ws, _, err := websocket.Dial(ctx, wsURL, &websocket.DialOptions{HTTPClient: s.previewClient(t), HTTPHeader: cookieHeader(sc)})
		if err != nil {
			t.Fatalf("WebSocket through the preview: %v", err)
		}
		t.Cleanup(func() { ws.CloseNow() })
		if err := ws.Write(ctx, websocket.MessageText, []byte("ping")); err != nil {
			t.Fatal(err)
		}
		if _, b, err := ws.Read(ctx); err != nil || string(b) != "ping" {
			t.Fatalf("echo: %q %v", b, err)
		}
		return ws
	}
	// ended waits for ws to be closed by the daemon (bounded by ctx).
	ended := func(what string, ws *websocket.Conn) {
		t.Helper()
		for {
			_ = ws.Write(ctx, websocket.MessageText, []byte("still?"))
			if _, _, err := ws.Read(ctx); err != nil {
				if ctx.Err() != nil {
					t.Fatalf("%s: the WebSocket kept going", what)
				}
				return
			}
		}
	}

	sc := s.previewLogin(t, c)
	other := s.previewLogin(t, c)
	ws := open(sc)
	wsOther := open(other)
	sse := do(t, c, "GET", s.previewURL(app.port, "/sse?n=1&hold=1"), nil, cookieHeader(sc))
	br := bufio.NewReader(sse.Body)
	if line, err := br.ReadString('\n'); err != nil || line != "data: event 0\n" {
		t.Fatalf("SSE: %q %v", line, err)
	}
	start := time.Now()
	expect(t, do(t, c, "POST", "https://"+s.host+"/web/logout", nil, cookieHeader(sc)), 200, "")
	ended("after logout", ws)
	cut := time.AfterFunc(waitTimeout, func() { sse.Body.Close() })
	_, _ = io.Copy(io.Discard, br) // cut by the daemon: an error or EOF, either way ended
	if !cut.Stop() {
		t.Error("after logout: the event stream kept going")
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("logout took %v to end the streams: the session's expiry did, not the logout", d)
	}
	// The other session's WebSocket goes on.
	if err := wsOther.Write(ctx, websocket.MessageText, []byte("on")); err != nil {
		t.Fatal(err)
	}
	if _, b, err := wsOther.Read(ctx); err != nil || string(b) != "on" {
		t.Fatalf("another session's WebSocket: %q %v", b, err)
	}
	// Left alone, it ends when its session expires (3 s, nothing renews it).
	ended("at expiry", wsOther)
}

// TestPreviewPolicyRefusesIPv6Port: with tcp.allow = ["127.0.0.1/32"],
// an app on [::1] only is refused as the policy's (403), not reported
// as nothing listening (502).
func TestPreviewPolicyRefusesIPv6Port(t *testing.T) {
	ln, err := net.Listen("tcp", "[::1]:0")
	if err != nil {
		t.Fatalf("IPv6 loopback: %v", err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { t.Errorf("the app got %s", r.URL) }), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	port := ln.Addr().(*net.TCPAddr).Port
	s := startServer(t, "tcp {\n  allow = [\"127.0.0.1/32\"]\n}\n")
	c := s.previewClient(t)
	sc := s.previewLogin(t, c)
	body := expect(t, do(t, c, "GET", s.previewURL(port, "/"), nil, cookieHeader(sc)), http.StatusForbidden, "")
	if !strings.Contains(body, "not allowed by policy") || !strings.Contains(body, "::1") {
		t.Errorf("refusal %q, want the policy's for ::1", body)
	}
}
