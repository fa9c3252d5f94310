package preview

import (
	"net/http"

	"github.com/sidecar-dev/sidecar/transport"
)

// Authenticate reports who r is for another endpoint of the page (the
// file download): the token in its Authorization header, or a valid
// session cookie (not renewed here).
func (s *Server) Authenticate(r *http.Request) (principal string, ok bool) {
	if tok := transport.BearerToken(r); tok != "" && transport.TokenEqual(tok, s.opts.Token) {
		return s.opts.Principal, true
	}
	for _, c := range r.CookiesNamed(CookieName) {
		if p, ok, _ := s.sessions.Check(c.Value, false); ok {
			return p, true
		}
	}
	return "", false
}

// SameSite returns why r is refused as a request another site made (the
// preview's rule, without subdomain mode), or ok.
func (s *Server) SameSite(r *http.Request) (why string, ok bool) { return s.sameSite(r, false) }
