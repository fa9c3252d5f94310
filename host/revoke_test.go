package host_test

import (
	"testing"
	"time"

	"github.com/sidecar-dev/sidecar/auth"
	"github.com/sidecar-dev/sidecar/config"
	"github.com/sidecar-dev/sidecar/transport"
)

// TestRevoke: Revoke closes the identity's connections (only its, and
// only for its method) as unauthorized "revoked", keeps nothing of them,
// and drops the state it had retained from an earlier loss, so neither
// client can resume.
func TestRevoke(t *testing.T) {
	srv := newServer(t, func(c *config.Config) { c.Journal.ReconnectGrace = time.Hour })
	alice := auth.Identity{Name: "alice", Role: auth.User, Method: "tokens_file"}
	lost := connectIdentity(t, srv, alice)
	lostOffer := lost.initialize("alice-lost")
	lost.cut() // retained for an hour
	open := connectIdentity(t, srv, alice)
	openOffer := open.initialize("alice-open")
	bob := connectIdentity(t, srv, auth.Identity{Name: "bob", Role: auth.User, Method: "tokens_file"})
	bob.initialize("bob")
	oidcAlice := connectIdentity(t, srv, auth.Identity{Name: "alice", Role: auth.User, Method: "oidc"})
	oidcAlice.initialize("alice-oidc")

	if closed, dropped := srv.Revoke("alice", "tokens_file", transport.ReasonRevoked); closed != 1 || dropped != 1 {
		t.Fatalf("Revoke closed %d and dropped %d, want 1 and 1", closed, dropped)
	}
	if code, reason, _ := open.closed(); code != transport.CloseUnauthorized || reason != "revoked" {
		t.Fatalf("alice's open connection: %d %q, want 4007 revoked", code, reason)
	}
	<-open.served
	open.served <- nil
	for _, c := range []struct {
		id    string
		token string
	}{{"alice-lost", lostOffer.Resume.Token}, {"alice-open", openOffer.Resume.Token}} {
		again := connectIdentity(t, srv, alice)
		again.callErr("reconnect", map[string]any{"channel": "ahp-root://", "clientId": c.id, "resumeToken": c.token, "lastSeenServerSeq": 0, "subscriptions": []string{}}, -32008)
	}
	bob.mustCall("subscribe", map[string]any{"channel": "ahp-root://"})
	oidcAlice.mustCall("subscribe", map[string]any{"channel": "ahp-root://"})
}

// TestIdentityExpiry: a connection whose identity expires is closed as
// unauthorized "expired" at its expiry, and nothing of it is retained.
func TestIdentityExpiry(t *testing.T) {
	srv := newServer(t, func(c *config.Config) { c.Journal.ReconnectGrace = time.Hour })
	id := auth.Identity{Name: "carol", Role: auth.User, Method: "oidc", Expiry: time.Now().Add(300 * time.Millisecond)}
	hc := connectIdentity(t, srv, id)
	offer := hc.initialize("carol")
	if code, reason, _ := hc.closed(); code != transport.CloseUnauthorized || reason != "expired" {
		t.Fatalf("at expiry: %d %q, want 4007 expired", code, reason)
	}
	if time.Now().Before(id.Expiry) {
		t.Fatal("closed before its expiry")
	}
	id.Expiry = time.Time{}
	again := connectIdentity(t, srv, id)
	again.callErr("reconnect", map[string]any{"channel": "ahp-root://", "clientId": "carol", "resumeToken": offer.Resume.Token, "lastSeenServerSeq": 0, "subscriptions": []string{}}, -32008)
}
