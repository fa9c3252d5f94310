package tests

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/sidecar-dev/sidecar/auth/oidc/oidctest"
	"github.com/sidecar-dev/sidecar/tests/fault"
	"github.com/sidecar-dev/sidecar/transport"
	"github.com/sidecar-dev/sidecar/transportio"
)

// oidcConfig is the auth.oidc block of a daemon that takes is's ID
// tokens as bearers: group "devs" gives the role user, "watchers"
// viewer, no other group any; no clock skew, so that a token expires at
// its exp to the second.
func oidcConfig(is *oidctest.Issuer) string {
	return oidcConfigSkew(is, "0s")
}

// oidcConfigSkew is oidcConfig with auth.oidc.skew skew.
func oidcConfigSkew(is *oidctest.Issuer, skew string) string {
	return `auth {
  oidc {
    issuer    = "` + is.URL + `"
    client_id = "` + is.ClientID + `"
    roles     = { user = ["devs"], viewer = ["watchers"] }
    skew      = "` + skew + `"
  }
}
`
}

// oidcClaims are the claims of an ID token of is for email, in group,
// with exp at exp.
func oidcClaims(is *oidctest.Issuer, email, group string, exp time.Time) map[string]any {
	c := is.Claims()
	c["sub"], c["email"], c["groups"], c["exp"] = email+"-sub", email, []string{group}, exp.Unix()
	return c
}

// oidcToken is an ID token of is for email in group, valid for ttl.
func oidcToken(is *oidctest.Issuer, email, group string, ttl time.Duration) string {
	return is.Sign(oidcClaims(is, email, group, time.Now().Add(ttl)))
}

// tioCall sends request id on mc and returns its response, skipping
// notifications.
func tioCall(t *testing.T, mc transport.MessageConn, id int, method string, params any) message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	req, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
	if err := mc.WriteMessage(ctx, req); err != nil {
		t.Fatalf("%s: %v", method, err)
	}
	for {
		raw, err := mc.ReadMessage(ctx)
		if err != nil {
			t.Fatalf("%s: %v", method, err)
		}
		if m := decode(t, raw); string(m.ID) == strings.TrimSpace(string(mustJSON(id))) {
			return m
		}
	}
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// dialWT opens a transport-io session over WebTransport with credential tok.
func (s *server) dialWT(t *testing.T, tok string) (transport.MessageConn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	return transport.DialWebTransport(ctx, "https://"+s.host+transport.TIOPath, http.Header{"Authorization": {"Bearer " + tok}}, s.tlsConfig())
}

// runEnv runs the sidecar with the test's environment plus env, to
// completion (bounded).
func runEnv(t *testing.T, env []string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(sidecarBin, args...)
	cmd.Env = append(cleanEnv(), env...)
	p := startCmd(t, cmd, nil)
	code = p.wait(t, waitTimeout)
	return p.stdout.String(), p.stderr.String(), code
}

// refusedAtDoor checks that tok is refused at every door with reason:
// /ahp 401, transport-io over WebSocket and WebTransport WT_UNAUTHORIZED
// with that reason.
func refusedAtDoor(t *testing.T, s *server, what, tok, reason string) {
	t.Helper()
	if code := s.ahpStatus(t, tok); code != http.StatusUnauthorized {
		t.Errorf("%s over /ahp: HTTP %d, want 401", what, code)
	}
	if _, err := s.dialTIO(t, tok); !transport.IsUnauthorized(err) || transport.CloseReason(err) != reason {
		t.Errorf("%s over transport-io (WebSocket): %v, want WT_UNAUTHORIZED %q", what, err, reason)
	}
	if _, err := s.dialWT(t, tok); !transport.IsUnauthorized(err) || transport.CloseReason(err) != reason {
		t.Errorf("%s over WebTransport: %v, want WT_UNAUTHORIZED %q", what, err, reason)
	}
}

// undecidedAtDoor checks that tok gets no decision at every door (the
// issuer cannot be reached): /ahp 503, transport-io WT_NO_ERROR
// "authorize failed" on both mappings; never a refusal.
func undecidedAtDoor(t *testing.T, s *server, what, tok string) {
	t.Helper()
	if code := s.ahpStatus(t, tok); code != http.StatusServiceUnavailable {
		t.Errorf("%s over /ahp: HTTP %d, want 503", what, code)
	}
	for _, d := range []struct {
		name string
		dial func(*testing.T, string) (transport.MessageConn, error)
	}{{"transport-io (WebSocket)", s.dialTIO}, {"WebTransport", s.dialWT}} {
		_, err := d.dial(t, tok)
		var se *transportio.SessionError
		if !errors.As(err, &se) || se.Code != transportio.CloseNoError || se.Reason != "authorize failed" || transport.IsUnauthorized(err) {
			t.Errorf("%s over %s: %v, want WT_NO_ERROR \"authorize failed\"", what, d.name, err)
		}
	}
}

// TestOIDCBearer: sidecar serve with auth.oidc pointing at a test issuer
// on loopback. An ID token is a bearer on every door: raw /ahp, the
// transport-io WebSocket mapping and WebTransport, and the CLI's ls and
// run (--token and SIDECAR_TOKEN), as the identity its email names with
// the role its group maps to: a user creates terminals, a viewer is
// refused with -32009 naming terminal.create. Refused at the door as
// unauthorized (401 / WT_UNAUTHORIZED): a wrong audience, a wrong issuer,
// a key the issuer never published (under a known kid and under an
// unknown one), a token no group gives a role; as expired: an expired
// one. After the issuer rotates its key, the new key's tokens are
// accepted (the keys fetched again) and the old key's, no longer
// published, refused. An issuer that cannot be reached is no refusal:
// /ahp 503, transport-io WT_NO_ERROR "authorize failed", and the CLI
// does not call the token refused; once it is back the same token
// passes. The audit lines say who came in (method oidc) and why others
// did not, and no token is anywhere in the daemon's log.
func TestOIDCBearer(t *testing.T) {
	t.Parallel()
	is := oidctest.New("sidecar-web")
	defer is.Close()
	s := startServer(t, oidcConfig(is))
	alice := oidcToken(is, "alice@example.com", "devs", time.Hour)
	bob := oidcToken(is, "bob@example.com", "watchers", time.Hour)
	tokens := []string{alice, bob}
	create := map[string]any{"channel": "ahp-terminal:/oidc-alice", "command": []string{"sleep", "300"}}

	// Raw /ahp: alice (user) creates a terminal; bob (viewer) may not.
	a := s.dialAs(t, alice)
	a.initialize("alice-ahp")
	if m := a.call("createTerminal", create); m.Error != nil {
		t.Fatalf("createTerminal as alice (user) over /ahp: %s", m.raw)
	}
	b := s.dialAs(t, bob)
	b.initialize("bob-ahp")
	if m := b.call("createTerminal", map[string]any{"channel": "ahp-terminal:/oidc-bob", "command": []string{"sleep", "300"}}); m.Error == nil || m.Error.Code != -32009 || !strings.Contains(m.Error.Message, "terminal.create") {
		t.Fatalf("createTerminal as bob (viewer) over /ahp: %s, want -32009 naming terminal.create", m.raw)
	}
	b.mustCall("subscribe", map[string]any{"channel": "ahp-root://"}) // a viewer lists

	// transport-io: alice over the WebSocket mapping, bob over WebTransport.
	mc, err := s.dialTIO(t, alice)
	if err != nil {
		t.Fatalf("transport-io (WebSocket) as alice: %v", err)
	}
	defer mc.Close(transport.CloseNormal, "")
	tioInitialize(t, mc, "alice-tio")
	if m := tioCall(t, mc, 2, "createTerminal", map[string]any{"channel": "ahp-terminal:/oidc-alice-2", "command": []string{"sleep", "300"}}); m.Error != nil {
		t.Fatalf("createTerminal as alice over transport-io: %s", m.raw)
	}
	wt, err := s.dialWT(t, bob)
	if err != nil {
		t.Fatalf("WebTransport as bob: %v", err)
	}
	defer wt.Close(transport.CloseNormal, "")
	tioInitialize(t, wt, "bob-wt")
	if m := tioCall(t, wt, 2, "createTerminal", map[string]any{"channel": "ahp-terminal:/oidc-bob-2", "command": []string{"sleep", "300"}}); m.Error == nil || m.Error.Code != -32009 || !strings.Contains(m.Error.Message, "terminal.create") {
		t.Fatalf("createTerminal as bob over WebTransport: %s, want -32009", m.raw)
	}

	// The CLI: ls over /ahp (--token) and over WebTransport
	// (SIDECAR_TOKEN); run over the WebSocket mapping as alice, refused
	// as bob.
	if out, stderr, code := s.run(t, "ls", s.url, "--token", alice, "--cert-hash", s.hash); code != 0 || !strings.Contains(out, "oidc-alice") {
		t.Fatalf("ls over /ahp as alice: exit %d\n%s%s", code, out, stderr)
	}
	if out, stderr, code := runEnv(t, []string{"SIDECAR_TOKEN=" + bob}, "ls", "https://"+s.host, "--transport", "webtransport", "--cert-hash", s.hash); code != 0 {
		t.Fatalf("ls over WebTransport as bob: exit %d\n%s%s", code, out, stderr)
	}
	if out, stderr, code := s.run(t, "run", "https://"+s.host, "--transport", "websocket", "--token", alice, "--cert-hash", s.hash, "--", "printf", "oidc-%s\\n", "ok"); code != 0 || !strings.Contains(out, "oidc-ok") {
		t.Fatalf("run as alice: exit %d\n%s%s", code, out, stderr)
	}
	if out, stderr, code := s.run(t, "run", "https://"+s.host, "--transport", "websocket", "--token", bob, "--cert-hash", s.hash, "--", "true"); code == 0 || !strings.Contains(stderr, "terminal.create") {
		t.Fatalf("run as bob (viewer): exit %d, want a refusal naming terminal.create\n%s%s", code, out, stderr)
	}

	// Refused at the door.
	c := oidcClaims(is, "alice@example.com", "devs", time.Now().Add(time.Hour))
	c["aud"] = "another-client"
	wrongAud := is.Sign(c)
	c = oidcClaims(is, "alice@example.com", "devs", time.Now().Add(time.Hour))
	c["iss"] = "http://127.0.0.1:1/not-the-issuer"
	wrongIss := is.Sign(c)
	stranger, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	sameKid := oidctest.SignWith(stranger, "key-1", oidcClaims(is, "alice@example.com", "devs", time.Now().Add(time.Hour)))
	otherKid := oidctest.SignWith(stranger, "stranger", oidcClaims(is, "alice@example.com", "devs", time.Now().Add(time.Hour)))
	noRole := oidcToken(is, "carol@example.com", "nobody", time.Hour)
	expired := oidcToken(is, "alice@example.com", "devs", -time.Minute)
	tokens = append(tokens, wrongAud, wrongIss, sameKid, otherKid, noRole, expired)
	refusedAtDoor(t, s, "a wrong audience", wrongAud, "unauthorized")
	refusedAtDoor(t, s, "a wrong issuer", wrongIss, "unauthorized")
	refusedAtDoor(t, s, "an unknown key under the issuer's kid", sameKid, "unauthorized")
	refusedAtDoor(t, s, "an unknown key", otherKid, "unauthorized")
	refusedAtDoor(t, s, "a token no group gives a role", noRole, "unauthorized")
	refusedAtDoor(t, s, "an expired token", expired, "expired")
	if out, stderr, code := s.run(t, "ls", "https://"+s.host, "--token", expired, "--cert-hash", s.hash); code == 0 || !strings.Contains(stderr, "refused the token") || !strings.Contains(stderr, "expired") {
		t.Fatalf("ls with an expired token: exit %d\n%s%s", code, out, stderr)
	}
	// Over /ahp the 401's body says why: the CLI says it expired.
	if out, stderr, code := s.run(t, "ls", s.url, "--token", expired, "--cert-hash", s.hash); code == 0 || !strings.Contains(stderr, "refused the credential (HTTP 401): it expired; sign in again") {
		t.Fatalf("ls over /ahp with an expired token: exit %d\n%s%s", code, out, stderr)
	}

	// Key rotation: the new key's tokens pass; the old key, no longer
	// published, no more. The open sessions go on.
	is.Rotate()
	rotated := oidcToken(is, "alice@example.com", "devs", time.Hour)
	tokens = append(tokens, rotated)
	s.dialAs(t, rotated).initialize("alice-rotated")
	if m := tioCall(t, mc, 3, "subscribe", map[string]any{"channel": "ahp-root://"}); m.Error != nil {
		t.Fatalf("alice's session after the rotation: %s", m.raw)
	}
	refusedAtDoor(t, s, "the old key's token after the rotation", alice, "unauthorized")

	// The issuer down: a token under a key not fetched yet gets no
	// decision, and the CLI does not call it refused.
	is.Rotate()
	is.SetDown(true)
	pending := oidcToken(is, "alice@example.com", "devs", time.Hour)
	tokens = append(tokens, pending)
	undecidedAtDoor(t, s, "a token while the issuer is down", pending)
	// The CLI tries again within --connect-timeout, says once why it
	// waits, and in the end fails on the 503: not a refusal.
	notice := "sidecar: the host could not decide on the credential (its identity provider may be unreachable); trying again for up to "
	noticedOnce := func(stderr string) bool {
		i := strings.Index(stderr, notice)
		return i >= 0 && strings.Count(stderr, notice) == 1 && strings.Contains(stderr[i:], " (--connect-timeout)\n")
	}
	if out, stderr, code := s.run(t, "ls", s.url, "--token", pending, "--cert-hash", s.hash, "--connect-timeout", "2s"); code != 255 || strings.Contains(stderr, "refused the token") ||
		!strings.Contains(stderr, "could not decide on the credential (HTTP 503)") || !strings.Contains(stderr, "no decision after trying for") || !noticedOnce(stderr) {
		t.Fatalf("ls while the issuer is down: exit %d, want 255 on the 503 (not a refusal), after one notice of the wait\n%s%s", code, out, stderr)
	}
	// So over WebTransport, where no decision is a session closed as
	// WT_NO_ERROR "authorize failed".
	if out, stderr, code := s.run(t, "ls", "https://"+s.host, "--transport", "webtransport", "--token", pending, "--cert-hash", s.hash, "--connect-timeout", "2s"); code != 255 ||
		strings.Contains(stderr, "refused") || !strings.Contains(stderr, "could not decide on the credential (WT_NO_ERROR: authorize failed)") || !noticedOnce(stderr) {
		t.Fatalf("ls over WebTransport while the issuer is down: exit %d, want 255 (not a refusal), after one notice of the wait\n%s%s", code, out, stderr)
	}
	// An ls that starts while the issuer is down lists once it is back:
	// its first try was undecided (the daemon's audit line, the CLI's
	// notice), the issuer comes back, a later try passes.
	from := len(s.p.stderr.String())
	ls := start(t, "ls", s.url, "--token", pending, "--cert-hash", s.hash, "--connect-timeout", "60s")
	s.p.stderr.waitFor(t, "an undecided try of the waiting ls", from, `"reason":"authorize failed"`)
	ls.stderr.waitFor(t, "the ls's notice of its wait", 0, notice)
	is.SetDown(false)
	if code := ls.wait(t, waitTimeout); code != 0 || !strings.Contains(ls.stdout.String(), "oidc-alice") {
		t.Fatalf("ls started while the issuer was down, after it came back: exit %d, want the terminals\n%s%s", code, ls.stdout.String(), ls.stderr.String())
	}
	// The daemon's key set hands a failed fetch's result to the requests
	// that came during it until its goroutine lets go of it: the first
	// request that decides (101) may come a moment after the issuer is
	// back. Then the same token opens a session.
	for start := time.Now(); s.ahpStatus(t, pending) != http.StatusSwitchingProtocols; {
		if time.Since(start) > waitTimeout {
			t.Fatalf("the token still undecided %v after the issuer came back", waitTimeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
	s.dialAs(t, pending).initialize("alice-back")

	// The audit trail: who came in, and why others did not.
	s.p.stderr.waitFor(t, "the last success", 0, `"auth.method":"oidc"`)
	lines := auditLines(t, s.p.stderr.Bytes())
	who := map[string]string{}
	reasons := map[string]int{}
	for _, l := range lines {
		switch l.Action {
		case "auth.success":
			if l.raw["auth.method"] != "oidc" {
				t.Errorf("auth.success of %q: method %v, want oidc", l.Principal, l.raw["auth.method"])
			}
			who[l.Principal] = l.Role
		case "auth.failure":
			r, _ := l.raw["reason"].(string)
			reasons[r]++
			if l.Principal != "" {
				t.Errorf("auth.failure names a principal: %v", l.raw)
			}
		}
	}
	if who["alice@example.com"] != "user" || who["bob@example.com"] != "viewer" || len(who) != 2 {
		t.Errorf("audit successes: %v, want alice@example.com user and bob@example.com viewer", who)
	}
	// Per door: /ahp, transport-io, WebTransport; the CLI's ls of the
	// expired token (auto: both transport-io mappings may try).
	if reasons["unauthorized"] < 6*3 || reasons["expired"] < 3+1 || reasons["authorize failed"] < 3+1 {
		t.Errorf("audit failures by reason: %v", reasons)
	}
	log := s.p.stderr.String()
	for _, tok := range tokens {
		sig := tok[strings.LastIndexByte(tok, '.')+1:]
		if strings.Contains(log, tok) || strings.Contains(log, sig) {
			t.Fatalf("a token (or its signature) is in the daemon's log: %s…", tok[:20])
		}
	}
}

// TestOIDCIssuerDownReconnect: a `sidecar forward` connected with an ID
// token loses its connection while the issuer cannot be reached and the
// daemon has not seen its key (the keys were fetched again since, after
// a rotation): its reconnect attempts get no decision (/ahp 503, logged
// "authorize failed"), and the CLI keeps trying rather than give up as
// refused; once the issuer is back (publishing the old key beside the
// new one, as during a rotation) it resumes.
func TestOIDCIssuerDownReconnect(t *testing.T) {
	t.Parallel()
	is := oidctest.New("sidecar-web")
	defer is.Close()
	relay, err := fault.NewTCP("127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	defer relay.Close()
	s := startServer(t, oidcConfig(is))
	relay.SetTarget(s.host)
	alice := oidcToken(is, "alice@example.com", "devs", time.Hour)
	fwd := start(t, "forward", "wss://"+relay.Addr()+"/ahp", "--token", alice, "--cert-hash", s.hash, "-L", "127.0.0.1:0:127.0.0.1:9")
	fwd.stderr.waitFor(t, "alice's forward", 0, "sidecar: forwarding ")

	// The key set fetched again for another key: alice's is no longer
	// among the daemon's keys.
	is.Rotate()
	s.dialAs(t, oidcToken(is, "bob@example.com", "devs", time.Hour)).initialize("bob")
	is.SetDown(true)
	is.PublishAll()
	from := len(s.p.stderr.String())
	relay.Cut()
	// Two attempts refused for want of a decision, and the forward on.
	at := s.p.stderr.waitFor(t, "a reconnect attempt without a decision", from, `"reason":"authorize failed"`)
	s.p.stderr.waitFor(t, "a second reconnect attempt", at, `"reason":"authorize failed"`)
	if strings.Contains(fwd.stderr.String(), "refused") {
		t.Fatalf("the forward called the token refused:\n%s", fwd.stderr.String())
	}
	select {
	case <-fwd.done:
		t.Fatalf("the forward gave up while the issuer was down:\n%s", fwd.stderr.String())
	default:
	}
	is.SetDown(false)
	fwd.stderr.waitFor(t, "the forward resumed", 0, "sidecar: resumed")
	if strings.Contains(s.p.stderr.String(), alice[strings.LastIndexByte(alice, '.')+1:]) {
		t.Fatal("alice's token is in the daemon's log")
	}
}

// TestOIDCSessionExpires: sessions opened with a short-lived ID token
// (exp a few seconds on, no skew) end at its exp, within a second:
// /ahp closed 4007 "expired", transport-io (WebSocket) and a session of a
// web ticket issued for that token WT_UNAUTHORIZED "expired", and a
// `sidecar forward` over /ahp and one over transport-io exit non-zero
// saying the credential expired, without reconnecting. The token is
// refused as expired from then on, and a new token of the same person
// cannot resume the ended session's state.
func TestOIDCSessionExpires(t *testing.T) {
	t.Parallel()
	is := oidctest.New("sidecar-web")
	defer is.Close()
	s := startServer(t, oidcConfig(is))
	hc := s.httpClient(t)

	exp := time.Now().Add(6 * time.Second).Truncate(time.Second)
	tok := is.Sign(oidcClaims(is, "alice@example.com", "devs", exp))

	a := s.dialAs(t, tok)
	var offer resumeOffer
	if err := json.Unmarshal(a.initialize("alice-exp").Result, &offer); err != nil || offer.Resume.Token == "" {
		t.Fatalf("initialize offered no resume: %+v, %v", offer, err)
	}
	mc, err := s.dialTIO(t, tok)
	if err != nil {
		t.Fatal(err)
	}
	defer mc.Close(transport.CloseNormal, "")
	tioInitialize(t, mc, "alice-exp-tio")
	// The page's way in: a ticket for the token, redeemed by a session.
	req, _ := http.NewRequest(http.MethodPost, "https://"+s.host+"/web/ticket", nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Origin", "https://"+s.host)
	res, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var tk struct{ Ticket string }
	_ = json.NewDecoder(res.Body).Decode(&tk)
	res.Body.Close()
	if res.StatusCode != http.StatusOK || tk.Ticket == "" {
		t.Fatalf("web/ticket: %s", res.Status)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	page, err := transport.DialTIOWebSocket(ctx, "wss://"+s.host+transport.TIOPath+"?ticket="+tk.Ticket, nil, hc, false)
	if err != nil {
		t.Fatalf("transport-io with the ticket: %v", err)
	}
	defer page.Close(transport.CloseNormal, "")
	tioInitialize(t, page, "alice-exp-page")
	fwd := start(t, "forward", s.url, "--token", tok, "--cert-hash", s.hash, "-L", "127.0.0.1:0:127.0.0.1:9")
	fwdTIO := start(t, "forward", "https://"+s.host, "--token", tok, "--cert-hash", s.hash, "-L", "127.0.0.1:0:127.0.0.1:9")
	fwd.stderr.waitFor(t, "the forward over /ahp", 0, "sidecar: forwarding ")
	fwdTIO.stderr.waitFor(t, "the forward over transport-io", 0, "sidecar: forwarding ")
	if time.Now().After(exp.Add(-500 * time.Millisecond)) {
		t.Fatalf("the sessions took too long to open: the token expires at %v", exp)
	}

	// Each session ends within a second of exp, not before.
	within := func(what string, at time.Time) {
		t.Helper()
		if at.Before(exp) || at.After(exp.Add(time.Second)) {
			t.Errorf("%s ended at %v, %v from exp, want within 1 s after it", what, at.Format(time.StampMilli), at.Sub(exp))
		}
	}
	_, err = a.waitClosed(time.Until(exp) + 5*time.Second)
	within("the /ahp connection", time.Now())
	if websocket.CloseStatus(err) != 4007 || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("the /ahp connection: %v, want close 4007 expired", err)
	}
	for _, c := range []struct {
		what string
		mc   transport.MessageConn
	}{{"the transport-io session", mc}, {"the ticket's session", page}} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Until(exp)+5*time.Second)
		for {
			_, err := c.mc.ReadMessage(ctx)
			if err == nil {
				continue
			}
			within(c.what, time.Now())
			if !transport.IsUnauthorized(err) || transport.CloseReason(err) != "expired" {
				t.Errorf("%s: %v, want WT_UNAUTHORIZED expired", c.what, err)
			}
			break
		}
		cancel()
	}
	for _, p := range []*proc{fwd, fwdTIO} {
		if code := p.wait(t, time.Until(exp)+5*time.Second); code == 0 {
			t.Errorf("the forward %v exited 0 at the token's expiry", p.cmd.Args[1:3])
		}
		within("the forward "+p.cmd.Args[2], time.Now())
		if msg := p.stderr.String(); !strings.Contains(msg, "the credential expired; sign in again") || strings.Contains(msg, "reconnecting") {
			t.Errorf("the forward %v said:\n%s", p.cmd.Args[2], msg)
		}
	}

	// From now on the token is refused as expired; a new one of alice's
	// does not bring the ended session back.
	refusedAtDoor(t, s, "the token after its expiry", tok, "expired")
	fresh := oidcToken(is, "alice@example.com", "devs", time.Hour)
	a2 := s.dialAs(t, fresh)
	if m := a2.call("reconnect", reconnectParams("alice-exp", offer.Resume.Token, "", 0)); m.Error == nil || m.Error.Code != -32008 || errorKind(m) != "expired" {
		t.Fatalf("resuming the expired session's state: %s", m.raw)
	}
	s.p.stderr.waitFor(t, "the expiry's log line", 0, `closing connection: credential expired`)
	for _, secret := range []string{tok, fresh, tk.Ticket} {
		if strings.Contains(s.p.stderr.String(), secret) {
			t.Fatalf("a token or ticket is in the daemon's log: %s…", secret[:10])
		}
	}
}

// TestOIDCSkew: a token past its exp but within auth.oidc.skew is
// accepted, and its session lasts until exp plus the skew (when the
// door starts refusing it), rather than being closed as expired the
// moment it opens.
func TestOIDCSkew(t *testing.T) {
	t.Parallel()
	is := oidctest.New("sidecar-web")
	defer is.Close()
	s := startServer(t, oidcConfigSkew(is, "4s"))
	exp := time.Now().Add(-time.Second).Truncate(time.Second)
	end := exp.Add(4 * time.Second)
	tok := is.Sign(oidcClaims(is, "alice@example.com", "devs", exp))
	a := s.dialAs(t, tok)
	a.initialize("alice-skew")
	if m := a.call("subscribe", map[string]any{"channel": "ahp-root://"}); m.Error != nil || time.Now().After(end) {
		t.Fatalf("a session within the skew: %s (at %v, the skew ends at %v)", m.raw, time.Now().Format(time.StampMilli), end.Format(time.StampMilli))
	}
	_, err := a.waitClosed(time.Until(end) + 5*time.Second)
	if at := time.Now(); at.Before(end) || at.After(end.Add(time.Second)) {
		t.Errorf("closed at %v, %v from exp plus the skew, want within 1 s after it", at.Format(time.StampMilli), at.Sub(end))
	}
	if websocket.CloseStatus(err) != 4007 || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("the session at the skew's end: %v, want close 4007 expired", err)
	}
	refusedAtDoor(t, s, "the token past exp plus the skew", tok, "expired")
}
