package tests

// The workload app the port preview tests open through the daemon: a
// small Go web server on 127.0.0.1:0 with an HTML page (a relative and an
// absolute asset), a large deterministic download, an upload that
// answers its SHA-256, server-sent events paced by the test, a WebSocket
// echo, a redirect, cookies, and a record of every request's headers.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// appHTML is the app's page: rel.css is relative (works under the
// prefix), /abs.js absolute (reaches the daemon, not the app, under the
// prefix). Its script opens the SSE stream and the WebSocket echo with
// relative URLs, as an app written for a prefix does.
const appHTML = `<!doctype html>
<html><head><meta charset="utf-8"><title>preview app</title>
<link rel="stylesheet" href="rel.css">
<script src="/abs.js"></script>
<script src="rel.js"></script>
</head><body><h1 id="title">preview app</h1></body></html>
`

const appRelCSS = "h1 { color: rgb(1, 2, 3); }\n"
const appRelJS = `window.relLoaded = true;
window.sse = [];
window.wsEcho = "";
const es = new EventSource("sse?n=3&paced=0");
es.onmessage = (e) => { window.sse.push(e.data); if (window.sse.length === 3) es.close(); };
const ws = new WebSocket(new URL("ws", location.href).href.replace(/^http/, "ws"));
ws.onopen = () => ws.send("hello through the preview");
ws.onmessage = (e) => { window.wsEcho = e.data; ws.close(); };
`
const appAbsJS = "window.absLoaded = true;\n"

// bigBlock is the download's repeated block: a prime length, so that a
// byte lost, doubled or moved anywhere changes the SHA-256.
var bigBlock = func() []byte {
	b := make([]byte, 1<<20+7)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}()

// bigSHA256 is the SHA-256 of the first n bytes of the download.
func bigSHA256(n int64) string {
	h := sha256.New()
	writeBig(h, n)
	return hex.EncodeToString(h.Sum(nil))
}

func writeBig(w io.Writer, n int64) error {
	for n > 0 {
		b := bigBlock
		if int64(len(b)) > n {
			b = b[:n]
		}
		if _, err := w.Write(b); err != nil {
			return err
		}
		n -= int64(len(b))
	}
	return nil
}

// seen is one request as the app received it.
type seen struct {
	Path   string
	Query  string // the raw query
	Header http.Header
	Host   string
	Remote string // the proxy's address: one for requests on one kept-alive connection
}

type previewApp struct {
	port int
	// sseNext paces /sse?paced=1: the app sends event i+1 only once the
	// test has received event i.
	sseNext chan struct{}

	mu   sync.Mutex
	reqs []seen
}

func (a *previewApp) requests() []seen {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]seen(nil), a.reqs...)
}

// startPreviewApp starts the app on 127.0.0.1:0 until the test ends.
func startPreviewApp(t *testing.T) *previewApp {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a := &previewApp{port: ln.Addr().(*net.TCPAddr).Port, sseNext: make(chan struct{})}
	mux := http.NewServeMux()
	mux.HandleFunc("/{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = io.WriteString(w, appHTML)
	})
	mux.HandleFunc("/rel.css", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/css")
		_, _ = io.WriteString(w, appRelCSS)
	})
	mux.HandleFunc("/rel.js", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/javascript")
		_, _ = io.WriteString(w, appRelJS)
	})
	mux.HandleFunc("/abs.js", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/javascript")
		_, _ = io.WriteString(w, appAbsJS)
	})
	mux.HandleFunc("/big", func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.ParseInt(r.URL.Query().Get("n"), 10, 64)
		w.Header().Set("Content-Type", "application/octet-stream")
		if r.URL.Query().Get("chunked") == "" {
			w.Header().Set("Content-Length", strconv.FormatInt(n, 10))
		}
		_ = writeBig(w, n)
	})
	mux.HandleFunc("POST /upload", func(w http.ResponseWriter, r *http.Request) {
		h := sha256.New()
		n, err := io.Copy(h, r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		fmt.Fprintf(w, "%d %x", n, h.Sum(nil))
	})
	mux.HandleFunc("/sse", func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.URL.Query().Get("n"))
		paced := r.URL.Query().Get("paced") == "1"
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Cache-Control", "no-cache")
		f := w.(http.Flusher)
		for i := range n {
			fmt.Fprintf(w, "data: event %d\n\n", i)
			f.Flush()
			if paced && i < n-1 {
				select {
				case <-a.sseNext:
				case <-r.Context().Done():
					return
				}
			}
		}
		if r.URL.Query().Get("hold") == "1" {
			<-r.Context().Done()
		}
	})
	mux.HandleFunc("/ws", func(w http.ResponseWriter, r *http.Request) {
		// The browser's Origin is the daemon's: the app trusts its proxy.
		c, err := websocket.Accept(w, r, &websocket.AcceptOptions{InsecureSkipVerify: true})
		if err != nil {
			return
		}
		defer c.CloseNow()
		c.SetReadLimit(4 << 20)
		ctx := r.Context()
		for {
			typ, b, err := c.Read(ctx)
			if err != nil {
				return
			}
			if err := c.Write(ctx, typ, b); err != nil {
				return
			}
		}
	})
	mux.HandleFunc("/redirect", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/rel.css?x=1", http.StatusFound)
	})
	mux.HandleFunc("/redirect-abs", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://"+r.Host+"/rel.css", http.StatusFound)
	})
	mux.HandleFunc("/setcookie", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Add("Set-Cookie", "app=1; Path=/; Domain=localhost; HttpOnly")
		w.Header().Add("Set-Cookie", "deep=2; Path=/sub")
		w.Header().Add("Set-Cookie", "sidecar_preview=forged; Path=/")
		w.Header().Set("Clear-Site-Data", `"storage"`)
	})
	mux.HandleFunc("/headers", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"host": r.Host, "header": r.Header})
	})
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			a.mu.Lock()
			a.reqs = append(a.reqs, seen{Path: r.URL.Path, Query: r.URL.RawQuery, Header: r.Header.Clone(), Host: r.Host, Remote: r.RemoteAddr})
			a.mu.Unlock()
			mux.ServeHTTP(w, r)
		}),
		ReadHeaderTimeout: 10 * time.Second,
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		_ = srv.Close()
	})
	return a
}

// neverSawCredentials fails t if any request the app received carried
// the session cookie (its name) or one of secrets (the token, session ids),
// in a header or in its query.
func (a *previewApp) neverSawCredentials(t *testing.T, secrets ...string) {
	t.Helper()
	reqs := a.requests()
	if len(reqs) == 0 {
		t.Fatal("the app received no request")
	}
	for _, r := range reqs {
		for _, sec := range secrets {
			if sec != "" && strings.Contains(r.Query, sec) {
				t.Errorf("the app saw the query %q on %s", r.Query, r.Path)
			}
		}
		for k, vs := range r.Header {
			for _, v := range vs {
				bad := strings.Contains(v, "sidecar_preview")
				for _, sec := range secrets {
					bad = bad || (sec != "" && strings.Contains(v, sec))
				}
				if bad {
					t.Errorf("the app saw %s: %q on %s", k, v, r.Path)
				}
			}
		}
	}
}
