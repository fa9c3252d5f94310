package tests

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"github.com/coder/websocket"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	creackpty "github.com/creack/pty"

	"github.com/sidecar-dev/sidecar/client"
	"github.com/sidecar-dev/sidecar/rpc"
)

// auditLine is one audit line of the daemon's log.
type auditLine struct {
	Module    string `json:"@module"`
	Message   string `json:"@message"`
	Action    string `json:"action"`
	Principal string `json:"principal"`
	Role      string `json:"role"`
	raw       map[string]any
}

// auditLines returns the audit lines of log (JSON lines; the others
// skipped).
func auditLines(t *testing.T, log []byte) []auditLine {
	t.Helper()
	var out []auditLine
	sc := bufio.NewScanner(bytes.NewReader(log))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if !bytes.Contains(sc.Bytes(), []byte(`"@module":"sidecar.audit"`)) {
			continue
		}
		var l auditLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("audit line %q: %v", sc.Text(), err)
		}
		_ = json.Unmarshal(sc.Bytes(), &l.raw)
		out = append(out, l)
	}
	return out
}

// TestAuditScriptedSession: a session through the real binary with the
// owner token (a command run in a terminal, a forwarded connection, a
// file copied there and back, a preview request) leaves exactly the
// expected audit events, each with the principal and role, in the
// daemon's log (JSON lines), in audit.file, and on the audit channel;
// no event, and no recording, carries the token. The terminal's
// recording plays back with `asciinema cat` byte-identical to what the
// client printed.
func TestAuditScriptedSession(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	recDir := filepath.Join(dir, "rec")
	auditFile := filepath.Join(dir, "audit.log")
	s := startServerTerminal(t, `terminal {
  shell = "/bin/sh"
  login = false
  env = {
    LANG = "C.UTF-8"
  }
  record_dir           = "`+recDir+`"
  record_max_bytes     = 1048576
  record_dir_max_bytes = 8388608
}
`, `audit {
  file = "`+auditFile+`"
}
`)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()

	// The audit channel, subscribed first: it sees the session live.
	c, err := client.Dial(ctx, s.url, client.Options{Token: s.token, CertHash: s.hash, ClientName: "audit-test"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	logs, err := c.SubscribeLogs(ctx, "ahp-otlp://logs/audit")
	if err != nil {
		t.Fatalf("subscribe to the audit channel: %v", err)
	}

	// 1. A command in a terminal: printf in a real shell; its output as
	// the client gets it (terminal/data), then the terminal disposed.
	const script = `printf 'one\ttwo\n\033[1mbold\033[0m caf\303\251 %s\n' $((6*7))`
	const termURI = "ahp-terminal:/audited"
	if err := c.Call(ctx, rpc.MethodCreateTerminal, rpc.CreateTerminalParams{Channel: termURI, Command: []string{"/bin/sh", "-c", script}}, nil); err != nil {
		t.Fatal(err)
	}
	term, err := client.OpenTerminal(ctx, c, termURI)
	if err != nil {
		t.Fatal(err)
	}
	var printed strings.Builder
	if code, err := term.Copy(ctx, &printed, false); err != nil || code == nil || *code != 0 {
		t.Fatalf("terminal: exit %v, %v", code, err)
	}
	stdout := printed.String()
	if stdout != "one\ttwo\r\n\x1b[1mbold\x1b[0m café 42\r\n" {
		t.Fatalf("terminal output %q", stdout)
	}
	if err := c.Call(ctx, rpc.MethodDisposeTerminal, rpc.ChannelParams{Channel: termURI}, nil); err != nil {
		t.Fatal(err)
	}

	// 2. A forwarded connection: 10 bytes each way.
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer echo.Close()
	go func() {
		conn, err := echo.Accept()
		if err == nil {
			_, _ = io.Copy(conn, conn)
			_ = conn.Close()
		}
	}()
	echoPort := echo.Addr().(*net.TCPAddr).Port
	tc, err := c.DialTCP(ctx, "127.0.0.1", echoPort)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tc.Write([]byte("ping-audit")); err != nil {
		t.Fatal(err)
	}
	back := make([]byte, 10)
	if _, err := io.ReadFull(tc, back); err != nil || string(back) != "ping-audit" {
		t.Fatalf("echo: %q, %v", back, err)
	}
	_ = tc.CloseWrite()
	if _, err := io.ReadAll(tc); err != nil {
		t.Fatalf("reading the echo's end: %v", err)
	}
	_ = tc.Close()

	// 3. A file copied there and back.
	local := filepath.Join(dir, "local.txt")
	if err := os.WriteFile(local, []byte("audit me\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	remote := filepath.Join(dir, "remote.txt")
	for _, args := range [][]string{{local, s.url + ":" + remote}, {s.url + ":" + remote, filepath.Join(dir, "back.txt")}} {
		if _, errOut, code := s.run(t, append(append([]string{"cp"}, args...), s.connArgs()...)...); code != 0 {
			t.Fatalf("cp %v: exit %d: %s", args, code, errOut)
		}
	}

	// 4. A preview request, its query not audited.
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "app") }))
	defer app.Close()
	appPort := app.Listener.Addr().(*net.TCPAddr).Port
	req, _ := http.NewRequest("GET", fmt.Sprintf("https://%s/ports/%d/hello?q=private", s.host, appPort), nil)
	req.Header.Set("Authorization", "Bearer "+s.token)
	resp, err := s.httpClient(t).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "app" {
		t.Fatalf("preview: %d %q", resp.StatusCode, body)
	}

	// The audit channel's records, until the preview's (the last).
	var channelActions []string
	for !slices.Contains(channelActions, "preview.request") {
		b, err := logs.Next(ctx)
		if err != nil {
			t.Fatalf("audit channel: %v (got %v)", err, channelActions)
		}
		if b.Data == nil {
			continue
		}
		for _, rl := range b.Data.ResourceLogs {
			for _, sl := range rl.ScopeLogs {
				if sl.Scope.GetName() != "sidecar.audit" {
					t.Fatalf("scope %q", sl.Scope.GetName())
				}
				for _, r := range sl.LogRecords {
					channelActions = append(channelActions, r.Body.GetStringValue())
				}
			}
		}
	}
	_ = c.Close()

	// sidecar logs --audit prints what the channel holds, and exits.
	out, errOut, code := s.run(t, append([]string{"logs", s.url, "--audit"}, s.connArgs()...)...)
	if code != 0 || !strings.Contains(out, " (owner): terminal.create ") || !strings.Contains(out, `url.path="/hello"`) {
		t.Errorf("sidecar logs --audit: exit %d\n%s%s", code, out, errOut)
	}

	// Shut down (every line written), then read the log and the file.
	_ = s.p.cmd.Process.Signal(syscall.SIGTERM)
	if code := s.p.wait(t, waitTimeout); code != 0 {
		t.Fatalf("serve exit %d", code)
	}
	logged := auditLines(t, s.p.stderr.Bytes())
	fileBytes, err := os.ReadFile(auditFile)
	if err != nil {
		t.Fatal(err)
	}
	inFile := auditLines(t, fileBytes)
	if fi, _ := os.Stat(auditFile); fi.Mode().Perm() != 0o600 {
		t.Errorf("audit.file mode %v, want 0600", fi.Mode().Perm())
	}

	var got []string
	byAction := map[string][]auditLine{}
	for _, l := range logged {
		got = append(got, l.Action)
		byAction[l.Action] = append(byAction[l.Action], l)
		if l.Message != l.Action || l.Role != "owner" || l.Principal != "token" {
			t.Errorf("audit line %v: want its action as message, a token principal, role owner", l.raw)
		}
	}
	slices.Sort(got)
	// One authentication per command (run, forward, cp up, cp down) and
	// one for the preview's bearer request.
	want := []string{
		"auth.success", "auth.success", "auth.success", "auth.success", "auth.success",
		"files.read", "files.write", "preview.request", "tcp.close", "tcp.open",
		"terminal.attach", "terminal.create", "terminal.kill",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("audit actions %v, want %v\n%s", got, want, s.p.stderr.String())
	}
	if len(inFile) != len(logged) {
		t.Errorf("audit.file has %d lines, the log %d", len(inFile), len(logged))
	}
	for _, a := range []string{"terminal.create", "terminal.attach", "tcp.open", "files.write", "files.read", "preview.request"} {
		if !slices.Contains(channelActions, a) {
			t.Errorf("the audit channel missed %s: %v", a, channelActions)
		}
	}

	// Each action's details.
	check := func(action, key string, want any) {
		t.Helper()
		if v := byAction[action][0].raw[key]; fmt.Sprint(v) != fmt.Sprint(want) {
			t.Errorf("%s %s = %v, want %v", action, key, v, want)
		}
	}
	check("tcp.open", "server.address", "127.0.0.1")
	check("tcp.open", "server.port", echoPort)
	check("tcp.close", "sent.bytes", 10)
	check("tcp.close", "received.bytes", 10)
	if d, ok := byAction["tcp.close"][0].raw["duration"].(float64); !ok || d <= 0 || d > waitTimeout.Seconds() {
		t.Errorf("tcp.close duration %v", byAction["tcp.close"][0].raw["duration"])
	}
	check("files.write", "file.path", remote)
	check("files.write", "bytes", 9)
	check("files.write", "outcome", "committed")
	check("files.read", "file.path", remote)
	check("files.read", "bytes", 9)
	check("files.read", "outcome", "complete")
	check("preview.request", "server.port", appPort)
	check("preview.request", "http.request.method", "GET")
	check("preview.request", "url.path", "/hello")
	check("preview.request", "http.response.status_code", 200)
	check("terminal.create", "process.executable.name", "sh")
	check("terminal.create", "terminal", termURI)
	termRaw := byAction["terminal.create"][0].raw["terminal"]
	check("terminal.attach", "terminal", termRaw)
	check("terminal.kill", "terminal", termRaw)

	// No secret anywhere: not the token, not the preview's query.
	for what, b := range map[string][]byte{"log": s.p.stderr.Bytes(), "audit.file": fileBytes} {
		for _, secret := range []string{s.token, "q=private"} {
			if bytes.Contains(b, []byte(secret)) {
				t.Errorf("%s holds %q", what, secret)
			}
		}
	}

	// The recording: one file, 0600, playing back what run printed.
	casts, _ := filepath.Glob(filepath.Join(recDir, "*.cast"))
	if len(casts) != 1 {
		t.Fatalf("recordings %v, want one", casts)
	}
	if rec := byAction["terminal.create"][0].raw["recording"]; rec != casts[0] {
		t.Errorf("terminal.create recording %v, want %s", rec, casts[0])
	}
	fi, err := os.Stat(casts[0])
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("recording mode: %v %v", fi, err)
	}
	cast, _ := os.ReadFile(casts[0])
	if bytes.Contains(cast, []byte(s.token)) {
		t.Errorf("the recording holds the token")
	}
	played := asciinemaCat(t, casts[0])
	if played != stdout {
		t.Fatalf("asciinema cat:\n%q\nthe terminal's output:\n%q", played, stdout)
	}
}

// asciinemaCat returns what `asciinema cat` plays of the recording path
// (Debian's asciinema; the test is skipped without it, and fails under
// CI=true). asciinema opens /dev/tty: it runs with a PTY as its
// controlling terminal, its stdout a pipe, so what it prints is exactly
// the recording's output.
func asciinemaCat(t *testing.T, path string) string {
	t.Helper()
	bin, err := exec.LookPath("asciinema")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("asciinema is not installed (CI installs the Debian package)")
		}
		t.Skip("asciinema not installed")
	}
	ptmx, tty, err := creackpty.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer ptmx.Close()
	var out, errOut bytes.Buffer
	cmd := exec.Command(bin, "cat", path)
	cmd.Env = append(cleanEnv(), "LANG=C.UTF-8", "PYTHONIOENCODING=utf-8", "HOME="+t.TempDir())
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, &out, &errOut
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	_ = tty.Close()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-time.After(waitTimeout):
		_ = cmd.Process.Kill()
		<-done
		t.Fatal("asciinema cat did not end")
	}
	if err != nil {
		t.Fatalf("asciinema cat: %v: %s", err, errOut.String())
	}
	return out.String()
}

// TestAuditReverseForward: a reverse forward's listener is audited when
// it opens (its address and destination) and closes, and the connection
// it accepted as a TCP channel (reverse, the peer's address, the bytes
// each way).
func TestAuditReverseForward(t *testing.T) {
	t.Parallel()
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer echo.Close()
	go func() {
		conn, err := echo.Accept()
		if err == nil {
			_, _ = io.Copy(conn, conn)
			_ = conn.Close()
		}
	}()
	dest := echo.Addr().String()
	s := startServer(t, "")
	fw, addrs := reverseStart(t, s, "-R 127.0.0.1:0:"+dest)
	conn, err := net.DialTimeout("tcp", addrs[0], waitTimeout)
	if err != nil {
		t.Fatal(err)
	}
	_ = conn.SetDeadline(time.Now().Add(waitTimeout))
	if _, err := conn.Write([]byte("hi-rev")); err != nil {
		t.Fatal(err)
	}
	back := make([]byte, 6)
	if _, err := io.ReadFull(conn, back); err != nil || string(back) != "hi-rev" {
		t.Fatalf("echo through -R: %q, %v", back, err)
	}
	_ = conn.(*net.TCPConn).CloseWrite()
	_, _ = io.ReadAll(conn)
	_ = conn.Close()
	fw.p.kill(t)

	_ = s.p.cmd.Process.Signal(syscall.SIGTERM)
	if code := s.p.wait(t, waitTimeout); code != 0 {
		t.Fatalf("serve exit %d", code)
	}
	byAction := map[string][]auditLine{}
	var got []string
	for _, l := range auditLines(t, s.p.stderr.Bytes()) {
		got = append(got, l.Action)
		byAction[l.Action] = append(byAction[l.Action], l)
		if l.Role != "owner" || l.Principal != "token" {
			t.Errorf("audit line %v: want a token principal, role owner", l.raw)
		}
	}
	slices.Sort(got)
	if want := []string{"auth.success", "tcp.close", "tcp.open", "tunnel.close", "tunnel.listen"}; !slices.Equal(got, want) {
		t.Fatalf("audit actions %v, want %v", got, want)
	}
	for _, c := range []struct {
		action, key string
		want        any
	}{
		{"tunnel.listen", "server.address", addrs[0]},
		{"tunnel.listen", "destination", dest},
		{"tunnel.close", "server.address", addrs[0]},
		{"tcp.open", "reverse", true},
		{"tcp.open", "client.address", conn.LocalAddr().String()},
		{"tcp.close", "sent.bytes", 6},
		{"tcp.close", "received.bytes", 6},
	} {
		if v := byAction[c.action][0].raw[c.key]; fmt.Sprint(v) != fmt.Sprint(c.want) {
			t.Errorf("%s %s = %v, want %v", c.action, c.key, v, c.want)
		}
	}
	if bytes.Contains(s.p.stderr.Bytes(), []byte(s.token)) {
		t.Error("the log holds the token")
	}
}

// TestAuditOneFailurePerRequest: a request to /ahp with a bad ?ticket=
// (and no token) is one auth.failure, as a WebSocket upgrade and as a
// plain GET over HTTP/2: two requests, two events (a review saw two
// events from one client connection: two requests on it).
func TestAuditOneFailurePerRequest(t *testing.T) {
	t.Parallel()
	s, _ := startServerTokens(t, tokenEntry("alice", "user", "alice-one-failure"))
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	_, resp, err := websocket.Dial(ctx, s.url+"?ticket=BAD", &websocket.DialOptions{HTTPClient: s.httpClient(t)})
	if err == nil || resp == nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("/ahp?ticket=BAD: %v %v, want 401", resp, err)
	}
	// And a plain GET over HTTP/2 (curl's default).
	h2 := &http.Client{Transport: &http.Transport{TLSClientConfig: s.tlsConfig(), ForceAttemptHTTP2: true}}
	req, _ := http.NewRequestWithContext(ctx, "GET", "https://"+s.host+strings.TrimPrefix(s.url, "wss://"+s.host)+"?ticket=BAD", nil)
	if r2, err := h2.Do(req); err != nil || r2.StatusCode != http.StatusUnauthorized {
		t.Fatalf("GET /ahp?ticket=BAD over HTTP/2: %v %v", r2, err)
	} else {
		r2.Body.Close()
	}
	// The audit trail is in order: once this success is written, so is
	// every failure before it.
	s.dialRaw(t).initialize("after")
	s.p.stderr.waitFor(t, "the success after", 0, `"auth.success"`)
	n := 0
	for _, l := range auditLines(t, s.p.stderr.Bytes()) {
		if l.Action == "auth.failure" {
			n++
		}
	}
	if n != 2 {
		t.Fatalf("%d auth.failure events for two requests, want 2\n%s", n, s.p.stderr.String())
	}
}
