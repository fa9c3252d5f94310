// Package oidctest is a small OIDC issuer for tests, served over
// loopback in the test process: discovery, a JSON Web Key Set of RSA
// keys that can be rotated, an authorization endpoint that approves at
// once (for a configured user) and a token endpoint that checks the PKCE
// S256 verifier. It can be taken down (503) and brought back, and made
// to advertise another issuer.
package oidctest

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/go-jose/go-jose/v4"
)

// Issuer is a running test issuer. Its fields are set by New; change
// its behaviour with its methods.
type Issuer struct {
	// URL is the issuer URL (http://127.0.0.1:PORT), iss of its tokens.
	URL string
	// ClientID is the audience of the tokens it signs by default, and
	// the only client its token endpoint serves.
	ClientID string

	srv *httptest.Server

	mu        sync.Mutex
	key       *rsa.PrivateKey
	kid       string
	keys      []jose.JSONWebKey // published
	all       []jose.JSONWebKey // every key it has had, oldest first
	down      bool
	advertise string // discovery's issuer ("" : URL)
	user      map[string]any
	codes     map[string]grant
	ttl       time.Duration
	nkeys     int
	// Requests counts the requests served, by path.
	requests map[string]int
}

type grant struct {
	clientID, redirectURI, challenge, nonce string
}

// New starts an issuer for client clientID, with one signing key, and
// user claims {"sub": "alice-sub", "email": "alice@example.com",
// "email_verified": true}. Close it when done.
func New(clientID string) *Issuer {
	is := &Issuer{
		ClientID: clientID,
		codes:    map[string]grant{},
		requests: map[string]int{},
		ttl:      time.Hour,
		user:     map[string]any{"sub": "alice-sub", "email": "alice@example.com", "email_verified": true},
	}
	is.rotate()
	mux := http.NewServeMux()
	mux.HandleFunc("/.well-known/openid-configuration", is.discovery)
	mux.HandleFunc("/keys", is.jwks)
	mux.HandleFunc("/authorize", is.authorize)
	mux.HandleFunc("/token", is.token)
	is.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		is.mu.Lock()
		is.requests[r.URL.Path]++
		down := is.down
		is.mu.Unlock()
		if down {
			http.Error(w, "issuer down", http.StatusServiceUnavailable)
			return
		}
		mux.ServeHTTP(w, r)
	}))
	is.URL = is.srv.URL
	return is
}

// Close stops the issuer.
func (is *Issuer) Close() { is.srv.Close() }

// Requests returns how many requests path has had.
func (is *Issuer) Requests(path string) int {
	is.mu.Lock()
	defer is.mu.Unlock()
	return is.requests[path]
}

// SetDown makes every endpoint answer 503 (true) or serve again.
func (is *Issuer) SetDown(down bool) {
	is.mu.Lock()
	is.down = down
	is.mu.Unlock()
}

// Advertise makes discovery name issuer instead of URL ("" : URL).
func (is *Issuer) Advertise(issuer string) {
	is.mu.Lock()
	is.advertise = issuer
	is.mu.Unlock()
}

// SetUser sets the claims of the tokens its token endpoint issues
// (beyond iss, aud, exp, iat, nonce).
func (is *Issuer) SetUser(claims map[string]any) {
	is.mu.Lock()
	is.user = claims
	is.mu.Unlock()
}

// SetTokenTTL sets the life of the ID tokens its token endpoint issues.
func (is *Issuer) SetTokenTTL(d time.Duration) {
	is.mu.Lock()
	is.ttl = d
	is.mu.Unlock()
}

// Rotate replaces the signing key with a new one under a new kid; the
// key set publishes only the new one. It returns the new kid.
func (is *Issuer) Rotate() string {
	is.mu.Lock()
	defer is.mu.Unlock()
	return is.rotate()
}

func (is *Issuer) rotate() string {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		panic(err)
	}
	is.nkeys++
	is.key, is.kid = k, "key-"+strconv.Itoa(is.nkeys)
	jwk := jose.JSONWebKey{Key: &k.PublicKey, KeyID: is.kid, Algorithm: string(jose.RS256), Use: "sig"}
	is.keys = []jose.JSONWebKey{jwk}
	is.all = append(is.all, jwk)
	return is.kid
}

// PublishAll makes the key set publish every key the issuer has had
// (as a provider does while a rotation settles: tokens of the previous
// key still verify), until the next Rotate.
func (is *Issuer) PublishAll() {
	is.mu.Lock()
	is.keys = append([]jose.JSONWebKey(nil), is.all...)
	is.mu.Unlock()
}

// Claims returns a token's usual claims: iss, aud (ClientID), sub,
// email, email_verified, iat and exp an hour on.
func (is *Issuer) Claims() map[string]any {
	now := time.Now()
	return map[string]any{
		"iss": is.URL, "aud": is.ClientID, "sub": "alice-sub",
		"email": "alice@example.com", "email_verified": true,
		"iat": now.Unix(), "exp": now.Add(time.Hour).Unix(),
	}
}

// Sign returns claims as a compact JWS signed with the current key.
func (is *Issuer) Sign(claims map[string]any) string {
	is.mu.Lock()
	k, kid := is.key, is.kid
	is.mu.Unlock()
	return SignWith(k, kid, claims)
}

// SignWith returns claims as a compact RS256 JWS signed with key under kid.
func SignWith(key *rsa.PrivateKey, kid string, claims map[string]any) string {
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: key},
		(&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", kid))
	if err != nil {
		panic(err)
	}
	b, err := json.Marshal(claims)
	if err != nil {
		panic(err)
	}
	jws, err := s.Sign(b)
	if err != nil {
		panic(err)
	}
	out, err := jws.CompactSerialize()
	if err != nil {
		panic(err)
	}
	return out
}

func (is *Issuer) discovery(w http.ResponseWriter, r *http.Request) {
	is.mu.Lock()
	iss := is.advertise
	is.mu.Unlock()
	if iss == "" {
		iss = is.URL
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{
		"issuer":                                iss,
		"authorization_endpoint":                is.URL + "/authorize",
		"token_endpoint":                        is.URL + "/token",
		"jwks_uri":                              is.URL + "/keys",
		"id_token_signing_alg_values_supported": []string{"RS256"},
		"response_types_supported":              []string{"code"},
		"code_challenge_methods_supported":      []string{"S256"},
	})
}

func (is *Issuer) jwks(w http.ResponseWriter, r *http.Request) {
	is.mu.Lock()
	set := jose.JSONWebKeySet{Keys: is.keys}
	is.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(set)
}

// authorize approves at once: it redirects to redirect_uri with a code
// and the state, as a provider would after the user signed in.
func (is *Issuer) authorize(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if q.Get("response_type") != "code" || q.Get("client_id") != is.ClientID ||
		q.Get("code_challenge_method") != "S256" || q.Get("code_challenge") == "" || q.Get("redirect_uri") == "" {
		http.Error(w, "bad authorization request: "+r.URL.RawQuery, http.StatusBadRequest)
		return
	}
	code := rand.Text()
	is.mu.Lock()
	is.codes[code] = grant{clientID: q.Get("client_id"), redirectURI: q.Get("redirect_uri"), challenge: q.Get("code_challenge"), nonce: q.Get("nonce")}
	is.mu.Unlock()
	u, err := url.Parse(q.Get("redirect_uri"))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	v := u.Query()
	v.Set("code", code)
	v.Set("state", q.Get("state"))
	u.RawQuery = v.Encode()
	http.Redirect(w, r, u.String(), http.StatusFound)
}

// token exchanges a code (once) for an ID token, checking the PKCE
// verifier against the challenge.
func (is *Issuer) token(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil || r.Method != http.MethodPost {
		http.Error(w, "bad token request", http.StatusBadRequest)
		return
	}
	fail := func(code, desc string) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_ = json.NewEncoder(w).Encode(map[string]string{"error": code, "error_description": desc})
	}
	clientID := r.PostForm.Get("client_id")
	if id, _, ok := r.BasicAuth(); ok {
		clientID = id
	}
	is.mu.Lock()
	g, ok := is.codes[r.PostForm.Get("code")]
	delete(is.codes, r.PostForm.Get("code"))
	user, ttl := is.user, is.ttl
	is.mu.Unlock()
	sum := sha256.Sum256([]byte(r.PostForm.Get("code_verifier")))
	switch {
	case r.PostForm.Get("grant_type") != "authorization_code":
		fail("unsupported_grant_type", r.PostForm.Get("grant_type"))
		return
	case !ok:
		fail("invalid_grant", "unknown or used code")
		return
	case clientID != g.clientID:
		fail("invalid_client", "client "+clientID)
		return
	case r.PostForm.Get("redirect_uri") != g.redirectURI:
		fail("invalid_grant", "redirect_uri differs")
		return
	case base64.RawURLEncoding.EncodeToString(sum[:]) != g.challenge:
		fail("invalid_grant", "PKCE verifier does not match the challenge")
		return
	}
	now := time.Now()
	c := map[string]any{"iss": is.URL, "aud": is.ClientID, "iat": now.Unix(), "exp": now.Add(ttl).Unix()}
	if g.nonce != "" {
		c["nonce"] = g.nonce
	}
	for k, v := range user {
		c[k] = v
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(map[string]any{
		"access_token": rand.Text(), "token_type": "Bearer", "expires_in": int(ttl.Seconds()),
		"id_token": is.Sign(c),
	})
}

// String names the issuer.
func (is *Issuer) String() string { return fmt.Sprintf("test issuer %s", is.URL) }
