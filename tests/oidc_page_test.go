package tests

import (
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/sidecar-dev/sidecar/auth/oidc/oidctest"
)

// TestOIDCPageSignIn: in Chromium, the page of a daemon with auth.oidc
// shows "Sign in"; a click goes through the provider's authorization
// endpoint (the test issuer approves at once) and back to the page,
// which takes the ID token out of the address bar and connects with it:
// a new terminal opens and runs a command as the token's identity (the
// audit trail says alice@example.com, role user, signed in by ticket).
// When the token expires the daemon ends the session and the page shows
// "Sign in" again, saying the sign-in expired.
func TestOIDCPageSignIn(t *testing.T) {
	chromiumPath(t)
	const ttl = 15 * time.Second
	is := oidctest.New("sidecar-web")
	defer is.Close()
	is.SetUser(map[string]any{"sub": "alice-sub", "email": "alice@example.com", "email_verified": true, "groups": []string{"devs"}})
	is.SetTokenTTL(ttl)
	s := startServer(t, oidcConfig(is))

	b := newBrowser(t)
	b.must("open the page", chromedp.Navigate(pageURL(s, "")), chromedp.WaitVisible("#oidc-login", chromedp.ByID))
	signIn := time.Now()
	b.must("sign in", chromedp.Click("#oidc-login", chromedp.ByID))
	b.poll("connected", `document.getElementById("status").textContent.startsWith("connected (")`, waitTimeout)
	if is.Requests("/authorize") != 1 || is.Requests("/token") != 1 {
		t.Fatalf("the provider saw %d authorization and %d token requests, want 1 each", is.Requests("/authorize"), is.Requests("/token"))
	}
	var href string
	if err := b.eval(`location.href + " " + history.length`, &href); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(href, "oidc_token") || strings.Contains(href, "#") {
		t.Fatalf("the token stayed in the address bar: %s", href)
	}
	b.must("new terminal", chromedp.Click("#new", chromedp.ByID))
	b.poll("prompt", promptBack, waitTimeout)
	b.typeText("echo signed''in\r")
	b.poll("the command's output", screenHas(`^signedin$`), waitTimeout)
	s.p.stderr.waitFor(t, "the page's session as alice", 0, `"action":"auth.success","principal":"alice@example.com","role":"user","auth.method":"ticket"`)
	s.p.stderr.waitFor(t, "alice's terminal", 0, `"action":"terminal.create","principal":"alice@example.com","role":"user"`)
	if time.Since(signIn) > ttl-2*time.Second {
		t.Fatalf("signing in and opening a terminal took %v, too close to the token's life %v", time.Since(signIn), ttl)
	}

	// The token expires: the session ends, the page offers the sign-in again.
	b.poll("Sign in again", `!document.getElementById("login").hidden && !document.getElementById("oidc-login").hidden`, ttl+waitTimeout)
	s.p.stderr.waitFor(t, "the session ended at expiry", 0, `closing connection: credential expired`)
	var msg string
	if err := b.eval(`document.getElementById("login-error").textContent`, &msg); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(msg, "expired") || strings.Contains(msg, "Wrong token") {
		var statuses []string
		_ = b.eval(`sidecarPage.statuses()`, &statuses)
		t.Errorf("the page said %q when the sign-in expired (statuses %q)", msg, statuses)
	}
}
