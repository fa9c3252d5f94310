package download

import (
	"crypto/sha256"
	"encoding/hex"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sidecar-dev/sidecar/rpc"

	"github.com/sidecar-dev/sidecar/auth"
)

func TestHandler(t *testing.T) {
	dir := t.TempDir()
	body := strings.Repeat("0123456789", 1000) // 10,000 bytes
	path := filepath.Join(dir, "a b\"é.txt")
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	released := 0
	h := Handler(Options{
		Authenticate: BearerOnly(auth.NewStatic("tok"), nil),
		SameSite:     SameOrigin(func(o string) bool { return o == "https://self" }),
		Open: func(id auth.Identity, p string) (*os.File, fs.FileInfo, func(), *rpc.Error) {
			if id.Name != "token" || id.Role != auth.Owner {
				t.Errorf("identity %v", id)
			}
			switch p {
			case "/denied":
				return nil, nil, nil, rpc.Errorf(rpc.CodePermissionDenied, "read /denied not allowed by policy: not under files.read")
			case "/busy":
				return nil, nil, nil, rpc.Errorf(rpc.CodePermissionDenied, "file transfer limit reached: 8 open for this token (files.max_per_principal); wait for one to end")
			case "/dev":
				return nil, nil, nil, rpc.Errorf(rpc.CodeInvalidParams, "/dev is a directory, not a regular file: refused")
			}
			f, err := os.Open(p)
			if err != nil {
				return nil, nil, nil, rpc.Errorf(rpc.CodeNotFound, "%s: no such file", p)
			}
			fi, _ := f.Stat()
			return f, fi, func() { released++ }, nil
		},
	})
	do := func(method, query string, hdr map[string]string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(method, Path+"?"+query, nil)
		for k, v := range hdr {
			r.Header.Set(k, v)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	auth := map[string]string{"Authorization": "Bearer tok", "Sec-Fetch-Site": "same-origin"}
	q := "path=" + url.QueryEscape(path)

	w := do("GET", q, auth)
	if w.Code != 200 || w.Body.String() != body {
		t.Fatalf("GET: %d, %d bytes", w.Code, w.Body.Len())
	}
	sum := sha256.Sum256(w.Body.Bytes())
	if hex.EncodeToString(sum[:]) != hex.EncodeToString(func() []byte { s := sha256.Sum256([]byte(body)); return s[:] }()) {
		t.Error("SHA-256 differs")
	}
	if got := w.Header().Get("Content-Length"); got != "10000" {
		t.Errorf("Content-Length %q", got)
	}
	if got, want := w.Header().Get("Content-Disposition"), `attachment; filename*=utf-8''a%20b%22%C3%A9.txt`; got != want {
		t.Errorf("Content-Disposition %q, want %q", got, want)
	}
	if got := w.Header().Get("Accept-Ranges"); got != "bytes" {
		t.Errorf("Accept-Ranges %q", got)
	}
	w = do("GET", q, map[string]string{"Authorization": "Bearer tok", "Range": "bytes=9990-"})
	if w.Code != http.StatusPartialContent || w.Body.String() != body[9990:] || w.Header().Get("Content-Range") != "bytes 9990-9999/10000" {
		t.Errorf("Range: %d %q %q", w.Code, w.Body.String(), w.Header().Get("Content-Range"))
	}
	if released != 2 {
		t.Errorf("released %d times, want 2", released)
	}

	for _, c := range []struct {
		name, method, query string
		hdr                 map[string]string
		status              int
		says                string
	}{
		{"post", "POST", q, auth, 405, "use GET"},
		{"cross-site", "GET", q, map[string]string{"Authorization": "Bearer tok", "Sec-Fetch-Site": "cross-site"}, 403, "cross-site"},
		{"other origin", "GET", q, map[string]string{"Authorization": "Bearer tok", "Origin": "https://evil"}, 403, "https://evil"},
		{"no login", "GET", q, nil, 401, "log in"},
		{"wrong token", "GET", q, map[string]string{"Authorization": "Bearer nope"}, 401, "log in"},
		{"token in URL", "GET", q + "&token=tok", auth, 400, "token in the URL"},
		{"no path", "GET", "", auth, 400, `missing "path"`},
		{"missing", "GET", "path=/nope", auth, 404, "/nope"},
		{"policy", "GET", "path=/denied", auth, 403, "files.read"},
		{"quota", "GET", "path=/busy", auth, 429, "files.max_per_principal"},
		{"not a file", "GET", "path=/dev", auth, 400, "not a regular file"},
	} {
		w := do(c.method, c.query, c.hdr)
		b, _ := io.ReadAll(w.Body)
		if w.Code != c.status || !strings.Contains(string(b), c.says) {
			t.Errorf("%s: %d %q, want %d saying %q", c.name, w.Code, b, c.status, c.says)
		}
		if w.Code == 401 && w.Header().Get("WWW-Authenticate") == "" {
			t.Errorf("%s: no WWW-Authenticate", c.name)
		}
	}
}
