package preview

import (
	"io"
	"net"
	"net/http"
	"strings"

	"github.com/sidecar-dev/sidecar/transport"
)

// Subdomain wraps the daemon's whole handler for subdomain mode
// (preview.subdomain set): a request whose Host is <port>.<subdomain>
// (any listener port) is that port's preview at / (no prefix: apps with
// absolute asset paths work), everything else goes to next. Off (next
// itself) when preview.subdomain is "".
//
// Each port's subdomain is its own origin, with its own host-only
// session cookie: the page opens
// https://<port>.<subdomain>[:port]/.sidecar/login?ticket=T with a ticket
// of POST /web/ticket, which the subdomain redeems (single use, 20 s) for
// a session and answers with a page that moves on to / at once (a meta
// refresh; Referrer-Policy: no-referrer, so the spent ticket goes
// nowhere).
func (s *Server) Subdomain(next http.Handler) http.Handler {
	domain := strings.ToLower(s.opts.Config.Subdomain)
	if domain == "" {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := r.Host
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		ps, ok := strings.CutSuffix(strings.ToLower(host), "."+domain)
		port, ok2 := parsePort(ps)
		if !ok || !ok2 {
			next.ServeHTTP(w, r)
			return
		}
		if r.URL.Path == SubdomainLoginPath {
			s.subdomainLogin(w, r)
			return
		}
		s.serve(w, r, port, "", r.URL.Path, r.URL.EscapedPath(), true)
	})
}

// subdomainLogin redeems ?ticket= for a host-only session cookie.
func (s *Server) subdomainLogin(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Referrer-Policy", "no-referrer")
	if s.opts.Tickets == nil {
		http.NotFound(w, r)
		return
	}
	who, err := s.opts.Tickets.Redeem(r.URL.Query().Get("ticket"))
	if err != nil {
		transport.RecordFailure(s.opts.Audit, r, "preview", "ticket refused")
		s.refuse(w, r, resultUnauthenticated, http.StatusUnauthorized, err.Error()+": open the port from the sidecar page again")
		return
	}
	transport.RecordSuccess(s.opts.Audit, r, "preview", who, "ticket")
	id, err := s.sessions.Create(who)
	if err != nil {
		http.Error(w, "500 "+err.Error(), http.StatusInternalServerError)
		return
	}
	http.SetCookie(w, s.cookie(id, "/", int(s.sessions.TTL().Seconds())))
	// Not a 303: a redirect stays part of the navigation the page started,
	// cross-site when the page is on another site than the subdomains,
	// and a SameSite=Strict cookie is not sent on it. A refresh is the
	// subdomain's own navigation.
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Content-Security-Policy", "default-src 'none'")
	_, _ = io.WriteString(w, loginPage)
}

// loginPage moves on to the app, at /, replacing the ticket's URL.
const loginPage = `<!doctype html><meta charset="utf-8"><meta http-equiv="refresh" content="0; url=/"><title>sidecar preview</title><a href="/">Open the app</a>
`
