package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/charmbracelet/x/vt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// TestConnectionErrors: every way a client can fail to connect exits 255
// with a message that says what is wrong; the endpoint refuses a missing or
// wrong token with HTTP 401 before the WebSocket upgrade.
func TestConnectionErrors(t *testing.T) {
	t.Parallel()
	s := startServer(t, "")
	runTrue := func(url, token, hash string) (string, int) {
		_, errOut, code := s.run(t, "run", url, "--token", token, "--cert-hash", hash, "--", "true")
		return errOut, code
	}
	t.Run("wrong token", func(t *testing.T) {
		errOut, code := runTrue(s.url, s.token+"x", s.hash)
		if code != 255 || !strings.Contains(errOut, "refused the token") {
			t.Errorf("exit %d, stderr %q; want 255 and \"refused the token\"", code, errOut)
		}
	})
	t.Run("wrong pin", func(t *testing.T) {
		wrong := strings.Repeat("0", 64)
		// The same line on every transport (QUIC wrapped it in CRYPTO_ERROR).
		want := "sidecar: " + s.host + ": certificate pin mismatch: server presented sha256 " + s.hash + ", expected " + wrong +
			"; check --cert-hash (sidecar serve prints the current one)\n"
		for _, tr := range []string{"ahp", "websocket", "webtransport", "auto"} { // auto: both refused, said once
			_, errOut, code := s.run(t, "run", "https://"+s.host, "--transport", tr, "--token", s.token, "--cert-hash", wrong, "--", "true")
			if code != 255 || errOut != want {
				t.Errorf("--transport %s: exit %d, stderr %q; want 255 and %q", tr, code, errOut, want)
			}
		}
	})
	t.Run("plain ws://", func(t *testing.T) {
		errOut, code := runTrue("ws://"+s.host+"/ahp", s.token, s.hash)
		want := "sidecar: " + s.host + " answered plain ws:// with HTTP 400: the sidecar always speaks TLS: use wss://\n"
		if code != 255 || errOut != want {
			t.Errorf("exit %d, stderr %q; want 255 and %q", code, errOut, want)
		}
	})
	t.Run("nothing listening", func(t *testing.T) {
		errOut, code := runTrue("wss://"+freePort(t)+"/ahp", s.token, s.hash)
		if code != 255 || !strings.Contains(errOut, "nothing is listening") {
			t.Errorf("exit %d, stderr %q; want 255 and \"nothing is listening\"", code, errOut)
		}
	})
	t.Run("HTTP GET without token", func(t *testing.T) {
		resp, err := s.httpClient(t).Get("https://" + s.host + "/ahp")
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("status %d, want 401", resp.StatusCode)
		}
	})
	t.Run("WebSocket without token", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		c, resp, err := websocket.Dial(ctx, s.url, &websocket.DialOptions{HTTPClient: s.httpClient(t)})
		if err == nil {
			_ = c.CloseNow()
			t.Fatal("dial without a token succeeded")
		}
		if resp == nil || resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("response %v, want HTTP 401 (error %v)", resp, err)
		}
	})
	t.Run("WebSocket with wrong token", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		hdr := http.Header{}
		hdr.Set("Authorization", "Bearer "+s.token+"x")
		c, resp, err := websocket.Dial(ctx, s.url, &websocket.DialOptions{HTTPClient: s.httpClient(t), HTTPHeader: hdr})
		if err == nil {
			_ = c.CloseNow()
			t.Fatal("dial with a wrong token succeeded")
		}
		if resp == nil || resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("response %v, want HTTP 401 (error %v)", resp, err)
		}
	})
}

// TestBadConfigFileLine: an invalid config makes serve exit non-zero at
// once, naming the file and the line.
func TestBadConfigFileLine(t *testing.T) {
	t.Parallel()
	cases := map[string]string{
		"unknown attribute": "listener {\n  address = \"127.0.0.1:0\"\n  bogus = 1\n}\n",
		"syntax error":      "listener {\n  address = \"127.0.0.1:0\"\n  origins = [\"https://x\" \"https://y\"]\n}\n",
		"invalid value":     "delivery {\n  window_bytes = 262144\n  maximum_frame_bytes = 12\n}\n",
	}
	for name, text := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			f := filepath.Join(dir, "bad.hcl")
			if err := os.WriteFile(f, []byte(text), 0o600); err != nil {
				t.Fatal(err)
			}
			p := start(t, "serve", "--config", f, "--state-dir", filepath.Join(dir, "state"), "--token", "x")
			code := p.wait(t, 10*time.Second)
			errOut := p.stderr.String()
			if code == 0 {
				t.Errorf("serve exited 0 with a bad config")
			}
			if !strings.Contains(errOut, f+":3") {
				t.Errorf("stderr does not point at %s:3:\n%s", f, errOut)
			}
			if strings.Contains(p.stdout.String(), "sidecar attach") {
				t.Errorf("serve started listening with a bad config: %q", p.stdout.String())
			}
		})
	}
}

// TestUsageErrors: every usage error (arguments, an unknown flag, an
// unknown --transport, a URL that is none, a bad pin or timeout, a local
// port given twice) exits 2 with one line that says what is wrong, before
// anything is dialled: the address the URLs name (TCP, and UDP for
// WebTransport) gets nothing.
func TestUsageErrors(t *testing.T) {
	t.Parallel()
	silent, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	addr := silent.Addr().String()
	silentUDP, err := net.ListenPacket("udp4", addr)
	if err != nil {
		t.Logf("no UDP socket on %s (%v): WebTransport attempts go unseen", addr, err)
	} else {
		defer silentUDP.Close()
	}
	wss, https := "wss://"+addr+"/ahp", "https://"+addr+"/"
	port := strings.TrimPrefix(freePort(t), "127.0.0.1:")
	for _, tc := range []struct {
		args []string
		want string // in the message
	}{
		{[]string{"forward"}, "missing URL: sidecar forward URL -L"},
		{[]string{"ls", "a", "b"}, "arg"},
		{[]string{"forward", "--bogus", "wss://127.0.0.1:1/ahp", "-L", "1:127.0.0.1:2"}, "--bogus"},
		{[]string{"forward", "wss://127.0.0.1:1/ahp", "--transport", "bogus", "-L", "1:127.0.0.1:2"}, "--transport"},
		{[]string{"forward", "wss://127.0.0.1:1/ahp", "--ordinary", "-L", "1:127.0.0.1:2"}, "--ordinary"},
		{[]string{"ls", "127.0.0.1:5533"}, `invalid URL "127.0.0.1:5533": want https://`},
		{[]string{"ls", "ftp://x"}, `invalid URL "ftp://x": scheme must be https://`},
		{[]string{"forward", "wss://127.0.0.1:99999/ahp", "-L", "0:127.0.0.1:1"}, `port "99999" is not between 1 and 65535`},
		{[]string{"ls", wss, "--transport", "webtransport"}, "--transport webtransport needs an https:// URL"},
		{[]string{"ls", wss, "--cert-hash", "xyz"}, `--cert-hash: invalid certificate pin "xyz"`},
		{[]string{"ls", https, "--connect-timeout", "0"}, "--connect-timeout 0s: must be positive"},
		{[]string{"ls", https, "--connect-timeout", "-5s"}, "--connect-timeout -5s: must be positive"},
		{[]string{"attach", "127.0.0.1:5533"}, "invalid URL"},
		{[]string{"run", "ftp://x", "--", "true"}, "scheme must be"},
		{[]string{"kill", https, "t1", "--cert-hash", "xyz"}, "invalid certificate pin"},
		{[]string{"top", https, "--connect-timeout", "0"}, "must be positive"},
		{[]string{"forward", "127.0.0.1:5533", "-L", "1:127.0.0.1:2"}, "invalid URL"},
		{[]string{"forward", wss, "--transport", "websocket", "-D", "0"}, "needs an https:// URL"},
		{[]string{"forward", wss, "-L", port + ":127.0.0.1:1", "-L", port + ":127.0.0.1:2"}, "-L " + port + " given twice"},
		{[]string{"forward", wss, "-L", "5605:::1:5600"}, "put IPv6 addresses in brackets: [::1]"},
		// A URL and --via (whose command is not started either).
		{[]string{"ls", wss, "--via", "cat"}, wss + " and --via are exclusive"},
		{[]string{"run", https, "--via", "cat", "--", "true"}, https + " and --via are exclusive"},
		{[]string{"forward", wss, "--via", "cat", "-D", "0"}, wss + " and --via are exclusive"},
		{[]string{"top", "--interval", "0", wss}, "--interval 0s: must be positive"},
		{[]string{"top", "--interval", "-1s", wss}, "--interval -1s: must be positive"},
		{[]string{"run", wss, "--", ""}, "empty program name after --"},
		{[]string{"attach", wss, ""}, "empty terminal id"},
		{[]string{"kill", wss, "t1", ""}, "empty terminal id"},
		{[]string{"frobnicate", wss}, `unknown command "frobnicate" for "sidecar" (see sidecar --help)`},
		{[]string{"connect", wss}, `missing HOST:PORT after "` + wss + `"`},
		{[]string{"connect", wss, "localhost"}, `bad HOST:PORT "localhost": want host:port`},
		{[]string{"connect", wss, "localhost:22", "--ordinary"}, "--ordinary is not for connect"},
		{[]string{"connect", wss, "localhost:22", "--via", "cat"}, wss + " and --via are exclusive"},
		{[]string{"connect", wss, "localhost:22", "--token", "x", "--token-file", "/dev/null"}, "--token and --token-file are exclusive"},
		{[]string{"connect", wss, "localhost:22", "--token-file", "/dev/null"}, "--token-file: /dev/null is empty"},
	} {
		p := start(t, tc.args...)
		if code := p.wait(t, 10*time.Second); code != 2 {
			t.Errorf("sidecar %v exited %d, want 2; stderr:\n%s", tc.args, code, p.stderr.String())
		}
		errOut := p.stderr.String()
		if !strings.HasPrefix(errOut, "sidecar: ") || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, tc.want) ||
			strings.Contains(errOut, "cannot connect") || strings.Contains(errOut, "tlscert") {
			t.Errorf("sidecar %v: stderr %q, want one usage line with %q and no connection attempt", tc.args, errOut, tc.want)
		}
	}
	// The processes have exited: a dial would be in the backlog, a QUIC
	// packet in the socket's buffer.
	_ = silent.(*net.TCPListener).SetDeadline(time.Now())
	if c, err := silent.Accept(); err == nil {
		_ = c.Close()
		t.Errorf("a usage error connected to %s over TCP", addr)
	}
	if silentUDP != nil {
		_ = silentUDP.SetReadDeadline(time.Now())
		if _, _, err := silentUDP.ReadFrom(make([]byte, 2048)); err == nil {
			t.Errorf("a usage error sent UDP to %s", addr)
		}
	}
}

// TestCtrlCWhileConnecting: Ctrl-C (SIGINT) while a client command (attach:
// TestAttachSignalWhileConnecting) is still
// connecting (TLS to a server that never answers) exits 130 as a
// shell reports an interrupted program, with one line that says so rather
// than the dial's error.
func TestCtrlCWhileConnecting(t *testing.T) {
	t.Parallel()
	for name, args := range map[string][]string{
		"forward": {"forward", "-L", "127.0.0.1:0:127.0.0.1:1"},
		"run":     {"run", "--", "true"},
		"top":     {"top"},
		"ls":      {"ls"},
		"kill":    {"kill", "t1"},
		"connect": {"connect", "localhost:22"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			silent, err := net.Listen("tcp4", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer silent.Close()
			a := append([]string{args[0], "wss://" + silent.Addr().String() + "/ahp", "--token", "x",
				"--cert-hash", strings.Repeat("0", 64), "--connect-timeout", "60s"}, args[1:]...)
			p := start(t, a...)
			_ = silent.(*net.TCPListener).SetDeadline(time.Now().Add(waitTimeout))
			c, err := silent.Accept() // the client is connecting: its signal handler is in place
			if err != nil {
				t.Fatalf("sidecar %v did not connect: %v; stderr:\n%s", a, err, p.stderr.String())
			}
			defer c.Close()
			if err := p.cmd.Process.Signal(os.Interrupt); err != nil {
				t.Fatal(err)
			}
			code := p.wait(t, waitTimeout)
			if want := "sidecar: interrupted while connecting\n"; code != 130 || p.stderr.String() != want {
				t.Errorf("sidecar %v after SIGINT: exit %d, stderr %q; want 130 and %q", a, code, p.stderr.String(), want)
			}
		})
	}
}

// TestAttachSignalWhileConnecting: attach, in a terminal but not yet in
// raw mode, takes Ctrl-C (SIGINT) and SIGTERM while connecting as the
// other commands do: 128+n and one line (SIGINT killed it silently).
func TestAttachSignalWhileConnecting(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		sig  syscall.Signal
		code int
		line string
	}{
		{syscall.SIGINT, 130, "sidecar: interrupted while connecting"},
		{syscall.SIGTERM, 143, "sidecar: terminated while connecting"},
	} {
		t.Run(c.sig.String(), func(t *testing.T) {
			t.Parallel()
			silent, err := net.Listen("tcp4", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer silent.Close()
			att := startInPTY(t, "attach", "wss://"+silent.Addr().String()+"/ahp", "--token", "x",
				"--cert-hash", strings.Repeat("0", 64), "--connect-timeout", "60s")
			_ = silent.(*net.TCPListener).SetDeadline(time.Now().Add(waitTimeout))
			conn, err := silent.Accept() // connecting: the signal handler is in place
			if err != nil {
				t.Fatalf("attach did not connect: %v", err)
			}
			defer conn.Close()
			if err := att.cmd.Process.Signal(c.sig); err != nil {
				t.Fatal(err)
			}
			if code := att.wait(t); code != c.code || !strings.Contains(att.out.String(), c.line) {
				t.Errorf("attach after %v: exit %d, output %q; want %d and %q", c.sig, code, att.out.String(), c.code, c.line)
			}
		})
	}
}

// TestViaNotASidecar: --via a command that answers the transport-io
// handshake but is no sidecar (cat echoes it) fails within
// --connect-timeout naming the command, not "initialize: context deadline
// exceeded".
func TestViaNotASidecar(t *testing.T) {
	t.Parallel()
	p := start(t, "ls", "--via", "cat", "--connect-timeout", "2s")
	want := "sidecar: --via \"cat\": no answer to initialize in time: is the command `sidecar stdio` (or a shell that runs it)?\n"
	if code := p.wait(t, waitTimeout); code != 255 || p.stderr.String() != want {
		t.Errorf("ls --via cat: exit %d, stderr %q; want 255 and %q", code, p.stderr.String(), want)
	}
}

// TestServeTokenFlagNotPrinted: a token given with --token is the
// operator's secret, as a configured one is: the attach line at start
// (stdout, the journal under systemd) says --token "$SIDECAR_TOKEN", and
// the logs do not have it either.
func TestServeTokenFlagNotPrinted(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	const secret = "flag-secret-4711"
	p := start(t, "serve", "--listen", "127.0.0.1:0", "--token", secret, "--state-dir", filepath.Join(dir, "state"))
	text, ok := p.stdout.waitMatch(waitTimeout, func(s string) bool { return strings.Contains(s, "--cert-hash") })
	if !ok {
		t.Fatalf("no attach line: %q; stderr:\n%s", text, p.stderr.String())
	}
	if strings.Contains(text, secret) || !strings.Contains(text, `--token "$SIDECAR_TOKEN"`) {
		t.Errorf("attach line %q: want --token \"$SIDECAR_TOKEN\", not the token", text)
	}
	p.kill(t)
	if strings.Contains(p.stderr.String(), secret) {
		t.Errorf("serve logged the token:\n%s", p.stderr.String())
	}
}

// TestServeAttachLineCommand: serve started by a relative path
// (./sidecar, as a developer runs bin/sidecar) prints an attach line that
// works from anywhere: the executable's absolute path, or "sidecar" when
// that name on $PATH is this very binary.
func TestServeAttachLineCommand(t *testing.T) {
	t.Parallel()
	dir := filepath.Dir(sidecarBin)
	abs, err := filepath.EvalSymlinks(sidecarBin)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, path, want string
	}{
		{"not on $PATH", "/nonexistent", abs + " attach "},
		{"on $PATH", dir, "sidecar attach "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command("./"+filepath.Base(sidecarBin), "serve", "--listen", "127.0.0.1:0", "--token", "tok", "--state-dir", filepath.Join(t.TempDir(), "state"))
			cmd.Dir = dir
			for _, kv := range cleanEnv() {
				if !strings.HasPrefix(kv, "PATH=") {
					cmd.Env = append(cmd.Env, kv)
				}
			}
			cmd.Env = append(cmd.Env, "PATH="+tc.path)
			p := startCmd(t, cmd, nil)
			text, ok := p.stdout.waitMatch(waitTimeout, func(s string) bool { return strings.Contains(s, "--cert-hash") })
			if !ok {
				t.Fatalf("no attach line: %q; stderr:\n%s", text, p.stderr.String())
			}
			if !strings.HasPrefix(text, tc.want) {
				t.Errorf("attach line %q, want it to start with %q", text, tc.want)
			}
			p.kill(t)
		})
	}
}

var shellPidLine = regexp.MustCompile(`\r\nshell-pid=(\d+)\r\n`)

var pidLine = regexp.MustCompile(`pid=(\d+) child=(\d+)\r\n`)

// TestServeSIGTERM: SIGTERM with a client attached to a running terminal:
// serve exits 0 within 10 s, the client sees close code 1001, and the
// terminal's processes (shell and its child) are gone.
func TestServeSIGTERM(t *testing.T) {
	t.Parallel()
	s := startServer(t, "")
	rc := s.dialRaw(t)
	rc.initialize("sigterm-client")
	uri := "ahp-terminal:/sig-1"
	rc.mustCall("createTerminal", map[string]any{
		"channel": uri, "command": []string{"sh", "-c", "sleep 300 & echo pid=$$ child=$!; wait"},
	})
	sub := rc.mustCall("subscribe", map[string]any{"channel": uri})
	var out strings.Builder
	out.WriteString(snapshotContent(t, sub.Result))
	var m []string
	rc.waitNotification("pid line", func(msg message) bool {
		out.WriteString(actionData(t, msg))
		m = pidLine.FindStringSubmatch(out.String())
		return m != nil
	})
	var pids []int
	for _, s := range m[1:] {
		pid, _ := strconv.Atoi(s)
		if !alive(pid) {
			t.Fatalf("pid %d is not running before SIGTERM", pid)
		}
		pids = append(pids, pid)
	}
	t.Cleanup(func() {
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})

	// An interactive client attached to a shell of its own.
	att := startInPTY(t, append([]string{"attach", s.url}, s.connArgs()...)...)
	att.out.waitFor(t, "attach prompt", 0, "XPROMPT> ")
	att.typeText(t, "echo shell-pid=$$\r")
	var shellPid int
	text, ok := att.out.waitMatch(waitTimeout, func(text string) bool {
		m := shellPidLine.FindStringSubmatch(text)
		if m != nil {
			shellPid, _ = strconv.Atoi(m[1])
		}
		return m != nil
	})
	if !ok {
		t.Fatalf("no shell pid from attach; screen:\n%s", text)
	}
	pids = append(pids, shellPid)

	start := time.Now()
	if err := s.p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	_, err := rc.waitClosed(10 * time.Second)
	if code := websocket.CloseStatus(err); code != websocket.StatusGoingAway {
		t.Errorf("client saw %v (close code %d), want close code 1001", err, code)
	}
	if code := s.p.wait(t, 10*time.Second); code != 0 {
		t.Errorf("serve exited %d on SIGTERM, want 0", code)
	}
	t.Logf("serve exited %v after SIGTERM", time.Since(start).Round(time.Millisecond))
	if code := att.wait(t); code != 255 {
		t.Errorf("attach exited %d when the server shut down, want 255", code)
	}
	if screen := att.out.String(); !strings.Contains(screen, "shutting down") {
		t.Errorf("attach did not say the server is shutting down; screen:\n%s", tail(screen, 1000))
	}
	for _, pid := range pids {
		// SIGKILLed to the group by serve; give the kernel a moment.
		if !exitsWithin(pid, 5*time.Second) {
			t.Errorf("terminal process %d still alive 5 s after serve exited", pid)
		}
	}
	if strings.Contains(s.p.stderr.String(), `"@level":"error"`) {
		t.Errorf("serve logged errors:\n%s", tail(s.p.stderr.String(), 3000))
	}
}

// actionData returns the text of a terminal/data action notification, or "".
func actionData(t *testing.T, m message) string {
	t.Helper()
	if m.Method != "action" {
		return ""
	}
	var p struct {
		Action struct {
			Type string `json:"type"`
			Data string `json:"data"`
		} `json:"action"`
	}
	if err := json.Unmarshal(m.Params, &p); err != nil {
		t.Fatalf("bad action: %v", err)
	}
	if p.Action.Type != "terminal/data" {
		return ""
	}
	return p.Action.Data
}

// snapshotContent returns the text a terminal snapshot (in a subscribe
// result or a channel/snapshot's params) shows: its content (raw VT text
// that redraws the terminal) written into a VT emulator of the state's
// size, read back as the lines that scrolled off, then the screen's rows
// down to the cursor's, joined by CR LF, the cursor's row up to the
// cursor. For output that ended in a newline it is the output's end.
func snapshotContent(t *testing.T, raw json.RawMessage) string {
	t.Helper()
	var r struct {
		Snapshot struct {
			State struct {
				Cols, Rows int
				Content    []struct {
					Value string `json:"value"`
				} `json:"content"`
			} `json:"state"`
		} `json:"snapshot"`
	}
	if err := json.Unmarshal(raw, &r); err != nil {
		t.Fatalf("bad snapshot: %v: %.300s", err, raw)
	}
	var b strings.Builder
	for _, p := range r.Snapshot.State.Content {
		b.WriteString(p.Value)
	}
	st := r.Snapshot.State
	return screenText(b.String(), max(st.Cols, 1), max(st.Rows, 1))
}

// screenText writes VT text into an emulator of cols×rows and returns
// what it shows, as snapshotContent says.
func screenText(content string, cols, rows int) string {
	if content == "" {
		return ""
	}
	e := vt.NewEmulator(cols, rows)
	e.SetScrollbackSize(1 << 20)
	_, _ = e.WriteString(content) // no queries in a snapshot: nothing to answer
	var b strings.Builder
	sb := e.Scrollback()
	for i := range sb.Len() {
		b.WriteString(sb.Line(i).String())
		b.WriteString("\r\n")
	}
	cur := e.CursorPosition()
	for y := range cur.Y + 1 {
		var row strings.Builder
		end := cols
		if y == cur.Y {
			end = cur.X
		}
		for x := range end {
			if c := e.CellAt(x, y); c != nil {
				row.WriteString(c.Content)
			}
		}
		if y < cur.Y {
			b.WriteString(strings.TrimRight(row.String(), " "))
			b.WriteString("\r\n")
		} else {
			b.WriteString(row.String())
		}
	}
	return b.String()
}

// TestForwardListenFailsFirst: a -L or -D port already in use fails at
// once with the listen error, naming the flag, with exit 1 (not the 255
// of a failed connection), before anything is dialled: the
// URL names a listener that never answers, so a dial would hang until
// --connect-timeout (a minute), and that listener gets no connection.
func TestForwardListenFailsFirst(t *testing.T) {
	t.Parallel()
	busy, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	silent, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	bind := busy.Addr().String()
	for _, spec := range [][]string{
		{"-L", bind + ":127.0.0.1:80"},
		{"-D", bind},
		{"-L", "127.0.0.1:0:127.0.0.1:80", "-D", bind},
	} {
		args := append([]string{"forward", "https://" + silent.Addr().String() + "/",
			"--token", "x", "--cert-hash", strings.Repeat("0", 64), "--connect-timeout", "60s"}, spec...)
		p := start(t, args...)
		code := p.wait(t, 10*time.Second)
		errOut := p.stderr.String()
		flag := spec[len(spec)-2] // the one given bind
		want := "sidecar: " + flag + " " + bind + ": cannot listen on " + bind + ": address already in use (another program holds it: pick another local port, or 0 for any free one)\n"
		if code != 1 || errOut != want {
			t.Errorf("sidecar %v: exit %d, stderr %q; want 1 and %q", spec, code, errOut, want)
		}
		_ = silent.(*net.TCPListener).SetDeadline(time.Now()) // a dial would be in the backlog
		if c, err := silent.Accept(); err == nil {
			_ = c.Close()
			t.Errorf("sidecar %v connected before listening", spec)
		}
	}
}

// TestAutoTransportNothingListening: --transport auto (an https:// URL)
// against a port nothing listens on says so at once: the TCP port is
// refused, so the WebTransport attempt (which gets no answer over UDP) is
// not waited out. --connect-timeout 2s, under the WebTransport budget of
// 3 s, turns a wait into "did not answer in time".
func TestAutoTransportNothingListening(t *testing.T) {
	t.Parallel()
	addr := freePort(t)
	p := start(t, "ls", "https://"+addr+"/", "--transport", "auto", "--token", "x",
		"--cert-hash", strings.Repeat("0", 64), "--connect-timeout", "2s")
	code := p.wait(t, 10*time.Second)
	errOut := p.stderr.String()
	if want := "nothing is listening at " + addr; code != 255 || !strings.Contains(errOut, want) {
		t.Errorf("exit %d, stderr %q; want 255 and %q", code, errOut, want)
	}
}

// TestViaEndsEarly: --via a command that ends before the session is set
// up (a `docker exec` that finds no container) says the command ended, and
// how, below what it printed; not "transportio: connection lost: write |1:
// broken pipe" or "session closed by peer: WT_NO_ERROR".
func TestViaEndsEarly(t *testing.T) {
	t.Parallel()
	via := "echo 'Error: No such container: c1' >&2; exit 3"
	p := start(t, "ls", "--via", via)
	want := fmt.Sprintf("Error: No such container: c1\nsidecar: --via %q: the command ended (exit status 3) before the session was set up (see its stderr above)\n", via)
	if code := p.wait(t, waitTimeout); code != 255 || p.stderr.String() != want {
		t.Errorf("ls --via %q: exit %d, stderr %q; want 255 and %q", via, code, p.stderr.String(), want)
	}
	// run notifies SIGPIPE (for its stdout): our write to the ended
	// command's stdin raised one, read as "broken pipe while connecting"
	// (exit 141) about one run in ten.
	for i := range 10 {
		p := start(t, "run", "--via", via, "--", "true")
		if code := p.wait(t, waitTimeout); code != 255 || p.stderr.String() != want {
			t.Fatalf("run --via %q (%d): exit %d, stderr %q; want 255 and %q", via, i, code, p.stderr.String(), want)
		}
	}
}

// TestViaKilled: forward --via a sidecar stdio that is killed mid-session
// ends with how the command ended, not "the server closed the connection:
// the peer closed its end".
func TestViaKilled(t *testing.T) {
	t.Parallel()
	pidFile := filepath.Join(t.TempDir(), "pid")
	via := "echo $$ >" + pidFile + "; exec " + sidecarBin + " stdio"
	p := start(t, "forward", "--via", via, "-L", freePort(t)+":127.0.0.1:9")
	p.stderr.waitFor(t, "forward's first line", 0, "sidecar: forwarding ")
	if want := fmt.Sprintf("sidecar: connected through %q\n", via); !strings.HasPrefix(p.stderr.String(), want) {
		t.Errorf("forward --via said %q first, want %q", p.stderr.String(), want)
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("sidecar: --via %q: the command ended (signal: killed)\n", via)
	if code := p.wait(t, waitTimeout); code != 255 || !strings.Contains(p.stderr.String(), want) {
		t.Errorf("forward --via, command killed: exit %d, stderr %q; want 255 and %q", code, p.stderr.String(), want)
	}
}

// TestServeListenErrors: a --listen that is no HOST:PORT is a usage error
// naming the flag (exit 2), not listener.address; a port in use says so
// once and what to do (exit 1), without "listen tcp ...: bind:".
func TestServeListenErrors(t *testing.T) {
	t.Parallel()
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	for _, tc := range []struct {
		listen string
		code   int
		want   string
	}{
		{"::1:4433", 2, `sidecar: --listen: "::1:4433" is not host:port (address ::1:4433: too many colons in address); write for example "127.0.0.1:4433" or "[::]:4433"` + "\n"},
		{busy.Addr().String(), 1, "sidecar: cannot listen on " + busy.Addr().String() + ": address already in use (another sidecar serve? pick another port: --listen or listener.address)\n"},
	} {
		p := start(t, "serve", "--listen", tc.listen, "--state-dir", t.TempDir())
		if code := p.wait(t, waitTimeout); code != tc.code || !strings.HasSuffix(p.stderr.String(), tc.want) {
			t.Errorf("serve --listen %s: exit %d, stderr %q; want %d and %q", tc.listen, code, p.stderr.String(), tc.code, tc.want)
		}
	}
}

// TestViaSilentKilled: a --via command that never answers the handshake,
// or answers it but not initialize (cat echoes it), is given up on at
// --connect-timeout, said so in words (not "context deadline exceeded" or
// WT_HANDSHAKE_TIMEOUT), and killed: the second outlived the client. So
// is what it started (sh -c forks its command under dash): the third left
// its sleep running.
func TestViaSilentKilled(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ cmd, why string }{
		{"exec sleep 60", "no transport-io handshake in time"},
		{"exec cat", "no answer to initialize in time"},
		{"grandchild", "no transport-io handshake in time"},
	} {
		cmd := tc.cmd
		pidFile := filepath.Join(t.TempDir(), "pid")
		via := "echo $$ >" + pidFile + "; " + cmd
		if cmd == "grandchild" {
			via = "sleep 60 & echo $! >" + pidFile + "; wait"
		}
		why := tc.why
		p := start(t, "ls", "--via", via, "--connect-timeout", "1s")
		want := fmt.Sprintf("sidecar: --via %q: %s: is the command `sidecar stdio` (or a shell that runs it)?\n", via, why)
		if code := p.wait(t, waitTimeout); code != 255 || p.stderr.String() != want {
			t.Errorf("ls --via %q: exit %d, stderr %q; want 255 and %q", via, code, p.stderr.String(), want)
		}
		b, err := os.ReadFile(pidFile)
		if err != nil {
			t.Fatal(err)
		}
		stat := "/proc/" + strings.TrimSpace(string(b)) + "/stat"
		for deadline := time.Now().Add(waitTimeout); ; {
			s, err := os.ReadFile(stat)
			if err != nil || strings.Contains(string(s), ") Z ") {
				break // gone, or a zombie waiting for its reaper
			}
			if time.Now().After(deadline) {
				t.Fatalf("--via %q outlived the client: %s", cmd, s)
			}
			time.Sleep(10 * time.Millisecond) // polling the process table: no event to wait on
		}
	}
}

// TestKillNoSuchTerminal (issue 27 item 8): kill or attach of a terminal
// the host does not have says so, naming how to list them, and exits 4,
// apart from 255 (no connection: it was 255 too, so a script could not
// tell a terminal gone from a host unreachable), not 1 with the host's
// JSON-RPC error and its code; kill disposes of the others given all the
// same. A failed connection still exits 255.
func TestKillNoSuchTerminal(t *testing.T) {
	t.Parallel()
	s := startServer(t, "")
	rc := s.dialRaw(t)
	rc.initialize("kill-none")
	rc.mustCall("createTerminal", map[string]any{"channel": "ahp-terminal:/victim", "command": []string{"sleep", "300"}})
	_, errOut, code := s.run(t, append([]string{"kill", s.url, "t-nope", "victim"}, s.connArgs()...)...)
	want := "sidecar: no terminal ahp-terminal:/t-nope on this host (sidecar ls " + s.url + " lists them)\n"
	if code != 4 || errOut != want {
		t.Errorf("kill t-nope: exit %d, stderr %q; want 4 and %q", code, errOut, want)
	}
	out, _, _ := s.run(t, append([]string{"ls", s.url}, s.connArgs()...)...)
	if strings.Contains(out, "victim") {
		t.Errorf("the terminal given after the missing one was not killed:\n%s", out)
	}
	// Through --via, the listing is through it too.
	via := sidecarBin + " stdio"
	_, errOut, code = s.run(t, "kill", "--via", via, "ahp-terminal:/t-nope")
	want = fmt.Sprintf("sidecar: no terminal ahp-terminal:/t-nope on this host (sidecar ls --via %q lists them)\n", via)
	if code != 4 || errOut != want {
		t.Errorf("kill --via: exit %d, stderr %q; want 4 and %q", code, errOut, want)
	}

	// attach needs a terminal on stdin.
	a := startInPTY(t, append([]string{"attach", s.url, "t-nope"}, s.connArgs()...)...)
	code = a.wait(t)
	want = "sidecar: no terminal ahp-terminal:/t-nope on this host (sidecar ls " + s.url + " lists them)\r\n"
	if screen := a.out.String(); code != 4 || !strings.HasSuffix(screen, want) {
		t.Errorf("attach t-nope: exit %d, screen %q; want 4 and %q", code, screen, want)
	}

	// Where nothing listens: 255, for both.
	gone := "wss://" + freePort(t) + "/ahp"
	_, errOut, code = s.run(t, append([]string{"kill", gone, "t-nope"}, s.connArgs()...)...)
	if code != 255 || !strings.Contains(errOut, "nothing is listening") {
		t.Errorf("kill where nothing listens: exit %d, stderr %q; want 255 and \"nothing is listening\"", code, errOut)
	}
	a = startInPTY(t, append([]string{"attach", gone, "t-nope"}, s.connArgs()...)...)
	if code = a.wait(t); code != 255 || !strings.Contains(a.out.String(), "nothing is listening") {
		t.Errorf("attach where nothing listens: exit %d, screen %q; want 255 and \"nothing is listening\"", code, a.out.String())
	}
}

// TestAttachViaDetach: ~. in attach --via prints no reattach command: the
// host is the command's sidecar stdio, which ends with the session and
// kills its terminals (the shell is gone), so `attach stdio: ID --via
// ...` could never work. The line says that instead.
func TestAttachViaDetach(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "stdio.hcl")
	if err := os.WriteFile(cfg, []byte(terminalConfig+"log {\n  level = \"warn\"\n}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	via := sidecarBin + " stdio --config " + cfg
	a := startInPTY(t, "attach", "--via", via)
	pos := a.out.waitFor(t, "prompt", 0, "XPROMPT> ")
	a.typeText(t, "echo shell-pid=$$\r")
	var shellPid int
	text, ok := a.out.waitMatch(waitTimeout, func(text string) bool {
		m := shellPidLine.FindStringSubmatch(text[pos:])
		if m != nil {
			shellPid, _ = strconv.Atoi(m[1])
		}
		return m != nil
	})
	if !ok {
		t.Fatalf("no shell pid from attach --via; screen:\n%s", text)
	}
	t.Cleanup(func() { _ = syscall.Kill(shellPid, syscall.SIGKILL) })
	pos = a.out.waitFor(t, "prompt after the pid", pos+len("echo shell-pid"), "XPROMPT> ")
	a.typeText(t, "\r~.")
	if code := a.wait(t); code != 0 {
		t.Fatalf("detach: exit status %d, want 0; screen:\n%s", code, tail(a.out.String(), 2000))
	}
	screen := a.out.String()[pos:]
	want := regexp.MustCompile(`\r\nsidecar: detached from ahp-terminal:/t-[0-9a-f]+, which ends with this --via session: a sidecar stdio host keeps no terminal once its client has gone\r\n`)
	if !want.MatchString(screen) || strings.Contains(screen, "reattach") {
		t.Errorf("detach said %q; want %q and no reattach command", screen, want)
	}
	if !exitsWithin(shellPid, waitTimeout) {
		t.Errorf("the shell (pid %d) still runs after the --via session ended", shellPid)
	}
}

// TestViaCtrlCWhileConnecting: Ctrl-C while connecting through --via is
// SIGINT to the whole foreground process group, the --via command
// included: that it may die of it before our own handler has the signal
// is still an interrupt (130, "interrupted while connecting"), not 255
// "the command ended (signal: interrupt)" (1 run in 25 or so), for every
// client command (attach: in a terminal, the same code as the others).
func TestViaCtrlCWhileConnecting(t *testing.T) {
	t.Parallel()
	const runs = 50
	results := make(chan string, runs)
	var wg sync.WaitGroup
	for i := range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results <- viaCtrlC(t, i)
		}()
	}
	wg.Wait()
	close(results)
	for r := range results {
		if r != "" {
			t.Error(r)
		}
	}
}

// viaCtrlC runs a client command (which one: after i) --via a command
// that never answers, in a process group of its own, sends SIGINT to the
// group once the command has started, and returns what went wrong (""
// for nothing).
func viaCtrlC(t *testing.T, i int) string {
	ready := fmt.Sprintf("ready-%d", i)
	args := [][]string{{"ls"}, {"run", "--", "true"}, {"top"}, {"forward", "-L", "127.0.0.1:0:127.0.0.1:1"}, {"kill", "t1"}}[i%5]
	args = append(args[:1:1], append([]string{"--via", "echo " + ready + " >&2; exec sleep 100", "--connect-timeout", "60s"}, args[1:]...)...)
	cmd := exec.Command(sidecarBin, args...)
	cmd.Env = cleanEnv()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // the group a terminal's Ctrl-C reaches
	stderr := newStreamBuf()
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		return fmt.Sprintf("run %d: %v", i, err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		select {
		case <-done:
		case <-time.After(waitTimeout):
		}
	}()
	if _, ok := stderr.waitMatch(waitTimeout, func(s string) bool { return strings.Contains(s, ready) }); !ok {
		return fmt.Sprintf("run %d: the --via command did not start: %q", i, stderr.String())
	}
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGINT); err != nil {
		return fmt.Sprintf("run %d: %v", i, err)
	}
	var err error
	select {
	case err = <-done:
		done <- err // for the deferred wait
	case <-time.After(waitTimeout):
		return fmt.Sprintf("run %d: ls --via did not exit after SIGINT", i)
	}
	want := ready + "\nsidecar: interrupted while connecting\n"
	if code := exitCode(err); code != 130 || stderr.String() != want {
		return fmt.Sprintf("run %d, sidecar %q: exit %d, stderr %q; want 130 and %q", i, args, code, stderr.String(), want)
	}
	return ""
}

// TestServeSignals: sidecar serve started with SIGHUP and SIGINT ignored
// (nohup; a script's background job) keeps ignoring them itself, but the
// programs of its terminals start with both at their defaults (an ignored
// disposition survives exec: a shell then outlived SIGHUP, so sidecar kill
// took the 2 s grace and a SIGKILL); started normally, SIGHUP (its
// terminal closed) shuts it down gracefully, exit status 0.
func TestServeSignals(t *testing.T) {
	t.Parallel()
	s := startServerVia(t, []string{"/bin/sh", "-c", `trap "" HUP INT; exec "$@"`, "sh"}, "", "", "")
	out, errOut, code := s.run(t, append([]string{"run", s.url}, append(s.connArgs(), "--", "grep", "^SigIgn:", "/proc/self/status")...)...)
	if code != 0 {
		t.Fatalf("run: exit %d, stderr %q", code, errOut)
	}
	var ignored uint64
	if _, err := fmt.Sscanf(strings.TrimSpace(out), "SigIgn:\t%x", &ignored); err != nil {
		t.Fatalf("run printed %q: %v", out, err)
	}
	const hup, intr = 1 << (syscall.SIGHUP - 1), 1 << (syscall.SIGINT - 1)
	if ignored&(hup|intr) != 0 {
		t.Errorf("a terminal's program starts with signals %#x ignored, SIGHUP or SIGINT among them", ignored)
	}
	for _, sig := range []syscall.Signal{syscall.SIGHUP, syscall.SIGINT} {
		if err := s.p.cmd.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
		want := `"@message":"signal ignored: sidecar serve was started with it ignored (nohup, a background job)"`
		if _, ok := s.p.stderr.waitMatch(waitTimeout, func(log string) bool {
			return strings.Contains(log, want) && strings.Contains(log, `"signal":"`+sig.String()+`"`)
		}); !ok {
			t.Fatalf("no \"signal ignored\" line for %v:\n%s", sig, tail(s.p.stderr.String(), 2000))
		}
	}
	if _, _, code := s.run(t, append([]string{"ls", s.url}, s.connArgs()...)...); code != 0 {
		t.Errorf("ls after SIGHUP and SIGINT (ignored): exit %d", code)
	}

	// Whatever this test was started with (nohup ignores SIGHUP, and
	// sidecar serve would rightly keep ignoring it): the defaults.
	plain := startServerVia(t, []string{"env", "--default-signal=HUP,INT"}, "", "", "")
	if err := plain.p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	if code := plain.p.wait(t, 10*time.Second); code != 0 {
		t.Errorf("serve exited %d on SIGHUP, want 0 (a graceful shutdown)", code)
	}
	if log := plain.p.stderr.String(); !strings.Contains(log, `"signal":"hangup"`) || !strings.Contains(log, `"@message":"stopped"`) {
		t.Errorf("no graceful shutdown on SIGHUP in the log:\n%s", tail(log, 2000))
	}
}
