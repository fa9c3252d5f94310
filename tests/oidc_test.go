package tests

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/sidecar-dev/sidecar/auth"
	"github.com/sidecar-dev/sidecar/auth/oidc"
	"github.com/sidecar-dev/sidecar/auth/oidc/oidctest"
)

// TestOIDCSignIn: sidecar serve with auth.oidc pointing at a test issuer
// on loopback that is down when the daemon starts: the daemon starts
// anyway (logging why), and once the issuer is up the page's sign-in runs
// through the real binary: web/oidc/config, the redirect to the provider
// with a PKCE challenge, the provider's redirect back, and the callback
// sending the browser to the page with an ID token in the fragment that
// the issuer's verifier accepts as alice with the mapped role. The
// callback cannot be replayed. (The page using that token as its bearer
// in a browser: TestOIDCPageSignIn.)
func TestOIDCSignIn(t *testing.T) {
	is := oidctest.New("sidecar-web")
	defer is.Close()
	is.SetDown(true)
	is.SetUser(map[string]any{"sub": "alice-sub", "email": "alice@example.com", "email_verified": true, "groups": []string{"devs"}})
	s := startServer(t, `auth {
  oidc {
    issuer = "`+is.URL+`"
    client_id = "sidecar-web"
    roles = { user = ["devs"] }
  }
}
`)
	s.p.stderr.waitFor(t, "the discovery failure logged", 0, "issuer discovery failed")
	is.SetDown(false)

	c := s.httpClient(t)
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	get := func(u string, cookie *http.Cookie) *http.Response {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, u, nil)
		if err != nil {
			t.Fatal(err)
		}
		if cookie != nil {
			req.AddCookie(cookie)
		}
		res, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res
	}
	base := "https://" + s.host
	if res := get(base+oidc.ConfigPath, nil); res.StatusCode != http.StatusOK {
		t.Fatalf("web/oidc/config: %s", res.Status)
	}

	// The daemon asks the issuer again at most every 2 s (RetryInterval):
	// until then a sign-in is sent back to the page with an error.
	var res *http.Response
	deadline := time.Now().Add(waitTimeout)
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		res = get(base+oidc.LoginPath, nil)
		if res.StatusCode == http.StatusFound {
			break
		}
		if loc := res.Header.Get("Location"); res.StatusCode != http.StatusSeeOther || !strings.Contains(loc, "oidc_error=") {
			t.Fatalf("login while the issuer is coming back: %s %q", res.Status, loc)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the daemon never reached the issuer again within %v", waitTimeout)
		}
		<-tick.C
	}
	authz, err := url.Parse(res.Header.Get("Location"))
	if err != nil {
		t.Fatal(err)
	}
	q := authz.Query()
	if q.Get("code_challenge_method") != "S256" || q.Get("redirect_uri") != base+oidc.CallbackPath || q.Get("client_id") != "sidecar-web" {
		t.Fatalf("authorization URL %s", authz)
	}
	var state *http.Cookie
	for _, ck := range res.Cookies() {
		if ck.Value == q.Get("state") {
			state = &http.Cookie{Name: ck.Name, Value: ck.Value}
		}
	}
	if state == nil {
		t.Fatalf("no state cookie in %v", res.Header)
	}
	res = get(authz.String(), nil)
	callback := res.Header.Get("Location")
	if res.StatusCode != http.StatusFound || !strings.HasPrefix(callback, base+oidc.CallbackPath+"?") {
		t.Fatalf("provider: %s %q", res.Status, callback)
	}
	res = get(callback, state)
	loc := res.Header.Get("Location")
	if res.StatusCode != http.StatusSeeOther || !strings.HasPrefix(loc, "../../#oidc_token=") {
		t.Fatalf("callback: %s %q", res.Status, loc)
	}
	frag, err := url.ParseQuery(strings.TrimPrefix(loc, "../../#"))
	if err != nil {
		t.Fatal(err)
	}
	v, err := oidc.New(oidc.Options{Issuer: is.URL, ClientID: "sidecar-web", Roles: map[auth.Role][]string{auth.User: {"devs"}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	id, err := v.Authenticate(ctx, frag.Get("oidc_token"))
	if err != nil || id.Name != "alice@example.com" || id.Role != auth.User || id.Method != "oidc" {
		t.Fatalf("the token handed to the page: %+v, %v", id, err)
	}
	if res := get(callback, state); !strings.Contains(res.Header.Get("Location"), "oidc_error=") {
		t.Fatalf("replayed callback: %s %q", res.Status, res.Header.Get("Location"))
	}
	s.p.stderr.waitFor(t, "the sign-in logged", 0, "signed in")
	if strings.Contains(s.p.stderr.String(), frag.Get("oidc_token")) {
		t.Fatal("the ID token is in the daemon's log")
	}
}
