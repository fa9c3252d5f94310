package tests

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/sidecar-dev/sidecar/transport"
)

// tokenEntry is a tokens file entry for name with role, holding the
// SHA-256 of tok.
func tokenEntry(name, role, tok string) string {
	d := sha256.Sum256([]byte(tok))
	return "token \"" + name + "\" {\n  role = \"" + role + "\"\n  hash = \"sha256:" + hex.EncodeToString(d[:]) + "\"\n}\n"
}

// replaceFile writes content over path as editors do: a new file renamed
// over the old one.
func replaceFile(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".new"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// startServerTokens starts sidecar serve with a tokens file holding
// content; it returns the server and the file's path.
func startServerTokens(t *testing.T, content string) (*server, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "tokens.hcl")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return startServer(t, "auth {\n  tokens_file = "+strconv.Quote(path)+"\n}\n"), path
}

// dialAs opens a raw /ahp WebSocket with credential tok.
func (s *server) dialAs(t *testing.T, tok string) *rawConn {
	t.Helper()
	return (&server{p: s.p, url: s.url, host: s.host, token: tok, hash: s.hash}).dialRaw(t)
}

// ahpStatus is the HTTP status of an /ahp upgrade with credential tok.
func (s *server) ahpStatus(t *testing.T, tok string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	c, resp, err := websocket.Dial(ctx, s.url, &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + tok}}, HTTPClient: s.httpClient(t)})
	if err == nil {
		c.CloseNow()
		return http.StatusSwitchingProtocols
	}
	if resp == nil {
		t.Fatalf("dial: %v", err)
	}
	return resp.StatusCode
}

// dialTIO opens a transport-io session on the WebSocket mapping with
// credential tok.
func (s *server) dialTIO(t *testing.T, tok string) (transport.MessageConn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	return transport.DialTIOWebSocket(ctx, "wss://"+s.host+transport.TIOPath, http.Header{"Authorization": {"Bearer " + tok}}, s.httpClient(t), false)
}

// tioInitialize sends initialize on mc and returns the response.
func tioInitialize(t *testing.T, mc transport.MessageConn, clientID string) message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	req, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": map[string]any{
		"channel": "ahp-root://", "protocolVersions": []string{"0.5.0"}, "clientId": clientID}})
	if err := mc.WriteMessage(ctx, req); err != nil {
		t.Fatal(err)
	}
	for {
		raw, err := mc.ReadMessage(ctx)
		if err != nil {
			t.Fatalf("initialize over transport-io: %v", err)
		}
		if m := decode(t, raw); string(m.ID) == "1" {
			if m.Error != nil {
				t.Fatalf("initialize: %s", raw)
			}
			return m
		}
	}
}

// TestIdentitiesTokensFile: through the real daemon, a tokens file
// identity connects over /ahp and over transport-io (the WebSocket
// mapping and WebTransport),
// a wrong token is refused (401 on /ahp, WT_UNAUTHORIZED "unauthorized"
// on transport-io), and the single --token keeps working beside the
// file; `sidecar token hash` prints the line the file holds.
func TestIdentitiesTokensFile(t *testing.T) {
	t.Parallel()
	const alice = "alice-secret-1"
	s, _ := startServerTokens(t, tokenEntry("alice", "user", alice))

	a := s.dialAs(t, alice)
	a.initialize("alice-ahp")
	if code := s.ahpStatus(t, "not-a-token"); code != http.StatusUnauthorized {
		t.Fatalf("/ahp with a wrong token: %d, want 401", code)
	}
	mc, err := s.dialTIO(t, alice)
	if err != nil {
		t.Fatalf("transport-io as alice: %v", err)
	}
	defer mc.Close(transport.CloseNormal, "")
	tioInitialize(t, mc, "alice-tio")
	if _, err := s.dialTIO(t, "not-a-token"); !transport.IsUnauthorized(err) || transport.CloseReason(err) != "unauthorized" {
		t.Fatalf("transport-io with a wrong token: %v, want WT_UNAUTHORIZED unauthorized", err)
	}
	// And over WebTransport (HTTP/3).
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	wt, err := transport.DialWebTransport(ctx, "https://"+s.host+transport.TIOPath, http.Header{"Authorization": {"Bearer " + alice}}, s.tlsConfig())
	if err != nil {
		t.Fatalf("WebTransport as alice: %v", err)
	}
	defer wt.Close(transport.CloseNormal, "")
	tioInitialize(t, wt, "alice-wt")
	if _, err := transport.DialWebTransport(ctx, "https://"+s.host+transport.TIOPath, http.Header{"Authorization": {"Bearer not-a-token"}}, s.tlsConfig()); !transport.IsUnauthorized(err) || transport.CloseReason(err) != "unauthorized" {
		t.Fatalf("WebTransport with a wrong token: %v, want WT_UNAUTHORIZED unauthorized", err)
	}
	// The single token is the owner "token", as before.
	s.dialRaw(t).initialize("owner")
	if out, stderr, code := s.run(t, append([]string{"ls", s.url}, s.connArgs()...)...); code != 0 {
		t.Fatalf("ls with the single token: %d\n%s%s", code, out, stderr)
	}
	// The success is logged with the identity, never the token.
	s.p.stderr.waitFor(t, "alice's connection", 0, `"principal":"alice"`)
	if strings.Contains(s.p.stderr.String(), alice) {
		t.Fatal("the daemon's log carries alice's token")
	}

	hash := startStdin(t, alice+"\n", "token", "hash")
	if want := strings.Split(tokenEntry("alice", "user", alice), "\"")[5] + "\n"; hash != want {
		t.Fatalf("token hash printed %q, want %q", hash, want)
	}
}

// TestIdentitiesRevocation: editing the tokens file (an editor's rename)
// to remove alice closes her open sessions within 2 s, on /ahp with 4007
// "revoked" and on transport-io as WT_UNAUTHORIZED "revoked"; her
// `sidecar forward` (over /ahp and transport-io) ends at once with a clear message (no reconnect
// loop); her token is refused from then on, and once she is given a new
// token her client state cannot be resumed. Bob's session and the
// single token's are untouched.
func TestIdentitiesRevocation(t *testing.T) {
	t.Parallel()
	const alice, bob = "alice-secret-2", "bob-secret-2"
	s, path := startServerTokens(t, tokenEntry("alice", "user", alice)+tokenEntry("bob", "viewer", bob))

	a := s.dialAs(t, alice)
	var offer resumeOffer
	if err := json.Unmarshal(a.initialize("alice-1").Result, &offer); err != nil || offer.Resume.Token == "" {
		t.Fatalf("initialize offered no resume: %+v, %v", offer, err)
	}
	mc, err := s.dialTIO(t, alice)
	if err != nil {
		t.Fatal(err)
	}
	defer mc.Close(transport.CloseNormal, "")
	tioInitialize(t, mc, "alice-2")
	fwd := start(t, "forward", s.url, "--token", alice, "--cert-hash", s.hash, "-L", "127.0.0.1:0:127.0.0.1:9")
	fwd.stderr.waitFor(t, "alice's forward", 0, "sidecar: forwarding ")
	fwdTIO := start(t, "forward", "https://"+s.host, "--token", alice, "--cert-hash", s.hash, "-L", "127.0.0.1:0:127.0.0.1:9")
	fwdTIO.stderr.waitFor(t, "alice's forward over transport-io", 0, "sidecar: forwarding ")
	b := s.dialAs(t, bob)
	b.initialize("bob-1")
	o := s.dialRaw(t)
	o.initialize("owner-1")

	revoked := time.Now()
	replaceFile(t, path, tokenEntry("bob", "viewer", bob))

	_, err = a.waitClosed(2 * time.Second)
	if websocket.CloseStatus(err) != 4007 || !strings.Contains(err.Error(), "revoked") {
		t.Fatalf("alice's /ahp connection: %v, want close 4007 revoked", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second-time.Since(revoked))
	defer cancel()
	for {
		_, err := mc.ReadMessage(ctx)
		if err == nil {
			continue
		}
		if !transport.IsUnauthorized(err) || transport.CloseReason(err) != "revoked" {
			t.Fatalf("alice's transport-io session: %v, want WT_UNAUTHORIZED revoked within 2 s", err)
		}
		break
	}
	for _, p := range []*proc{fwd, fwdTIO} {
		if code := p.wait(t, 2*time.Second); code == 0 {
			t.Fatalf("alice's forward %v exited 0 after the revocation", p.cmd.Args[2])
		}
		if msg := p.stderr.String(); !strings.Contains(msg, "the token was revoked") || strings.Count(msg, "reconnect") > 1 {
			t.Fatalf("alice's forward %v said:\n%s", p.cmd.Args[2], msg)
		}
	}
	if took := time.Since(revoked); took > 2*time.Second+500*time.Millisecond {
		t.Fatalf("revocation took %v", took)
	}

	// Her token is refused everywhere now.
	if code := s.ahpStatus(t, alice); code != http.StatusUnauthorized {
		t.Fatalf("/ahp with the revoked token: %d, want 401", code)
	}
	if _, err := s.dialTIO(t, alice); !transport.IsUnauthorized(err) {
		t.Fatalf("transport-io with the revoked token: %v", err)
	}
	// The others go on.
	b.mustCall("subscribe", map[string]any{"channel": "ahp-root://"})
	o.mustCall("subscribe", map[string]any{"channel": "ahp-root://"})

	// Given a new token, alice starts afresh: nothing of hers is kept.
	const alice2 = "alice-secret-2b"
	replaceFile(t, path, tokenEntry("bob", "viewer", bob)+tokenEntry("alice", "user", alice2))
	if text, ok := s.p.stderr.waitMatch(waitTimeout, func(text string) bool {
		return strings.Count(text, `"@message":"tokens file reloaded"`) >= 2
	}); !ok {
		t.Fatalf("the second edit was not reloaded:\n%s", tail(text, 3000))
	}
	a2 := s.dialAs(t, alice2)
	if m := a2.call("reconnect", reconnectParams("alice-1", offer.Resume.Token, "", 0)); m.Error == nil || m.Error.Code != -32008 || errorKind(m) != "expired" {
		t.Fatalf("resuming alice's state after the revocation: %s", m.raw)
	}
	s.p.stderr.waitFor(t, "the revocation's log line", 0, `"@message":"credential revoked: connections closed"`)
}

// startStdin runs the sidecar with stdin and returns its stdout, failing
// unless it exits 0.
func startStdin(t *testing.T, stdin string, args ...string) string {
	t.Helper()
	cmd := exec.Command(sidecarBin, args...)
	cmd.Env = cleanEnv()
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.Output()
	if err != nil {
		var ee interface{ ExitCode() int }
		if errors.As(err, &ee) {
			t.Fatalf("sidecar %v exited %d", args, ee.ExitCode())
		}
		t.Fatal(err)
	}
	return string(out)
}

// TestIdentitiesReload: a bad edit of the tokens file keeps the previous
// tokens (the log names file:line and why); SIGHUP reloads the file and
// does not stop the daemon; a token added by an edit works at once.
func TestIdentitiesReload(t *testing.T) {
	t.Parallel()
	const alice, bob = "alice-secret-3", "bob-secret-3"
	s, path := startServerTokens(t, tokenEntry("alice", "user", alice))
	replaceFile(t, path, tokenEntry("alice", "admin", alice))
	s.p.stderr.waitFor(t, "the bad edit's log line", 0, `"@message":"tokens file not reloaded: the previous tokens stay in use"`)
	s.p.stderr.waitFor(t, "the bad edit's reason", 0, path+`:2: token \"alice\": unknown role \"admin\"`)
	s.dialAs(t, alice).initialize("alice")

	if err := os.WriteFile(path, []byte(tokenEntry("alice", "user", alice)+tokenEntry("bob", "viewer", bob)), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := s.p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	s.p.stderr.waitFor(t, "the SIGHUP reload", 0, `"trigger":"SIGHUP"`)
	s.dialAs(t, bob).initialize("bob")
	s.dialAs(t, alice).initialize("alice-2")
	select {
	case <-s.p.done:
		t.Fatal("SIGHUP stopped the daemon")
	default:
	}
}

// TestIdentitiesNoSingleToken: with auth.tokens_file and no single token
// (no --token, auth.token, auth.token_file or $SIDECAR_TOKEN), sidecar
// serve makes none up: the attach line names "$SIDECAR_TOKEN", the log
// says token_generated false, and everything works with the file's
// identities alone: /ahp, `sidecar ls`, the port preview (the token
// taken off the request the app gets), an empty credential refused.
func TestIdentitiesNoSingleToken(t *testing.T) {
	t.Parallel()
	const alice = "alice-secret-nosingle"
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens.hcl")
	if err := os.WriteFile(tokens, []byte(tokenEntry("alice", "owner", alice)), 0o600); err != nil {
		t.Fatal(err)
	}
	cfgFile := filepath.Join(dir, "sidecar.hcl")
	cfg := "listener {\n  address = \"127.0.0.1:0\"\n}\n" + terminalConfig + "log {\n  level = \"debug\"\n  format = \"json\"\n}\nauth {\n  tokens_file = " + strconv.Quote(tokens) + "\n}\n"
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	p := start(t, "serve", "--config", cfgFile, "--listen", "127.0.0.1:0", "--state-dir", filepath.Join(dir, "state"))
	var m []string
	text, ok := p.stdout.waitMatch(waitTimeout, func(text string) bool {
		m = attachLine.FindStringSubmatch(text)
		return m != nil
	})
	if !ok {
		t.Fatalf("no attach line within %v\nstdout:\n%s\nstderr:\n%s", waitTimeout, text, tail(p.stderr.String(), 3000))
	}
	if m[3] != `"$SIDECAR_TOKEN"` {
		t.Fatalf("attach line has token %q, want \"$SIDECAR_TOKEN\" (no token made up)", m[3])
	}
	p.stderr.waitFor(t, "the listening line", 0, `"token_generated":false`)
	s := &server{p: p, url: m[1], host: m[2], token: alice, hash: m[4], config: cfgFile}

	s.dialRaw(t).initialize("alice-nosingle")
	if code := s.ahpStatus(t, ""); code != http.StatusUnauthorized {
		t.Fatalf("/ahp with an empty credential: %d, want 401", code)
	}
	if out, stderr, code := s.run(t, append([]string{"ls", s.url}, s.connArgs()...)...); code != 0 {
		t.Fatalf("ls as alice: %d\n%s%s", code, out, stderr)
	}
	app := startPreviewApp(t)
	c := s.previewClient(t)
	expect(t, do(t, c, "GET", s.previewURL(app.port, "/headers"), nil, http.Header{"Authorization": {"Bearer " + alice}}), 200, "")
	sc := s.previewLogin(t, c)
	expect(t, do(t, c, "GET", s.previewURL(app.port, "/headers"), nil, cookieHeader(sc)), 200, "")
	if n := len(app.requests()); n != 2 {
		t.Fatalf("the app got %d requests, want 2", n)
	}
	app.neverSawCredentials(t, alice, sc.Value)
}

// TestIdentitiesLooseModes: a tokens file others may read, an existing
// audit.file and record_dir open to others start the daemon with a
// warning each naming the mode and the fix; a tokens file others may
// write stops it (exit 2) naming the chmod.
func TestIdentitiesLooseModes(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens.hcl")
	auditFile := filepath.Join(dir, "audit.jsonl")
	recs := filepath.Join(dir, "recordings")
	if err := os.WriteFile(tokens, []byte(tokenEntry("alice", "user", "alice-loose")), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(auditFile, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(recs, 0o700); err != nil {
		t.Fatal(err)
	}
	for p, m := range map[string]os.FileMode{tokens: 0o644, auditFile: 0o644, recs: 0o755} {
		if err := os.Chmod(p, m); err != nil { // past the umask
			t.Fatal(err)
		}
	}
	extra := "auth {\n  tokens_file = " + strconv.Quote(tokens) + "\n}\naudit {\n  file = " + strconv.Quote(auditFile) + "\n}\n"
	terminal := strings.Replace(terminalConfig, "terminal {", "terminal {\n  record_dir = "+strconv.Quote(recs), 1)
	s := startServerTerminal(t, terminal, extra)
	s.p.stderr.waitFor(t, "the tokens file's warning", 0, tokens+" may be read by others (mode 0644): chmod 600 "+tokens)
	s.p.stderr.waitFor(t, "the audit file's warning", 0, auditFile+" may be read or written by others (mode 0644), kept as it is: chmod 600 "+auditFile)
	s.p.stderr.waitFor(t, "record_dir's warning", 0, recs+" may be read or written by others (mode 0755), kept as it is: chmod 700 "+recs)

	if err := os.Chmod(tokens, 0o666); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "sidecar.hcl")
	if err := os.WriteFile(cfg, []byte("listener {\n  address = \"127.0.0.1:0\"\n}\n"+extra), 0o600); err != nil {
		t.Fatal(err)
	}
	p := start(t, "serve", "--config", cfg, "--listen", "127.0.0.1:0", "--token", "tok-loose", "--state-dir", filepath.Join(dir, "state"))
	if code := p.wait(t, waitTimeout); code != 2 || !strings.Contains(p.stderr.String(), "may be written by others (mode 0666): chmod 600 "+tokens) {
		t.Fatalf("a 0666 tokens file: exit %d\n%s", code, p.stderr.String())
	}
}
