package oidc

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/sidecar-dev/sidecar/auth"
)

type loginFixture struct {
	*fixture
	login  *Login
	daemon *httptest.Server
	client *http.Client
}

func setupLogin(t *testing.T, opts Options, lo LoginOptions) *loginFixture {
	t.Helper()
	f := setup(t, opts)
	mux := http.NewServeMux()
	daemon := httptest.NewServer(mux)
	t.Cleanup(daemon.Close)
	lo.Verifier, lo.ClientID = f.v, f.is.ClientID
	lo.RedirectURL = daemon.URL + CallbackPath
	l := NewLogin(lo)
	mux.Handle(Prefix, l)
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return &loginFixture{fixture: f, login: l, daemon: daemon, client: &http.Client{
		Transport:     tr,
		Timeout:       5 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
}

// get requests u with cookie c (if any) and returns the response, its
// body read.
func (lf *loginFixture) get(t *testing.T, u string, c *http.Cookie) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c != nil {
		req.AddCookie(c)
	}
	res, err := lf.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	return res, string(b)
}

// start begins a sign-in: the daemon's redirect to the provider, and the
// provider's back. It returns the callback URL and the state cookie.
func (lf *loginFixture) start(t *testing.T) (string, *http.Cookie) {
	t.Helper()
	res, _ := lf.get(t, lf.daemon.URL+LoginPath, nil)
	if res.StatusCode != http.StatusFound {
		t.Fatalf("login: %s", res.Status)
	}
	authz, err := url.Parse(res.Header.Get("Location"))
	if err != nil {
		t.Fatal(err)
	}
	q := authz.Query()
	if !strings.HasPrefix(authz.String(), lf.is.URL+"/authorize?") || q.Get("code_challenge_method") != "S256" ||
		len(q.Get("code_challenge")) != 43 || q.Get("state") == "" || q.Get("nonce") == "" ||
		q.Get("client_id") != "sidecar-web" || q.Get("redirect_uri") != lf.daemon.URL+CallbackPath || q.Get("scope") != "openid email profile" {
		t.Fatalf("authorization URL %s", authz)
	}
	var cookie *http.Cookie
	for _, c := range res.Cookies() {
		if c.Name == stateCookie {
			cookie = c
		}
	}
	if cookie == nil || cookie.Value != q.Get("state") || !cookie.HttpOnly || !cookie.Secure || cookie.SameSite != http.SameSiteLaxMode || cookie.Path != Prefix {
		t.Fatalf("state cookie %+v", cookie)
	}
	res, _ = lf.get(t, authz.String(), nil)
	if res.StatusCode != http.StatusFound {
		t.Fatalf("provider: %s", res.Status)
	}
	back := res.Header.Get("Location")
	if !strings.HasPrefix(back, lf.daemon.URL+CallbackPath+"?") {
		t.Fatalf("provider redirected to %s", back)
	}
	return back, &http.Cookie{Name: stateCookie, Value: cookie.Value}
}

// finish requests the callback and returns the page fragment's values.
func (lf *loginFixture) finish(t *testing.T, callback string, c *http.Cookie) url.Values {
	t.Helper()
	res, _ := lf.get(t, callback, c)
	loc := res.Header.Get("Location")
	if res.StatusCode != http.StatusSeeOther || !strings.HasPrefix(loc, "../../#") {
		t.Fatalf("callback: %s, Location %q", res.Status, loc)
	}
	if res.Header.Get("Cache-Control") != "no-store" || res.Header.Get("Referrer-Policy") != "no-referrer" {
		t.Fatalf("callback headers %v", res.Header)
	}
	v, err := url.ParseQuery(strings.TrimPrefix(loc, "../../#"))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestLoginFlow(t *testing.T) {
	lf := setupLogin(t, Options{}, LoginOptions{})
	res, body := lf.get(t, lf.daemon.URL+ConfigPath, nil)
	var conf map[string]string
	if err := json.Unmarshal([]byte(body), &conf); err != nil || res.StatusCode != 200 || conf["login"] != "web/oidc/login" {
		t.Fatalf("config: %s %q", res.Status, body)
	}

	callback, cookie := lf.start(t)
	if lf.login.Pending() != 1 {
		t.Fatalf("pending %d", lf.login.Pending())
	}
	got := lf.finish(t, callback, cookie)
	tok := got.Get("oidc_token")
	if tok == "" || got.Get("oidc_error") != "" {
		t.Fatalf("fragment %v", got)
	}
	// The token handed to the page is a bearer the verifier accepts.
	id, err := lf.v.Authenticate(ctx(t), tok)
	if err != nil || id.Name != "alice@example.com" || id.Method != "oidc" || id.Role != auth.User {
		t.Fatalf("handed-over token: %+v, %v", id, err)
	}
	if lf.login.Pending() != 0 {
		t.Fatalf("pending %d after the callback", lf.login.Pending())
	}
	// The state (and its verifier) are single-use.
	if e := lf.finish(t, callback, cookie).Get("oidc_error"); !strings.Contains(e, "already used") {
		t.Fatalf("replayed callback: %q", e)
	}
	// Only the callback (never the login's redirect, never a query) bears the token.
	if strings.Contains(callback, tok) {
		t.Fatal("token in a query")
	}
}

func TestLoginStateExpires(t *testing.T) {
	lf := setupLogin(t, Options{}, LoginOptions{Timeout: time.Minute})
	callback, cookie := lf.start(t)
	lf.clk.Add(time.Minute)
	if e := lf.finish(t, callback, cookie).Get("oidc_error"); !strings.Contains(e, "expired") {
		t.Fatalf("expired state: %q", e)
	}
	// Expired states are dropped when the next sign-in starts.
	_, _ = lf.start(t)
	lf.clk.Add(time.Minute)
	_, _ = lf.start(t)
	if n := lf.login.Pending(); n != 1 {
		t.Fatalf("pending %d, want 1 (the expired one dropped)", n)
	}
}

func TestLoginOtherBrowser(t *testing.T) {
	lf := setupLogin(t, Options{}, LoginOptions{})
	callback, _ := lf.start(t)
	if e := lf.finish(t, callback, nil).Get("oidc_error"); !strings.Contains(e, "not started in this browser") {
		t.Fatalf("callback without the state cookie: %q", e)
	}
	callback, _ = lf.start(t)
	if e := lf.finish(t, callback, &http.Cookie{Name: stateCookie, Value: "other"}).Get("oidc_error"); !strings.Contains(e, "not started in this browser") {
		t.Fatalf("callback with another state cookie: %q", e)
	}
}

func TestLoginPendingBound(t *testing.T) {
	lf := setupLogin(t, Options{}, LoginOptions{MaxPending: 2})
	first, c1 := lf.start(t)
	lf.clk.Add(time.Second)
	second, c2 := lf.start(t)
	lf.clk.Add(time.Second)
	third, c3 := lf.start(t)
	if n := lf.login.Pending(); n != 2 {
		t.Fatalf("pending %d, want the bound 2", n)
	}
	if e := lf.finish(t, first, c1).Get("oidc_error"); e == "" {
		t.Fatal("the oldest sign-in was kept past the bound")
	}
	for _, s := range []struct {
		u string
		c *http.Cookie
	}{{second, c2}, {third, c3}} {
		if v := lf.finish(t, s.u, s.c); v.Get("oidc_token") == "" {
			t.Fatalf("a sign-in within the bound failed: %v", v)
		}
	}
}

func TestLoginNoRole(t *testing.T) {
	lf := setupLogin(t, Options{Roles: map[auth.Role][]string{auth.Owner: {"admins"}}}, LoginOptions{})
	lf.is.SetUser(map[string]any{"sub": "bob", "email": "bob@example.com", "email_verified": true, "groups": []string{"devs"}})
	callback, cookie := lf.start(t)
	if e := lf.finish(t, callback, cookie).Get("oidc_error"); !strings.Contains(e, "no role") {
		t.Fatalf("sign-in of an account without a role: %q", e)
	}
	lf.is.SetUser(map[string]any{"sub": "carol", "email": "carol@example.com", "email_verified": true, "groups": []string{"admins"}})
	callback, cookie = lf.start(t)
	tok := lf.finish(t, callback, cookie).Get("oidc_token")
	if id, err := lf.v.Authenticate(ctx(t), tok); err != nil || id.Role != auth.Owner || id.Name != "carol@example.com" {
		t.Fatalf("admin: %+v, %v", id, err)
	}
}

func TestLoginIssuerDown(t *testing.T) {
	lf := setupLogin(t, Options{}, LoginOptions{})
	lf.is.SetDown(true)
	res, _ := lf.get(t, lf.daemon.URL+LoginPath, nil)
	if loc := res.Header.Get("Location"); res.StatusCode != http.StatusSeeOther || !strings.Contains(loc, "oidc_error=") || !strings.Contains(loc, "cannot+be+reached") {
		t.Fatalf("login with the issuer down: %s %q", res.Status, loc)
	}
	if lf.login.Pending() != 0 {
		t.Fatal("a state was kept for a sign-in that never started")
	}
}

func TestLoginRedirectFromHost(t *testing.T) {
	l := NewLogin(LoginOptions{BasePath: "/vm1"})
	r := httptest.NewRequest(http.MethodGet, "/web/oidc/login", nil)
	r.Host = "vm.example.com:4433"
	if u, ok := l.redirectURL(r); !ok || u != "https://vm.example.com:4433/vm1/web/oidc/callback" {
		t.Fatalf("redirectURL = %q, %v", u, ok)
	}
	r.Host = "evil.example.com/x?"
	if _, ok := l.redirectURL(r); ok {
		t.Fatal("a Host with a path accepted")
	}
}
