package preview

import (
	"errors"
	"net/http"

	"github.com/sidecar-dev/sidecar/auth"
	"github.com/sidecar-dev/sidecar/transport"
)

// Authenticate reports who r is for another endpoint of the page (the
// file download): the credential in its Authorization header, or a
// valid session cookie (not renewed here).
func (s *Server) Authenticate(r *http.Request) (id auth.Identity, ok bool) {
	if id, ok := s.bearer(r, "download"); ok {
		return id, true
	}
	for _, c := range r.CookiesNamed(CookieName) {
		if p, ok, _ := s.sessions.Check(c.Value, false); ok {
			return p, true
		}
	}
	return auth.Identity{}, false
}

// SameSite returns why r is refused as a request another site made (the
// preview's rule, without subdomain mode), or ok.
func (s *Server) SameSite(r *http.Request) (why string, ok bool) { return s.sameSite(r, false) }

// bearer decides the credential in r's Authorization header (none: not
// ok, nothing recorded), recording the decision for transportName.
func (s *Server) bearer(r *http.Request, transportName string) (auth.Identity, bool) {
	tok := transport.BearerToken(r)
	if tok == "" || s.opts.Auth == nil {
		return auth.Identity{}, false
	}
	id, err := s.opts.Auth.Authenticate(r.Context(), tok)
	if err != nil {
		reason := "authorize failed"
		var ref *auth.Refusal
		if errors.As(err, &ref) {
			reason = ref.Reason
		}
		transport.RecordFailure(s.opts.Audit, r, transportName, reason)
		return auth.Identity{}, false
	}
	transport.RecordSuccess(s.opts.Audit, r, transportName, id, id.Method)
	return id, true
}

// Revoke ends what identity name (authenticated by method) holds in the
// preview: its sessions are forgotten, so their cookies are worth
// nothing and their requests in progress (WebSockets, event streams)
// are closed. It returns how many sessions there were.
func (s *Server) Revoke(name, method string) int {
	return s.sessions.RevokeIdentity(name, method)
}
