package transport

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/sidecar-dev/sidecar/auth"
)

// Tickets are the single-use credentials a browser puts where its API
// forces a URL (the WebTransport constructor, new WebSocket), so the
// bearer token itself never goes into one: a URL ends up in proxies'
// access logs, browser history and Referer headers. The page exchanges
// its token (sent in an Authorization header) for a ticket at
// POST /web/ticket, then opens /transport-io?ticket=T. A ticket is 32
// random bytes (base64url), bound to the identity it was issued to,
// valid for TicketTTL and consumed by its first use: one seen later, in a
// log, is worth nothing.
//
// Tickets are kept by their SHA-256 digest, not as issued, and never
// logged. The zero value is not usable: use NewTickets.
type Tickets struct {
	ttl time.Duration
	max int
	now func() time.Time

	mu   sync.Mutex
	byID map[[sha256.Size]byte]*ticket
}

type ticket struct {
	id      auth.Identity
	expires time.Time
	used    bool
}

// TicketTTL is how long a ticket is valid once issued: a page uses its
// ticket within a round trip, and a ticket found later (a log, a proxy)
// must have expired.
const TicketTTL = 20 * time.Second

// MaxTickets bounds the tickets held at once (outstanding, and those kept
// after use or expiry to say why a second use is refused). At the bound,
// the used and expired ones are forgotten first; when all are outstanding
// a new one is refused (ErrTooManyTickets, HTTP 429) rather than one in
// flight forgotten. A page takes two per connect (one per transport it
// tries), so 256 is far above any person's use and bounds what a holder
// of the token can make the daemon keep (256 × ~100 bytes).
const MaxTickets = 256

// ticketBytes is the random part of a ticket, before base64url.
const ticketBytes = 32

// Ticket refusals: each is the WT_UNAUTHORIZED close reason (seed 002 §4:
// a short code the client compares) of a transport-io session opened
// with such a ticket.
var (
	// ErrTicketUsed: the ticket was used before (a replay).
	ErrTicketUsed = &TicketError{Reason: "ticket-used"}
	// ErrTicketExpired: the ticket was not used within TicketTTL.
	ErrTicketExpired = &TicketError{Reason: "ticket-expired"}
	// ErrTicketUnknown: never issued by this daemon (or by its previous
	// run), or forgotten long after its use or expiry.
	ErrTicketUnknown = &TicketError{Reason: "ticket-unknown"}
	// ErrTooManyTickets: MaxTickets are outstanding; try again once some
	// are used or expired.
	ErrTooManyTickets = errors.New("too many outstanding tickets")
)

// TicketError is a ticket refused at the door; Reason is its close reason.
type TicketError struct{ Reason string }

func (e *TicketError) Error() string { return "ticket refused: " + e.Reason }

// NewTickets returns an empty ticket store: tickets valid for ttl
// (TicketTTL when 0), at most max held (MaxTickets when 0), time read
// from now (time.Now when nil; tests inject a clock).
func NewTickets(ttl time.Duration, max int, now func() time.Time) *Tickets {
	if ttl <= 0 {
		ttl = TicketTTL
	}
	if max <= 0 {
		max = MaxTickets
	}
	if now == nil {
		now = time.Now
	}
	return &Tickets{ttl: ttl, max: max, now: now, byID: map[[sha256.Size]byte]*ticket{}}
}

// TTL is how long a ticket is valid once issued.
func (ts *Tickets) TTL() time.Duration { return ts.ttl }

// Issue returns a new ticket for id, valid for TTL (or until id.Expiry
// when sooner), or ErrTooManyTickets.
func (ts *Tickets) Issue(id auth.Identity) (string, error) {
	var raw [ticketBytes]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", err
	}
	t := base64.RawURLEncoding.EncodeToString(raw[:])
	now := ts.now()
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if len(ts.byID) >= ts.max {
		ts.forgetSpent(now)
	}
	if len(ts.byID) >= ts.max {
		return "", ErrTooManyTickets
	}
	exp := now.Add(ts.ttl)
	if !id.Expiry.IsZero() && id.Expiry.Before(exp) {
		exp = id.Expiry
	}
	ts.byID[sha256.Sum256([]byte(t))] = &ticket{id: id, expires: exp}
	return t, nil
}

// forgetSpent drops the used and the expired tickets (kept only to say
// why a second use is refused). Called with mu held.
func (ts *Tickets) forgetSpent(now time.Time) {
	for id, k := range ts.byID {
		if k.used || !now.Before(k.expires) {
			delete(ts.byID, id)
		}
	}
}

// Redeem consumes t and returns the identity it was issued to, or the
// *TicketError saying why it is refused (used, expired, unknown or
// revoked: unknown). A ticket is consumed whether or not the session it
// opens goes on.
func (ts *Tickets) Redeem(t string) (auth.Identity, error) {
	id := sha256.Sum256([]byte(t))
	now := ts.now()
	ts.mu.Lock()
	defer ts.mu.Unlock()
	k, ok := ts.byID[id]
	switch {
	case !ok:
		return auth.Identity{}, ErrTicketUnknown
	case k.used:
		return auth.Identity{}, ErrTicketUsed
	case !now.Before(k.expires):
		return auth.Identity{}, ErrTicketExpired
	}
	k.used = true
	return k.id, nil
}

// Revoke forgets the tickets issued to name by method (a tokens file
// entry removed or changed): redeeming one is then ticket-unknown. It
// returns how many were outstanding.
func (ts *Tickets) Revoke(name, method string) int {
	now := ts.now()
	ts.mu.Lock()
	defer ts.mu.Unlock()
	n := 0
	for key, k := range ts.byID {
		if k.id.Name == name && k.id.Method == method {
			if !k.used && now.Before(k.expires) {
				n++
			}
			delete(ts.byID, key)
		}
	}
	return n
}

// Outstanding returns how many tickets are issued, unused and unexpired.
func (ts *Tickets) Outstanding() int {
	now := ts.now()
	ts.mu.Lock()
	defer ts.mu.Unlock()
	n := 0
	for _, k := range ts.byID {
		if !k.used && now.Before(k.expires) {
			n++
		}
	}
	return n
}

// TicketFromRequest returns the ticket query parameter of r ("" when none).
func TicketFromRequest(r *http.Request) string {
	return r.URL.Query().Get("ticket")
}

// BearerToken returns the token of r's Authorization header ("Bearer T"),
// never one from the URL: for endpoints that take the token only where
// no log records it (POST /web/ticket).
func BearerToken(r *http.Request) string {
	h := r.Header.Get("Authorization")
	if v, ok := strings.CutPrefix(h, "Bearer "); ok {
		return strings.TrimSpace(v)
	}
	if v, ok := strings.CutPrefix(h, "bearer "); ok {
		return strings.TrimSpace(v)
	}
	return ""
}
