package main

import (
	"net/http"
	"slices"
	"strings"
)

// underBase serves inner, whose endpoints are mounted at the root (/ahp,
// /transport-io, the page at /), under base path base (listener.base_path,
// config.CleanBasePath's form: "" for none, else "/vm1" with no trailing
// slash). A request under base+"/" reaches inner with base taken off its
// path (http.StripPrefix: everything the page serves, whatever its
// handler adds, moves along); base itself, without its slash, is
// redirected there (307, query kept: a POST stays one); the paths in
// atRoot are served at the root as well, as they are; anything else is
// 404, the old root paths included, so that a proxy that should have kept
// the prefix, or a client with the wrong URL, hears so at once.
func underBase(base string, inner http.Handler, atRoot ...string) http.Handler {
	if base == "" {
		return inner
	}
	stripped := http.StripPrefix(base, inner)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch p := r.URL.Path; {
		case p == base:
			to := base + "/"
			if r.URL.RawQuery != "" {
				to += "?" + r.URL.RawQuery
			}
			// A relative reference (RFC 3986 §4.2: path-absolute) keeps
			// the scheme and host the client used, which behind a proxy
			// only the client knows.
			w.Header().Set("Location", to)
			w.WriteHeader(http.StatusTemporaryRedirect)
		case strings.HasPrefix(p, base+"/"):
			stripped.ServeHTTP(w, r)
		case slices.Contains(atRoot, p):
			inner.ServeHTTP(w, r)
		default:
			// Say where it serves: a route that forgot the prefix (or a
			// URL without it) reads what to use instead.
			http.Error(w, "404 page not found: this sidecar serves under "+base+"/ (listener.base_path): the page at "+base+"/, "+base+"/ahp, "+base+"/transport-io", http.StatusNotFound)
		}
	})
}
