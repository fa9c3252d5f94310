package host

import (
	"time"

	"github.com/sidecar-dev/sidecar/auth"
	"github.com/sidecar-dev/sidecar/transport"
)

// Revoke ends what identity name, authenticated by method
// (auth.Identity.Method: "tokens_file"), holds in the host because its
// credential was revoked (a tokens file entry removed or changed): each
// of its open connections is closed as transport.CloseUnauthorized with
// reason (transport.ReasonRevoked), and its retained client state is
// dropped, so that no reconnect resumes it. It returns how many
// connections it closed and how many retained states it dropped.
func (s *Server) Revoke(name, method, reason string) (closed, dropped int) {
	match := func(id auth.Identity) bool { return id.Name == name && id.Method == method }
	s.mu.Lock()
	var conns []*conn
	for c := range s.conns {
		if match(c.identity) {
			conns = append(conns, c)
		}
	}
	s.mu.Unlock()
	for _, c := range conns {
		c.endUnauthorized(reason)
	}
	s.ret.mu.Lock()
	var gone []*retained
	for id, r := range s.ret.clients {
		if match(r.identity) {
			gone = append(gone, r)
			delete(s.ret.clients, id)
		}
	}
	s.ret.mu.Unlock()
	for _, r := range gone {
		s.log.Info("client state dropped", "client", r.clientID, "reason", "credential "+reason, "principal", name)
		s.endRetained(r)
	}
	if len(conns) > 0 || len(gone) > 0 {
		s.log.Info("credential revoked: connections closed", "principal", name, "method", method, "connections", len(conns), "retained", len(gone))
	}
	return len(conns), len(gone)
}

// endUnauthorized closes c as transport.CloseUnauthorized with reason
// ("revoked", "expired"); its state is not retained for a reconnect.
func (c *conn) endUnauthorized(reason string) {
	c.unauthorized.Store(true)
	c.log.Info("closing connection: credential "+reason, "principal", c.identity.Name)
	c.close(transport.CloseUnauthorized, reason)
}

// closeAtExpiry closes c as unauthorized "expired" at its identity's
// Expiry (none when zero); the func returned stops the timer.
func (c *conn) closeAtExpiry() (stop func()) {
	exp := c.identity.Expiry
	if exp.IsZero() {
		return func() {}
	}
	t := time.AfterFunc(time.Until(exp), func() { c.endUnauthorized(transport.ReasonExpired) })
	return func() { t.Stop() }
}
