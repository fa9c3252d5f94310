package preview

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"sync"
	"time"

	"github.com/sidecar-dev/sidecar/auth"
)

// Sessions are the preview's browser credentials: a navigation cannot
// carry the token in a header, so POST <base>/web/session exchanges it
// (Authorization: Bearer) for a session cookie (CookieName) that
// <base>/ports/ checks. A session is 32 random bytes (base64url), kept by
// its SHA-256 digest only, bound to the principal it was made for, valid
// for ttl after it was made or last renewed (Renew, on use past half its
// life) and forgotten on logout (Revoke).
//
// At most max are kept: a new one past the bound forgets the expired
// ones, then the one nearest its expiry (a person's older tab logs in
// again; the daemon's memory stays bounded, ~100 bytes a session). A
// session forgotten (revoked, evicted, expired) ends the preview streams
// it opened (Server). The
// zero value is not usable: use NewSessions.
type Sessions struct {
	ttl time.Duration
	max int
	now func() time.Time

	mu   sync.Mutex
	byID map[[sha256.Size]byte]*session

	// onForget, when set (before use), is told of each session forgotten:
	// revoked, evicted by the bound, or found expired; outside mu.
	onForget func(key [sha256.Size]byte)
}

// Key is the digest a session is kept by (and its streams tracked by).
func Key(id string) [sha256.Size]byte { return sha256.Sum256([]byte(id)) }

func (ss *Sessions) forgot(keys ...[sha256.Size]byte) {
	if ss.onForget == nil {
		return
	}
	for _, k := range keys {
		ss.onForget(k)
	}
}

type session struct {
	id      auth.Identity
	expires time.Time
}

// sessionBytes is the random part of a session id, before base64url.
const sessionBytes = 32

// NewSessions returns an empty store of sessions valid for ttl, at most
// max kept, time read from now (time.Now when nil; tests inject a clock).
func NewSessions(ttl time.Duration, max int, now func() time.Time) *Sessions {
	if now == nil {
		now = time.Now
	}
	if max < 1 {
		max = 1
	}
	return &Sessions{ttl: ttl, max: max, now: now, byID: map[[sha256.Size]byte]*session{}}
}

// TTL is a session's life from its creation or last renewal.
func (ss *Sessions) TTL() time.Duration { return ss.ttl }

// Create returns a new session id for identity who, valid for TTL (and
// never past who.Expiry).
func (ss *Sessions) Create(who auth.Identity) (string, error) {
	var raw [sessionBytes]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", err
	}
	id := base64.RawURLEncoding.EncodeToString(raw[:])
	now := ss.now()
	var gone [][sha256.Size]byte
	defer func() { ss.forgot(gone...) }()
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if len(ss.byID) >= ss.max {
		for k, s := range ss.byID {
			if !now.Before(s.expires) {
				delete(ss.byID, k)
				gone = append(gone, k)
			}
		}
	}
	for len(ss.byID) >= ss.max {
		var oldest [sha256.Size]byte
		var at time.Time
		for k, s := range ss.byID {
			if at.IsZero() || s.expires.Before(at) {
				oldest, at = k, s.expires
			}
		}
		delete(ss.byID, oldest)
		gone = append(gone, oldest)
	}
	ss.byID[sha256.Sum256([]byte(id))] = &session{id: who, expires: now.Add(ss.ttl)}
	return id, nil
}

// Check returns the identity of session id and whether it is valid now;
// when renew, a valid session past half its life is renewed (valid for
// TTL from now) and renewed is true: the caller sends its cookie again.
func (ss *Sessions) Check(id string, renew bool) (who auth.Identity, ok, renewed bool) {
	if id == "" {
		return auth.Identity{}, false, false
	}
	k := sha256.Sum256([]byte(id))
	now := ss.now()
	ss.mu.Lock()
	s := ss.byID[k]
	if s == nil {
		ss.mu.Unlock()
		return auth.Identity{}, false, false
	}
	if !now.Before(s.expires) || (!s.id.Expiry.IsZero() && !now.Before(s.id.Expiry)) {
		delete(ss.byID, k)
		ss.mu.Unlock()
		ss.forgot(k)
		return auth.Identity{}, false, false
	}
	defer ss.mu.Unlock()
	if renew && s.expires.Sub(now) < ss.ttl/2 {
		s.expires = now.Add(ss.ttl)
		renewed = true
	}
	return s.id, true, renewed
}

// RevokeIdentity forgets every session of name authenticated by method
// (its credential revoked): the requests in progress with them end
// (onForget). It returns how many there were.
func (ss *Sessions) RevokeIdentity(name, method string) int {
	var gone [][sha256.Size]byte
	ss.mu.Lock()
	for k, s := range ss.byID {
		if s.id.Name == name && s.id.Method == method {
			delete(ss.byID, k)
			gone = append(gone, k)
		}
	}
	ss.mu.Unlock()
	ss.forgot(gone...)
	return len(gone)
}

// Revoke forgets session id (logout); an unknown id is no error.
func (ss *Sessions) Revoke(id string) {
	k := sha256.Sum256([]byte(id))
	ss.mu.Lock()
	delete(ss.byID, k)
	ss.mu.Unlock()
	ss.forgot(k)
}

// Expires returns when session id expires (unless renewed), and whether
// it is kept.
func (ss *Sessions) Expires(id string) (time.Time, bool) {
	k := sha256.Sum256([]byte(id))
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if s := ss.byID[k]; s != nil {
		return s.expires, true
	}
	return time.Time{}, false
}

// Len returns how many sessions are kept (expired ones not yet forgotten
// included).
func (ss *Sessions) Len() int {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return len(ss.byID)
}
