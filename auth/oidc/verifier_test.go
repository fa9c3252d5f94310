package oidc

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.uber.org/goleak"

	"github.com/sidecar-dev/sidecar/auth"
	"github.com/sidecar-dev/sidecar/auth/oidc/oidctest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// clock is a settable clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// logBuf collects log lines, to check no token is ever logged.
type logBuf struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuf) String() string { l.mu.Lock(); defer l.mu.Unlock(); return l.b.String() }

type fixture struct {
	is  *oidctest.Issuer
	v   *Verifier
	clk *clock
	log *logBuf
}

// setup starts a test issuer and a Verifier for it; opts fills in
// Issuer, ClientID, the clock, logger and an HTTP client closed at the end.
func setup(t *testing.T, opts Options) *fixture {
	t.Helper()
	is := oidctest.New("sidecar-web")
	t.Cleanup(is.Close)
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	f := &fixture{is: is, clk: &clock{t: time.Now()}, log: &logBuf{}}
	if opts.Issuer == "" {
		opts.Issuer = is.URL
	}
	if opts.ClientID == "" && opts.Audiences == nil {
		opts.ClientID = is.ClientID
	}
	opts.Now = f.clk.Now
	opts.HTTPClient = &http.Client{Transport: tr, Timeout: 5 * time.Second}
	opts.Logger = hclog.New(&hclog.LoggerOptions{Output: f.log, Level: hclog.Trace})
	if opts.DefaultRole == "" && opts.Roles == nil && opts.RoleClaim == "" {
		opts.DefaultRole = auth.User
	}
	v, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	f.v = v
	return f
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return c
}

// claims returns the issuer's usual claims with exp an hour past the
// fixture's clock, changed by set (a nil value deletes).
func (f *fixture) claims(set map[string]any) map[string]any {
	c := f.is.Claims()
	c["iat"] = f.clk.Now().Unix()
	c["exp"] = f.clk.Now().Add(time.Hour).Unix()
	for k, v := range set {
		if v == nil {
			delete(c, k)
		} else {
			c[k] = v
		}
	}
	return c
}

func TestAuthenticate(t *testing.T) {
	f := setup(t, Options{Skew: 30 * time.Second})
	other, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	now := f.clk.Now()
	for _, tc := range []struct {
		name  string
		token string
		want  error // nil: accepted
	}{
		{"valid", f.is.Sign(f.claims(nil)), nil},
		{"valid within skew", f.is.Sign(f.claims(map[string]any{"exp": now.Add(-20 * time.Second).Unix()})), nil},
		{"expired past skew", f.is.Sign(f.claims(map[string]any{"exp": now.Add(-31 * time.Second).Unix()})), auth.ErrExpired},
		{"wrong audience", f.is.Sign(f.claims(map[string]any{"aud": "someone-else"})), auth.ErrUnknown},
		{"wrong issuer", f.is.Sign(f.claims(map[string]any{"iss": "https://evil.example.com"})), auth.ErrUnknown},
		{"bad signature", oidctest.SignWith(other, "key-1", f.claims(nil)), auth.ErrUnknown},
		{"unknown kid", oidctest.SignWith(other, "key-x", f.claims(nil)), auth.ErrUnknown},
		{"expired and forged", oidctest.SignWith(other, "key-1", f.claims(map[string]any{"exp": now.Add(-time.Hour).Unix()})), auth.ErrUnknown},
		{"no exp", f.is.Sign(f.claims(map[string]any{"exp": nil})), auth.ErrUnknown},
		{"no email", f.is.Sign(f.claims(map[string]any{"email": nil})), auth.ErrUnknown},
		{"email not verified", f.is.Sign(f.claims(map[string]any{"email_verified": false})), auth.ErrUnknown},
		{"not a JWT", "static-token-value", auth.ErrUnknown},
		{"huge", strings.Repeat("a.", MaxTokenBytes), auth.ErrUnknown},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id, err := f.v.Authenticate(ctx(t), tc.token)
			if tc.want == nil {
				// Expiry is exp plus the skew: when the door would
				// refuse the token, so a session opened within the
				// skew is not ended at once.
				want := auth.Identity{Name: "alice@example.com", Role: auth.User, Method: "oidc", Expiry: time.Unix(f.claims(nil)["exp"].(int64), 0).Add(30 * time.Second)}
				if tc.name == "valid within skew" {
					want.Expiry = now.Add(-20 * time.Second).Truncate(time.Second).Add(30 * time.Second)
				}
				if err != nil || id.Name != want.Name || id.Role != want.Role || id.Method != want.Method || !id.Expiry.Equal(want.Expiry) {
					t.Fatalf("Authenticate = %+v, %v; want %+v", id, err, want)
				}
				return
			}
			if err != tc.want {
				t.Fatalf("Authenticate = %+v, %v; want %v", id, err, tc.want)
			}
		})
	}
	logs := f.log.String()
	if !strings.Contains(logs, "wrong audience") || !strings.Contains(logs, "different provider") {
		t.Errorf("refusal details not logged:\n%s", logs)
	}
	// No token, nor its signature part, in the log.
	tok := f.is.Sign(f.claims(map[string]any{"aud": "x"}))
	_, _ = f.v.Authenticate(ctx(t), tok)
	for _, part := range strings.Split(tok, ".") {
		if strings.Contains(f.log.String(), part) {
			t.Fatalf("a token part is in the log:\n%s", f.log.String())
		}
	}
}

func TestAudiences(t *testing.T) {
	f := setup(t, Options{Audiences: []string{"api://sidecar", "other"}})
	if _, err := f.v.Authenticate(ctx(t), f.is.Sign(f.claims(map[string]any{"aud": []string{"x", "other"}}))); err != nil {
		t.Fatalf("configured audience refused: %v", err)
	}
	if _, err := f.v.Authenticate(ctx(t), f.is.Sign(f.claims(nil))); err != auth.ErrUnknown {
		t.Fatalf("client_id audience with only audiences configured: %v, want refusal", err)
	}
	g := setup(t, Options{ClientID: "sidecar-web", Audiences: []string{"api://sidecar"}})
	for _, aud := range []string{"sidecar-web", "api://sidecar"} {
		if _, err := g.v.Authenticate(ctx(t), g.is.Sign(g.claims(map[string]any{"aud": aud}))); err != nil {
			t.Errorf("aud %q refused: %v", aud, err)
		}
	}
}

func TestPrincipalSub(t *testing.T) {
	f := setup(t, Options{PrincipalClaim: "sub"})
	id, err := f.v.Authenticate(ctx(t), f.is.Sign(f.claims(map[string]any{"email": nil})))
	if err != nil || id.Name != "alice-sub" {
		t.Fatalf("Authenticate = %+v, %v; want alice-sub", id, err)
	}
}

func TestRotatedKey(t *testing.T) {
	f := setup(t, Options{})
	old := f.is.Sign(f.claims(nil))
	if _, err := f.v.Authenticate(ctx(t), old); err != nil {
		t.Fatal(err)
	}
	keysBefore := f.is.Requests("/keys")
	kid := f.is.Rotate()
	if kid != "key-2" {
		t.Fatalf("kid %q", kid)
	}
	id, err := f.v.Authenticate(ctx(t), f.is.Sign(f.claims(nil)))
	if err != nil || id.Name != "alice@example.com" {
		t.Fatalf("token under the rotated key: %+v, %v", id, err)
	}
	if got := f.is.Requests("/keys"); got != keysBefore+1 {
		t.Fatalf("key set fetched %d times after rotation, want 1", got-keysBefore)
	}
	// (The retired key's tokens stay accepted until go-oidc's cache is
	// replaced, which its key fetch does just after answering: no
	// assertion on them here.)
}

func TestIssuerDownAtStart(t *testing.T) {
	f := setup(t, Options{RetryInterval: time.Minute})
	f.is.SetDown(true)
	tok := f.is.Sign(f.claims(nil))
	_, err := f.v.Authenticate(ctx(t), tok)
	if err == nil || auth.IsRefusal(err) || !errors.Is(err, ErrIssuerUnavailable) {
		t.Fatalf("issuer down: %v; want a failure to decide", err)
	}
	// Within the retry interval the issuer is not asked again.
	n := f.is.Requests("/.well-known/openid-configuration")
	f.is.SetDown(false)
	if _, err := f.v.Authenticate(ctx(t), tok); !errors.Is(err, ErrIssuerUnavailable) {
		t.Fatalf("retry within interval: %v", err)
	}
	if got := f.is.Requests("/.well-known/openid-configuration"); got != n {
		t.Fatalf("discovery asked %d more times within the retry interval", got-n)
	}
	f.clk.Add(time.Minute)
	id, err := f.v.Authenticate(ctx(t), tok)
	if err != nil || id.Name != "alice@example.com" {
		t.Fatalf("issuer back: %+v, %v", id, err)
	}
}

func TestKeysUnavailable(t *testing.T) {
	f := setup(t, Options{})
	if err := f.v.Discover(ctx(t)); err != nil {
		t.Fatal(err)
	}
	f.is.SetDown(true)
	_, err := f.v.Authenticate(ctx(t), f.is.Sign(f.claims(nil)))
	if err == nil || auth.IsRefusal(err) || !errors.Is(err, ErrIssuerUnavailable) {
		t.Fatalf("key set unreachable: %v; want a failure to decide", err)
	}
	f.is.SetDown(false)
	// go-oidc hands a key fetch's result to every request that asks until
	// the fetch's goroutine has forgotten it (RemoteKeySet.inflight, which
	// notifies no one): a request just after the failure may still get
	// it. The issuer back, a later request decides; polled, at most 10 s.
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(10 * time.Second)
	for {
		_, err := f.v.Authenticate(ctx(t), f.is.Sign(f.claims(nil)))
		if err == nil {
			break
		}
		if !errors.Is(err, ErrIssuerUnavailable) {
			t.Fatal(err)
		}
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("the issuer back: %v after 10 s", err)
		}
	}
}

func TestIssuerMismatch(t *testing.T) {
	f := setup(t, Options{})
	f.is.Advertise("https://elsewhere.example.com")
	err := f.v.Discover(ctx(t))
	if err == nil || !strings.Contains(err.Error(), "did not match") {
		t.Fatalf("Discover = %v", err)
	}
	if _, err := f.v.Authenticate(ctx(t), f.is.Sign(f.claims(nil))); err == nil || auth.IsRefusal(err) {
		t.Fatalf("Authenticate with a mismatched issuer = %v", err)
	}
}

func TestRoles(t *testing.T) {
	roles := map[auth.Role][]string{auth.Owner: {"admins"}, auth.User: {"devs"}, auth.Viewer: {"everyone"}}
	for _, tc := range []struct {
		name   string
		opts   Options
		claims map[string]any
		want   auth.Role // "": refused
	}{
		{"group owner", Options{Roles: roles}, map[string]any{"groups": []string{"devs", "admins"}}, auth.Owner},
		{"group user", Options{Roles: roles}, map[string]any{"groups": []string{"x", "devs"}}, auth.User},
		{"single group string", Options{Roles: roles}, map[string]any{"groups": "everyone"}, auth.Viewer},
		{"no group matches, refused", Options{Roles: roles}, map[string]any{"groups": []string{"x"}}, ""},
		{"no groups claim, refused", Options{Roles: roles}, nil, ""},
		{"no group matches, default", Options{Roles: roles, DefaultRole: auth.Viewer}, map[string]any{"groups": []string{"x"}}, auth.Viewer},
		{"other groups claim", Options{Roles: roles, GroupsClaim: "cognito:groups"}, map[string]any{"cognito:groups": []string{"admins"}, "groups": []string{"devs"}}, auth.Owner},
		{"role claim", Options{RoleClaim: "sidecar_role"}, map[string]any{"sidecar_role": "viewer"}, auth.Viewer},
		{"role claim list", Options{RoleClaim: "roles"}, map[string]any{"roles": []string{"viewer", "owner", "x"}}, auth.Owner},
		{"role claim unknown falls to groups", Options{RoleClaim: "r", Roles: roles}, map[string]any{"r": "admin", "groups": []string{"devs"}}, auth.User},
		{"role claim absent, no default", Options{RoleClaim: "r"}, nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := setup(t, tc.opts)
			id, err := f.v.Authenticate(ctx(t), f.is.Sign(f.claims(tc.claims)))
			if tc.want == "" {
				if err != auth.ErrUnknown {
					t.Fatalf("Authenticate = %+v, %v; want refusal", id, err)
				}
				if !strings.Contains(f.log.String(), "no role") {
					t.Errorf("refusal not logged: %s", f.log.String())
				}
				return
			}
			if err != nil || id.Role != tc.want {
				t.Fatalf("Authenticate = %+v, %v; want role %s", id, err, tc.want)
			}
		})
	}
}

func TestNewRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts Options
		want string
	}{
		{"no issuer", Options{ClientID: "x"}, "no issuer"},
		{"no audience", Options{Issuer: "https://i"}, "client_id"},
		{"skew", Options{Issuer: "https://i", ClientID: "x", Skew: time.Hour}, "skew"},
		{"role", Options{Issuer: "https://i", ClientID: "x", Roles: map[auth.Role][]string{"admin": {"a"}}}, "unknown role"},
		{"default role", Options{Issuer: "https://i", ClientID: "x", DefaultRole: "root"}, "default_role"},
	} {
		if _, err := New(tc.opts); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: New = %v, want an error with %q", tc.name, err, tc.want)
		}
	}
}
