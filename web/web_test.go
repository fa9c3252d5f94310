package web

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sidecar-dev/sidecar/transport"
)

func TestHandler(t *testing.T) {
	var refused []string
	origins := transport.NewOrigins(transport.SelfOrigins(&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 4433}), nil)
	origins.OnRefuse = func(_ *http.Request, o string) { refused = append(refused, o) }
	h := Handler(Options{Origins: origins, CertHashes: func() []string { return []string{"ab"} }})
	do := func(method, path, origin string) (*http.Response, string) {
		r := httptest.NewRequest(method, path, nil)
		if origin != "" {
			r.Header.Set("Origin", origin)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		b, _ := io.ReadAll(w.Result().Body)
		return w.Result(), string(b)
	}
	res, body := do("GET", "/", "")
	if res.StatusCode != 200 || !strings.Contains(body, "assets/app.js") || !strings.Contains(res.Header.Get("Content-Security-Policy"), "default-src 'none'") {
		t.Errorf("GET /: %d %q %v", res.StatusCode, body, res.Header)
	}
	for _, p := range []string{"/assets/app.js", "/assets/app.css"} {
		if res, _ := do("GET", p, ""); res.StatusCode != 200 {
			t.Errorf("GET %s: %d", p, res.StatusCode)
		}
	}
	if res, _ := do("GET", "/nothing", ""); res.StatusCode != 404 {
		t.Errorf("GET /nothing: %d", res.StatusCode)
	}
	if res, _ := do("GET", InfoPath, ""); res.StatusCode != 405 {
		t.Errorf("GET %s: %d", InfoPath, res.StatusCode)
	}
	res, body = do("POST", InfoPath, "https://127.0.0.1:4433")
	var info Info
	if res.StatusCode != 200 || json.Unmarshal([]byte(body), &info) != nil || len(info.CertHashes) != 1 || info.CertHashes[0] != "ab" {
		t.Errorf("POST %s: %d %s", InfoPath, res.StatusCode, body)
	}
	res, body = do("POST", InfoPath, "https://evil.example:4433")
	if res.StatusCode != 403 || !strings.Contains(body, "listener.origins") || len(refused) != 1 || refused[0] != "https://evil.example:4433" {
		t.Errorf("POST %s from a foreign origin: %d %s, reported %v", InfoPath, res.StatusCode, body, refused)
	}
}
