// Package oidc authenticates bearer JWTs (OIDC ID tokens, or JWT access
// tokens for a configured audience) from one issuer, with
// github.com/coreos/go-oidc/v3: issuer discovery, the issuer's JSON Web
// Key Set fetched again when a token names a key it has not seen (key
// rotation), issuer, audience and expiry checks (with a small clock
// skew). A claim names the principal; a claim or a group mapping gives
// the role (docs/operations.md "OIDC").
//
// A Verifier is an auth.Authenticator. Its answers:
//   - a valid token: auth.Identity{Name: the principal claim, Role,
//     Method: "oidc", Expiry: the token's exp plus Options.Skew, the
//     last moment the token is accepted: a session opened with it ends
//     then, not at once when it came in within the skew};
//   - an expired token: auth.ErrExpired;
//   - any other bad token (signature, issuer, audience, missing claims,
//     no role): auth.ErrUnknown, the detail logged (never the token);
//   - the issuer unreachable (discovery or key fetch failed): an error
//     that is not a *auth.Refusal, so the caller treats it as no
//     decision (seed 002 §4) and the next attempt may pass.
//
// Discovery is lazy: New makes no request, the first Authenticate (or
// Discover) does, and a failed discovery is retried on a later call, at
// most once per Options.RetryInterval, so a daemon starts while its
// issuer is briefly down.
//
// Login (login.go) adds the page's sign-in: the authorization code flow
// with PKCE, whose ID token the page then uses as its bearer.
package oidc

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	gooidc "github.com/coreos/go-oidc/v3/oidc"
	"github.com/hashicorp/go-hclog"

	"github.com/sidecar-dev/sidecar/auth"
)

// Method is Identity.Method of every identity a Verifier returns.
const Method = "oidc"

// Defaults and bounds of Options.
const (
	// DefaultPrincipalClaim is the claim naming the principal.
	DefaultPrincipalClaim = "email"
	// DefaultGroupsClaim is the claim listing the token's groups.
	DefaultGroupsClaim = "groups"
	// DefaultSkew is the clock skew allowed past a token's exp.
	DefaultSkew = 30 * time.Second
	// MaxSkew bounds Options.Skew: a longer one would keep expired
	// tokens alive.
	MaxSkew = 5 * time.Minute
	// DefaultRetryInterval is the least time between two discovery
	// attempts while the issuer cannot be reached: every connection
	// attempt does not become a request to it.
	DefaultRetryInterval = 2 * time.Second
	// DefaultHTTPTimeout bounds one request to the issuer (discovery,
	// keys, code exchange).
	DefaultHTTPTimeout = 10 * time.Second
	// MaxTokenBytes bounds a credential looked at: larger ones are
	// refused unparsed (a JWT with a few claims is about 1 KiB).
	MaxTokenBytes = 16 << 10
)

// Options configure a Verifier.
type Options struct {
	// Issuer is the issuer URL; its /.well-known/openid-configuration
	// must name the same issuer, and tokens must carry it as iss.
	Issuer string
	// ClientID is the OAuth client of the page's sign-in; an accepted
	// audience when set.
	ClientID string
	// Audiences are further accepted audiences (an API's identifier for
	// JWT access tokens). A token is accepted when its aud holds
	// ClientID or one of these. At least one of the two is required.
	Audiences []string
	// PrincipalClaim is the string claim whose value is Identity.Name
	// (DefaultPrincipalClaim when ""). For "email", a token whose
	// email_verified is false is refused.
	PrincipalClaim string
	// RoleClaim, if set, is a claim holding a role name ("owner",
	// "user", "viewer"), or a list of them: the most allowed one counts.
	// It is looked at first.
	RoleClaim string
	// GroupsClaim is the claim holding the token's groups (a string or a
	// list of strings; DefaultGroupsClaim when ""). Roles maps a role to
	// the groups that give it; the most allowed role any of the token's
	// groups maps to counts.
	GroupsClaim string
	Roles       map[auth.Role][]string
	// DefaultRole is the role of a token that neither RoleClaim nor
	// Roles gives one. "": such a token is refused (auth.ErrUnknown).
	DefaultRole auth.Role
	// Skew is how long past its exp a token is still accepted (clock
	// drift between the issuer and this machine): 0 to MaxSkew.
	Skew time.Duration
	// RetryInterval is the least time between two discovery attempts
	// (DefaultRetryInterval when 0).
	RetryInterval time.Duration
	// HTTPClient makes the requests to the issuer (nil: one with
	// DefaultHTTPTimeout).
	HTTPClient *http.Client
	// Logger receives why tokens are refused (never a token), at debug
	// for refusals, at warn for an unreachable issuer. nil: none.
	Logger hclog.Logger
	// Now is the clock (nil: time.Now).
	Now func() time.Time
}

// Verifier is an auth.Authenticator for the tokens of one OIDC issuer.
// It is safe for concurrent use.
type Verifier struct {
	opts   Options
	client *http.Client
	log    hclog.Logger
	now    func() time.Time

	// discover is a one-slot semaphore: one discovery at a time, the
	// others wait for it (or their context).
	discover chan struct{}
	mu       sync.Mutex
	provider *gooidc.Provider
	verifier *gooidc.IDTokenVerifier
	lastTry  time.Time
	lastErr  error
}

var _ auth.Authenticator = (*Verifier)(nil)

// New checks opts and returns a Verifier. It makes no request: the
// issuer is discovered on first use.
func New(opts Options) (*Verifier, error) {
	if opts.Issuer == "" {
		return nil, errors.New("oidc: no issuer")
	}
	if opts.ClientID == "" && len(opts.Audiences) == 0 {
		return nil, errors.New("oidc: neither a client_id nor audiences: no token could be accepted")
	}
	if opts.Skew < 0 || opts.Skew > MaxSkew {
		return nil, fmt.Errorf("oidc: skew %v outside 0 to %v", opts.Skew, MaxSkew)
	}
	for r := range opts.Roles {
		if _, err := auth.ParseRole(string(r)); err != nil {
			return nil, fmt.Errorf("oidc: roles: %w", err)
		}
	}
	if opts.DefaultRole != "" {
		if _, err := auth.ParseRole(string(opts.DefaultRole)); err != nil {
			return nil, fmt.Errorf("oidc: default_role: %w", err)
		}
	}
	if opts.PrincipalClaim == "" {
		opts.PrincipalClaim = DefaultPrincipalClaim
	}
	if opts.GroupsClaim == "" {
		opts.GroupsClaim = DefaultGroupsClaim
	}
	if opts.RetryInterval <= 0 {
		opts.RetryInterval = DefaultRetryInterval
	}
	v := &Verifier{
		opts:     opts,
		client:   opts.HTTPClient,
		log:      opts.Logger,
		now:      opts.Now,
		discover: make(chan struct{}, 1),
	}
	if v.client == nil {
		v.client = &http.Client{Timeout: DefaultHTTPTimeout}
	}
	if v.log == nil {
		v.log = hclog.NewNullLogger()
	}
	if v.now == nil {
		v.now = time.Now
	}
	return v, nil
}

// ErrIssuerUnavailable wraps every failure to reach the issuer: no
// decision was made about the token.
var ErrIssuerUnavailable = errors.New("oidc: issuer unavailable")

// Discover fetches the issuer's discovery document if that has not
// succeeded yet (sidecar serve calls it at start to log a wrong issuer
// early; a failure is retried on use). It returns the provider's error
// wrapped in ErrIssuerUnavailable, or an IssuerMismatchError from
// go-oidc when the document names another issuer.
func (v *Verifier) Discover(ctx context.Context) error {
	_, _, err := v.ready(ctx)
	return err
}

// ready returns the provider and token verifier, discovering them first
// if needed.
func (v *Verifier) ready(ctx context.Context) (*gooidc.Provider, *gooidc.IDTokenVerifier, error) {
	v.mu.Lock()
	p, iv := v.provider, v.verifier
	v.mu.Unlock()
	if p != nil {
		return p, iv, nil
	}
	select {
	case v.discover <- struct{}{}:
	case <-ctx.Done():
		return nil, nil, fmt.Errorf("%w: %v", ErrIssuerUnavailable, ctx.Err())
	}
	defer func() { <-v.discover }()
	v.mu.Lock()
	p, iv = v.provider, v.verifier
	last, lastErr := v.lastTry, v.lastErr
	v.mu.Unlock()
	if p != nil { // discovered while this call waited
		return p, iv, nil
	}
	now := v.now()
	if lastErr != nil && now.Sub(last) < v.opts.RetryInterval {
		return nil, nil, lastErr
	}
	// The client's timeout bounds the request; ctx only cancels it.
	hctx := gooidc.ClientContext(ctx, v.client)
	p, err := gooidc.NewProvider(hctx, v.opts.Issuer)
	if err != nil {
		err = fmt.Errorf("%w: discovery at %s: %v", ErrIssuerUnavailable, v.opts.Issuer, err)
		v.log.Warn("oidc: issuer discovery failed; tokens cannot be checked until it succeeds", "issuer", v.opts.Issuer, "error", err)
		v.mu.Lock()
		v.lastTry, v.lastErr = now, err
		v.mu.Unlock()
		return nil, nil, err
	}
	// The key set keeps this context for its fetches (its cancellation
	// ignored): the client only.
	keys := &keySet{inner: gooidc.NewRemoteKeySet(gooidc.ClientContext(context.Background(), v.client), jwksURL(p))}
	iv = gooidc.NewVerifier(v.opts.Issuer, keys, &gooidc.Config{
		SkipClientIDCheck:    true, // Authenticate checks ClientID or Audiences
		SkipExpiryCheck:      true, // Authenticate checks exp with Skew, after the signature
		SupportedSigningAlgs: signingAlgs(p),
	})
	v.log.Info("oidc: issuer discovered", "issuer", v.opts.Issuer)
	v.mu.Lock()
	v.provider, v.verifier, v.lastErr = p, iv, nil
	v.mu.Unlock()
	return p, iv, nil
}

// jwksURL returns the provider's jwks_uri.
func jwksURL(p *gooidc.Provider) string {
	var c struct {
		JWKS string `json:"jwks_uri"`
	}
	_ = p.Claims(&c)
	return c.JWKS
}

// signingAlgs returns the provider's advertised signing algorithms that
// go-oidc supports (nil: RS256).
func signingAlgs(p *gooidc.Provider) []string {
	var c struct {
		Algs []string `json:"id_token_signing_alg_values_supported"`
	}
	_ = p.Claims(&c)
	var out []string
	for _, a := range c.Algs {
		switch a {
		case gooidc.RS256, gooidc.RS384, gooidc.RS512, gooidc.ES256, gooidc.ES384, gooidc.ES512, gooidc.PS256, gooidc.PS384, gooidc.PS512, gooidc.EdDSA:
			out = append(out, a)
		}
	}
	return out
}

// keySet is go-oidc's remote key set, telling a failure to fetch the
// keys (no decision) from a signature no key verifies (a refusal).
type keySet struct{ inner *gooidc.RemoteKeySet }

// fetchFailureKey is the context key of the *error where keySet
// records a fetch failure: go-oidc's verifier formats the key set's
// error with %v, losing it.
type fetchFailureKey struct{}

func (k *keySet) VerifySignature(ctx context.Context, jwt string) ([]byte, error) {
	payload, err := k.inner.VerifySignature(ctx, jwt)
	// RemoteKeySet wraps (%w) only a failure to fetch the keys; a
	// signature that no key verifies is a plain error.
	if err != nil && errors.Unwrap(err) != nil {
		if p, ok := ctx.Value(fetchFailureKey{}).(*error); ok {
			*p = err
		}
	}
	return payload, err
}

// claims are the claims Authenticate reads beyond go-oidc's.
type claims map[string]any

// Authenticate verifies credential (a compact JWS) and returns its
// identity; see the package doc for its refusals.
func (v *Verifier) Authenticate(ctx context.Context, credential string) (auth.Identity, error) {
	id, _, err := v.verify(ctx, credential)
	return id, err
}

// verify is Authenticate, also returning the verified token (for the
// sign-in's nonce).
func (v *Verifier) verify(ctx context.Context, credential string) (auth.Identity, *gooidc.IDToken, error) {
	if len(credential) > MaxTokenBytes || strings.Count(credential, ".") != 2 {
		v.log.Debug("oidc: refused: not a JWT", "bytes", len(credential))
		return auth.Identity{}, nil, auth.ErrUnknown
	}
	_, iv, err := v.ready(ctx)
	if err != nil {
		return auth.Identity{}, nil, err
	}
	var fetchErr error
	tok, err := iv.Verify(context.WithValue(ctx, fetchFailureKey{}, &fetchErr), credential)
	if fetchErr != nil {
		err = fmt.Errorf("%w: fetching its keys: %v", ErrIssuerUnavailable, fetchErr)
		v.log.Warn("oidc: cannot check a token", "issuer", v.opts.Issuer, "error", err)
		return auth.Identity{}, nil, err
	}
	if err != nil {
		v.log.Debug("oidc: refused", "error", err)
		return auth.Identity{}, nil, auth.ErrUnknown
	}
	if !v.audienceOK(tok.Audience) {
		v.log.Debug("oidc: refused: wrong audience", "aud", tok.Audience, "subject", tok.Subject)
		return auth.Identity{}, nil, auth.ErrUnknown
	}
	if tok.Expiry.IsZero() {
		v.log.Debug("oidc: refused: no exp claim", "subject", tok.Subject)
		return auth.Identity{}, nil, auth.ErrUnknown
	}
	if v.now().After(tok.Expiry.Add(v.opts.Skew)) {
		v.log.Debug("oidc: refused: expired", "subject", tok.Subject, "exp", tok.Expiry)
		return auth.Identity{}, nil, auth.ErrExpired
	}
	var c claims
	if err := tok.Claims(&c); err != nil {
		v.log.Debug("oidc: refused: claims", "error", err)
		return auth.Identity{}, nil, auth.ErrUnknown
	}
	name, why := v.principal(c)
	if why != "" {
		v.log.Debug("oidc: refused: "+why, "claim", v.opts.PrincipalClaim, "subject", tok.Subject)
		return auth.Identity{}, nil, auth.ErrUnknown
	}
	role, ok := v.role(c)
	if !ok {
		v.log.Info("oidc: refused: no role for this token (set roles or default_role)", "principal", name)
		return auth.Identity{}, nil, auth.ErrUnknown
	}
	// The session ends when the door would refuse the token: at exp plus
	// the skew (a token accepted within the skew must not be ended at
	// once, as expired, by the host's expiry timer).
	return auth.Identity{Name: name, Role: role, Method: Method, Expiry: tok.Expiry.Add(v.opts.Skew)}, tok, nil
}

func (v *Verifier) audienceOK(aud []string) bool {
	if v.opts.ClientID != "" && slices.Contains(aud, v.opts.ClientID) {
		return true
	}
	for _, a := range v.opts.Audiences {
		if slices.Contains(aud, a) {
			return true
		}
	}
	return false
}

// principal returns the principal claim's value, or why there is none.
func (v *Verifier) principal(c claims) (string, string) {
	s, _ := c[v.opts.PrincipalClaim].(string)
	if s == "" {
		return "", "no principal claim (a non-empty string)"
	}
	if v.opts.PrincipalClaim == "email" {
		switch ev := c["email_verified"].(type) {
		case bool:
			if !ev {
				return "", "email not verified"
			}
		case string: // some providers send "false"
			if ev == "false" {
				return "", "email not verified"
			}
		}
	}
	return s, ""
}

// strs returns a claim's string or strings.
func strs(x any) []string {
	switch x := x.(type) {
	case string:
		return []string{x}
	case []any:
		out := make([]string, 0, len(x))
		for _, e := range x {
			if s, ok := e.(string); ok {
				out = append(out, s)
			}
		}
		return out
	}
	return nil
}

// role returns the role the claims give: RoleClaim's most allowed role
// name, else the most allowed role a group maps to, else DefaultRole.
func (v *Verifier) role(c claims) (auth.Role, bool) {
	if v.opts.RoleClaim != "" {
		names := strs(c[v.opts.RoleClaim])
		for _, r := range auth.Roles {
			if slices.Contains(names, string(r)) {
				return r, true
			}
		}
	}
	if len(v.opts.Roles) > 0 {
		groups := strs(c[v.opts.GroupsClaim])
		for _, r := range auth.Roles {
			for _, g := range v.opts.Roles[r] {
				if slices.Contains(groups, g) {
					return r, true
				}
			}
		}
	}
	if v.opts.DefaultRole != "" {
		return v.opts.DefaultRole, true
	}
	return "", false
}
