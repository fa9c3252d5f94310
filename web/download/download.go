// Package download serves GET <base>/web/files?path=P: a file of the
// workload to the browser, which streams it to disk (docs/protocol.md
// "File downloads"). It answers with the file channel's rules (files.read,
// the files block's transfer quotas: adapters/files.Kind.OpenDownload)
// to a request that carries the page's session cookie or the token in
// Authorization: Bearer (never in the URL), and refuses what another
// site asked for, as the port preview does.
package download

import (
	"errors"
	"fmt"
	"io/fs"
	"mime"
	"net/http"
	"os"
	"strings"

	"github.com/hashicorp/go-hclog"

	"github.com/sidecar-dev/sidecar/audit"
	"github.com/sidecar-dev/sidecar/auth"
	"github.com/sidecar-dev/sidecar/rpc"
	"github.com/sidecar-dev/sidecar/transport"
)

// Path is the endpoint, relative to the page's base path.
const Path = "/web/files"

// Options are what the handler needs of the daemon.
type Options struct {
	// Authenticate returns who r is (its bearer token or session
	// cookie), or false.
	Authenticate func(r *http.Request) (id auth.Identity, ok bool)
	// SameSite returns why r is refused as another site's, or ok.
	SameSite func(r *http.Request) (why string, ok bool)
	// Open opens path for principal (adapters/files.Kind.OpenDownload);
	// release frees its quota once f is closed.
	Open func(id auth.Identity, path string) (f *os.File, fi fs.FileInfo, release func(), e *rpc.Error)
	// Log, when set, gets a debug line per refusal.
	Log hclog.Logger
}

// Handler serves Path: GET or HEAD with the query's path, answered by
// http.ServeContent (Content-Length, Range and If-Range, Last-Modified)
// with Content-Disposition: attachment. Refusals, as text/plain, in the
// order checked: 405 another method; 403 a cross-site request; 401 no
// valid session or token; 400 a token in the query, or no path; then the
// file channel's errors: 400 (-32602: a bad path, not a regular file),
// 404 (-32008), 403 (-32009: files.read, quotas, permission).
func Handler(opts Options) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		refuse := func(status int, why string) {
			if opts.Log != nil {
				opts.Log.Debug("file download refused", "status", status, "reason", why)
			}
			if status == http.StatusUnauthorized {
				w.Header().Set("WWW-Authenticate", `Bearer realm="sidecar"`)
			}
			http.Error(w, fmt.Sprintf("%d %s: %s", status, http.StatusText(status), why), status)
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			refuse(http.StatusMethodNotAllowed, "use GET")
			return
		}
		if why, ok := opts.SameSite(r); !ok {
			refuse(http.StatusForbidden, why)
			return
		}
		id, ok := opts.Authenticate(r)
		if !ok {
			refuse(http.StatusUnauthorized, "log in on the page (its session cookie) or send Authorization: Bearer TOKEN")
			return
		}
		q := r.URL.Query()
		if q.Has("token") || q.Has("access_token") {
			refuse(http.StatusBadRequest, "a token in the URL is refused (it would be logged and kept in the history): send Authorization: Bearer TOKEN")
			return
		}
		path := q.Get("path")
		if path == "" {
			refuse(http.StatusBadRequest, `missing "path" (an absolute path on the workload)`)
			return
		}
		f, fi, release, e := opts.Open(id, path)
		if e != nil {
			refuse(statusOf(e), e.Message)
			return
		}
		defer release()
		defer f.Close()
		name := fi.Name()
		w.Header().Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": name}))
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		http.ServeContent(w, r, name, fi.ModTime(), f)
	})
}

// statusOf maps a file channel error to an HTTP status.
func statusOf(e *rpc.Error) int {
	switch e.Code {
	case rpc.CodeNotFound:
		return http.StatusNotFound
	case rpc.CodePermissionDenied:
		if strings.Contains(e.Message, "limit reached") {
			return http.StatusTooManyRequests
		}
		return http.StatusForbidden
	case rpc.CodeInvalidParams:
		return http.StatusBadRequest
	}
	return http.StatusInternalServerError
}

// SameOrigin is Options.SameSite for a daemon without the port preview:
// Sec-Fetch-Site other than same-origin or none (absent is allowed: not
// a browser), or an Origin that allowed refuses.
func SameOrigin(allowed func(origin string) bool) func(r *http.Request) (string, bool) {
	return func(r *http.Request) (string, bool) {
		switch site := r.Header.Get("Sec-Fetch-Site"); site {
		case "", "same-origin", "none":
		default:
			return fmt.Sprintf("a cross-site request (Sec-Fetch-Site: %q)", site), false
		}
		if o := r.Header.Get("Origin"); o != "" && !allowed(o) {
			return fmt.Sprintf("a request from origin %q, which the listener does not allow", o), false
		}
		return "", true
	}
}

// BearerOnly is Options.Authenticate for a daemon without the port
// preview's sessions: the credential in Authorization: Bearer, decided
// by a (each decision recorded in sink, nil: none).
func BearerOnly(a auth.Authenticator, sink audit.Sink) func(r *http.Request) (auth.Identity, bool) {
	return func(r *http.Request) (auth.Identity, bool) {
		t := transport.BearerToken(r)
		if t == "" {
			return auth.Identity{}, false
		}
		id, err := a.Authenticate(r.Context(), t)
		if err != nil {
			reason := "authorize failed"
			var ref *auth.Refusal
			if errors.As(err, &ref) {
				reason = ref.Reason
			}
			transport.RecordFailure(sink, r, "download", reason)
			return auth.Identity{}, false
		}
		transport.RecordSuccess(sink, r, "download", id, id.Method)
		return id, true
	}
}
