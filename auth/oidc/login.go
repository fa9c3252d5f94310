package oidc

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	gooidc "github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"

	"github.com/sidecar-dev/sidecar/auth"
)

// The page's sign-in paths, under the daemon's base path (docs/protocol.md
// "OIDC sign-in").
const (
	// ConfigPath answers GET with {"login": "web/oidc/login"}: the page
	// shows a "Sign in" button when it is served (404 otherwise).
	ConfigPath = "/web/oidc/config"
	// LoginPath starts a sign-in: a redirect to the provider's
	// authorization endpoint with a PKCE S256 challenge and a state kept
	// here.
	LoginPath = "/web/oidc/login"
	// CallbackPath is where the provider sends the browser back: the code
	// is exchanged, the ID token verified, and the browser sent to the
	// page with the token in the URL fragment: <base>/#oidc_token=JWT, or
	// <base>/#oidc_error=MESSAGE. The fragment never reaches a server.
	CallbackPath = "/web/oidc/callback"
	// Prefix is what to mount the Login handler at.
	Prefix = "/web/oidc/"
)

// Bounds of LoginOptions.
const (
	// DefaultLoginTimeout is how long a sign-in's state is kept.
	DefaultLoginTimeout = 10 * time.Minute
	// DefaultMaxPending bounds the sign-ins in progress; past it the
	// oldest is forgotten (its callback then fails: sign in again).
	DefaultMaxPending = 1000
)

// stateCookie binds a sign-in to the browser that started it (against
// login CSRF: a callback URL of someone else's sign-in is refused).
const stateCookie = "sidecar_oidc_state"

// LoginOptions configure a Login.
type LoginOptions struct {
	// Verifier checks the ID token; its issuer and client are the
	// provider's.
	Verifier *Verifier
	// ClientID is the OAuth client; ClientSecret its secret ("" for a
	// public client: PKCE only).
	ClientID, ClientSecret string
	// Scopes asked for; nil: openid, email, profile.
	Scopes []string
	// RedirectURL is the callback registered with the provider; "":
	// https://<request Host><BasePath>/web/oidc/callback.
	RedirectURL string
	// BasePath is the daemon's base path ("" or "/vm1"), for RedirectURL
	// and the state cookie's path.
	BasePath string
	// Timeout is a state's life (DefaultLoginTimeout when 0); MaxPending
	// bounds the states kept (DefaultMaxPending when 0).
	Timeout    time.Duration
	MaxPending int
}

// Login serves the page's sign-in with the authorization code flow and
// PKCE (RFC 7636, S256). Mount it at Prefix inside the base path. Each
// state is single-use, expires after Timeout and is bound to the browser
// by a cookie; at most MaxPending are kept.
type Login struct {
	opts LoginOptions

	mu      sync.Mutex
	pending map[string]pendingLogin
}

type pendingLogin struct {
	verifier, nonce, redirect string
	expires                   time.Time
}

// NewLogin returns the sign-in handler for opts.
func NewLogin(opts LoginOptions) *Login {
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultLoginTimeout
	}
	if opts.MaxPending <= 0 {
		opts.MaxPending = DefaultMaxPending
	}
	if opts.Scopes == nil {
		opts.Scopes = []string{gooidc.ScopeOpenID, "email", "profile"}
	}
	return &Login{opts: opts, pending: map[string]pendingLogin{}}
}

// Pending returns how many sign-ins are in progress (kept states).
func (l *Login) Pending() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.pending)
}

func (l *Login) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Cache-Control", "no-store")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Content-Type-Options", "nosniff")
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		h.Set("Allow", "GET, HEAD")
		http.Error(w, "405 method not allowed", http.StatusMethodNotAllowed)
		return
	}
	switch r.URL.Path {
	case ConfigPath:
		h.Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]string{"login": strings.TrimPrefix(LoginPath, "/")})
	case LoginPath:
		l.login(w, r)
	case CallbackPath:
		l.callback(w, r)
	default:
		http.NotFound(w, r)
	}
}

func (l *Login) oauth(ctx context.Context, redirect string) (*oauth2.Config, context.Context, error) {
	p, _, err := l.opts.Verifier.ready(ctx)
	if err != nil {
		return nil, nil, err
	}
	return &oauth2.Config{
		ClientID:     l.opts.ClientID,
		ClientSecret: l.opts.ClientSecret,
		Endpoint:     p.Endpoint(),
		RedirectURL:  redirect,
		Scopes:       l.opts.Scopes,
	}, context.WithValue(ctx, oauth2.HTTPClient, l.opts.Verifier.client), nil
}

// redirectURL returns the callback URL for r.
func (l *Login) redirectURL(r *http.Request) (string, bool) {
	if l.opts.RedirectURL != "" {
		return l.opts.RedirectURL, true
	}
	if r.Host == "" || strings.ContainsAny(r.Host, "/?#@\\ ") {
		return "", false
	}
	return (&url.URL{Scheme: "https", Host: r.Host, Path: l.opts.BasePath + CallbackPath}).String(), true
}

func (l *Login) login(w http.ResponseWriter, r *http.Request) {
	redirect, ok := l.redirectURL(r)
	if !ok {
		http.Error(w, "400 bad Host header", http.StatusBadRequest)
		return
	}
	conf, _, err := l.oauth(r.Context(), redirect)
	if err != nil {
		l.toPage(w, "", "The identity provider cannot be reached; try again in a moment.")
		return
	}
	state, nonce, verifier := rand.Text(), rand.Text(), oauth2.GenerateVerifier()
	now := l.opts.Verifier.now()
	l.mu.Lock()
	l.expire(now)
	for len(l.pending) >= l.opts.MaxPending { // forget the oldest
		var oldest string
		for k, p := range l.pending {
			if oldest == "" || p.expires.Before(l.pending[oldest].expires) {
				oldest = k
			}
		}
		delete(l.pending, oldest)
	}
	l.pending[state] = pendingLogin{verifier: verifier, nonce: nonce, redirect: redirect, expires: now.Add(l.opts.Timeout)}
	l.mu.Unlock()
	http.SetCookie(w, &http.Cookie{Name: stateCookie, Value: state, Path: l.opts.BasePath + Prefix,
		MaxAge: int(l.opts.Timeout.Seconds()), HttpOnly: true, Secure: true, SameSite: http.SameSiteLaxMode})
	w.Header().Set("Location", conf.AuthCodeURL(state, oauth2.S256ChallengeOption(verifier), gooidc.Nonce(nonce)))
	w.WriteHeader(http.StatusFound)
}

// expire forgets the states past their life; l.mu is held.
func (l *Login) expire(now time.Time) {
	for k, p := range l.pending {
		if !now.Before(p.expires) {
			delete(l.pending, k)
		}
	}
}

func (l *Login) callback(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	state := q.Get("state")
	now := l.opts.Verifier.now()
	l.mu.Lock()
	p, ok := l.pending[state]
	delete(l.pending, state) // single-use, whatever follows
	l.expire(now)
	l.mu.Unlock()
	http.SetCookie(w, &http.Cookie{Name: stateCookie, Value: "", Path: l.opts.BasePath + Prefix, MaxAge: -1, HttpOnly: true, Secure: true, SameSite: http.SameSiteLaxMode})
	log := l.opts.Verifier.log
	c, _ := r.Cookie(stateCookie)
	switch {
	case !ok || state == "" || !now.Before(p.expires):
		log.Info("oidc: sign-in refused: unknown, used or expired state")
		l.toPage(w, "", "This sign-in expired or was already used; sign in again.")
		return
	case c == nil || subtle.ConstantTimeCompare([]byte(c.Value), []byte(state)) != 1:
		log.Warn("oidc: sign-in refused: the state is not this browser's (a sign-in started elsewhere)")
		l.toPage(w, "", "This sign-in was not started in this browser; sign in again.")
		return
	case q.Get("error") != "":
		log.Info("oidc: sign-in refused by the provider", "error", q.Get("error"), "description", q.Get("error_description"))
		l.toPage(w, "", "The identity provider refused the sign-in: "+q.Get("error"))
		return
	}
	conf, ctx, err := l.oauth(r.Context(), p.redirect)
	if err != nil {
		l.toPage(w, "", "The identity provider cannot be reached; try again in a moment.")
		return
	}
	tok, err := conf.Exchange(ctx, q.Get("code"), oauth2.VerifierOption(p.verifier))
	if err != nil {
		var re *oauth2.RetrieveError
		if errors.As(err, &re) {
			log.Warn("oidc: sign-in: code exchange refused", "error", re.ErrorCode, "description", re.ErrorDescription)
		} else {
			log.Warn("oidc: sign-in: code exchange failed", "error", err)
		}
		l.toPage(w, "", "The sign-in could not be completed; sign in again.")
		return
	}
	raw, _ := tok.Extra("id_token").(string)
	if raw == "" {
		log.Warn("oidc: sign-in: the token response has no id_token (is \"openid\" among the scopes?)")
		l.toPage(w, "", "The identity provider sent no ID token.")
		return
	}
	id, idt, err := l.opts.Verifier.verify(r.Context(), raw)
	switch {
	case err == nil && subtle.ConstantTimeCompare([]byte(idt.Nonce), []byte(p.nonce)) != 1:
		log.Warn("oidc: sign-in refused: the ID token's nonce is not this sign-in's")
		l.toPage(w, "", "The sign-in could not be completed; sign in again.")
	case errors.Is(err, auth.ErrUnknown):
		l.toPage(w, "", "Signed in, but this daemon accepts no role for that account.")
	case err != nil:
		l.toPage(w, "", "The sign-in could not be checked ("+err.Error()+"); sign in again.")
	default:
		log.Info("oidc: signed in", "principal", id.Name, "role", id.Role, "expires", id.Expiry)
		l.toPage(w, raw, "")
	}
}

// toPage sends the browser to the page, <base>/, with the ID token or an
// error message in the fragment. The Location is relative (from
// <base>/web/oidc/callback: ../../), so the scheme, host and base path
// the browser used are kept.
func (l *Login) toPage(w http.ResponseWriter, token, msg string) {
	frag := "oidc_token=" + url.QueryEscape(token)
	if token == "" {
		frag = "oidc_error=" + url.QueryEscape(msg)
	}
	w.Header().Set("Location", "../../#"+frag)
	w.WriteHeader(http.StatusSeeOther)
}
