package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
)

// underBase serves every root endpoint under the base path with the base
// taken off, redirects the bare base to base/ (query and method kept),
// serves the paths asked for at the root too, and answers 404 for the
// rest, the old root paths included.
func TestUnderBase(t *testing.T) {
	inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, r.Method+" "+r.URL.Path+" "+r.URL.RawQuery)
	})
	h := underBase("/vm1", inner, "/.well-known/transport-io")
	const notHere = "404 page not found: this sidecar serves under /vm1/ (listener.base_path): the page at /vm1/, /vm1/ahp, /vm1/transport-io\n"
	for _, tt := range []struct {
		method, target string
		status         int
		body, location string
	}{
		{"GET", "/vm1/", 200, "GET / ", ""},
		{"GET", "/vm1/ahp?x=1", 200, "GET /ahp x=1", ""},
		{"GET", "/vm1/transport-io", 200, "GET /transport-io ", ""},
		{"HEAD", "/vm1/.well-known/transport-io", 200, "HEAD /.well-known/transport-io ", ""},
		{"GET", "/vm1/assets/main.js", 200, "GET /assets/main.js ", ""},
		{"POST", "/vm1/web/info", 200, "POST /web/info ", ""},
		{"GET", "/vm1", http.StatusTemporaryRedirect, "", "/vm1/"},
		{"POST", "/vm1?a=b", http.StatusTemporaryRedirect, "", "/vm1/?a=b"},
		{"GET", "/", 404, notHere, ""},
		{"GET", "/ahp", 404, notHere, ""},
		{"GET", "/transport-io", 404, notHere, ""},
		{"GET", "/vm10/", 404, notHere, ""},
		{"GET", "/vm2/ahp", 404, notHere, ""},
		// The probe is also where seed 002 has clients look: the origin's root.
		{"HEAD", "/.well-known/transport-io", 200, "HEAD /.well-known/transport-io ", ""},
		{"GET", "/.well-known/transport-io/x", 404, notHere, ""},
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(tt.method, tt.target, nil))
		if rec.Code != tt.status || rec.Body.String() != tt.body || rec.Header().Get("Location") != tt.location {
			t.Errorf("%s %s: %d %q Location %q; want %d %q %q", tt.method, tt.target, rec.Code, rec.Body.String(), rec.Header().Get("Location"), tt.status, tt.body, tt.location)
		}
	}
	rec := httptest.NewRecorder()
	underBase("", inner).ServeHTTP(rec, httptest.NewRequest("GET", "/ahp", nil))
	if rec.Body.String() != "GET /ahp " {
		t.Errorf("no base path: %q", rec.Body.String())
	}
}
