package auth

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"strings"
)

// StaticName is the principal of the single auth.token.
const StaticName = "token"

// Static is the single auth.token: the owner principal "token" (Method
// "token"). Its comparison is of SHA-256 digests in constant time, so
// the time taken tells nothing of the token, not even its length.
type Static struct {
	digest [sha256.Size]byte
	set    bool
}

// NewStatic returns the authenticator of token ("" refuses everything).
func NewStatic(token string) *Static {
	return &Static{digest: sha256.Sum256([]byte(token)), set: token != ""}
}

// Authenticate implements Authenticator: the owner "token", or ErrUnknown.
func (s *Static) Authenticate(_ context.Context, credential string) (Identity, error) {
	d := sha256.Sum256([]byte(credential))
	if subtle.ConstantTimeCompare(d[:], s.digest[:]) == 1 && s.set {
		return Identity{Name: StaticName, Role: Owner, Method: "token"}, nil
	}
	return Identity{}, ErrUnknown
}

// Chain tries its authenticators in turn: the first identity wins; a
// refusal goes on to the next; a failure to decide is returned at once
// (the next attempt may succeed). A credential that looks like a JWT
// (LooksLikeJWT) goes to JWT alone when it is set.
type Chain struct {
	// Tokens are the bearer token authenticators (auth.token, the tokens
	// file), tried in order.
	Tokens []Authenticator
	// JWT, when set, decides credentials that look like JWTs (auth/oidc).
	JWT Authenticator
}

// Authenticate implements Authenticator. An empty credential is
// ErrUnknown. When every authenticator refuses, the last refusal is
// returned (its reason: unauthorized, expired, revoked).
func (c *Chain) Authenticate(ctx context.Context, credential string) (Identity, error) {
	if credential == "" {
		return Identity{}, ErrUnknown
	}
	if c.JWT != nil && LooksLikeJWT(credential) {
		return c.JWT.Authenticate(ctx, credential)
	}
	var last error = ErrUnknown
	for _, a := range c.Tokens {
		id, err := a.Authenticate(ctx, credential)
		if err == nil {
			return id, nil
		}
		if !IsRefusal(err) {
			return Identity{}, err
		}
		last = err
	}
	return Identity{}, last
}

// LooksLikeJWT reports whether credential has a JWS compact form's shape:
// three base64url parts, the first starting "eyJ" (a JSON object).
func LooksLikeJWT(credential string) bool {
	parts := strings.Split(credential, ".")
	if len(parts) != 3 || !strings.HasPrefix(parts[0], "eyJ") {
		return false
	}
	for _, p := range parts[:2] {
		if p == "" || strings.Trim(p, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_") != "" {
			return false
		}
	}
	return true
}

// Func is an Authenticator of a function.
type Func func(ctx context.Context, credential string) (Identity, error)

// Authenticate implements Authenticator.
func (f Func) Authenticate(ctx context.Context, credential string) (Identity, error) {
	return f(ctx, credential)
}
