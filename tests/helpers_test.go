package tests

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
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
	"unicode/utf16"

	"github.com/coder/websocket"
	"golang.org/x/sys/unix"
)

// waitTimeout bounds every wait on observable output.
const waitTimeout = 30 * time.Second

// streamBuf collects a stream (stdout, stderr, a PTY) and lets a test wait
// until some text appears.
type streamBuf struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	changed chan struct{} // closed and replaced on every write
}

func newStreamBuf() *streamBuf { return &streamBuf{changed: make(chan struct{})} }

func (s *streamBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.buf.Write(p)
	close(s.changed)
	s.changed = make(chan struct{})
	return len(p), nil
}

func (s *streamBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

func (s *streamBuf) Bytes() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return bytes.Clone(s.buf.Bytes())
}

// waitMatch waits until match(text) is true for the text written so far,
// or the deadline passes; it returns the text and whether it matched.
func (s *streamBuf) waitMatch(timeout time.Duration, match func(string) bool) (string, bool) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		s.mu.Lock()
		text := s.buf.String()
		ch := s.changed
		s.mu.Unlock()
		if match(text) {
			return text, true
		}
		select {
		case <-ch:
		case <-deadline.C:
			return text, false
		}
	}
}

// waitFor fails the test unless sub appears (counting only from offset
// from) within waitTimeout; it returns the index just past the match.
func (s *streamBuf) waitFor(t testing.TB, what string, from int, sub string) int {
	t.Helper()
	idx := -1
	text, ok := s.waitMatch(waitTimeout, func(text string) bool {
		if from > len(text) {
			return false
		}
		if i := strings.Index(text[from:], sub); i >= 0 {
			idx = from + i + len(sub)
			return true
		}
		return false
	})
	if !ok {
		t.Fatalf("%s: %q did not appear within %v; got:\n%s", what, sub, waitTimeout, tail(text, 2000))
	}
	return idx
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "..." + s[len(s)-n:]
}

// proc is a started sidecar process.
type proc struct {
	cmd    *exec.Cmd
	stdout *streamBuf
	stderr *streamBuf
	done   chan struct{}
	err    error // from Wait, valid once done is closed
}

// start runs the sidecar binary with args, stdout and stderr collected.
// The process is killed (if still running) at cleanup.
func start(t testing.TB, args ...string) *proc {
	t.Helper()
	return startWith(t, nil, args...)
}

// startWith is start with stderr going to stderr instead (nil: collected
// in proc.stderr).
func startWith(t testing.TB, stderr *os.File, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(sidecarBin, args...)
	cmd.Env = cleanEnv()
	return startCmd(t, cmd, stderr)
}

// startCmd is startWith for a command made by the caller (its path,
// directory and environment chosen): stdout and stderr are set here.
func startCmd(t testing.TB, cmd *exec.Cmd, stderr *os.File) *proc {
	t.Helper()
	args := cmd.Args[1:]
	p := &proc{cmd: cmd, stdout: newStreamBuf(), stderr: newStreamBuf(), done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.stdout, p.stderr
	if stderr != nil {
		cmd.Stderr = stderr
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start sidecar %v: %v", args, err)
	}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() { p.kill(t) })
	return p
}

// cleanEnv is the test's environment without SIDECAR_* settings that
// would change what the CLI does, and with XDG_CACHE_HOME in the run's
// own directory (clientCache), so that the CLI's memory of transports
// (client.DefaultTransportMemory) is the run's, not the user's.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SIDECAR_") && !strings.HasPrefix(kv, "XDG_CACHE_HOME=") {
			env = append(env, kv)
		}
	}
	return append(env, "XDG_CACHE_HOME="+clientCache)
}

// kill ends the process: SIGTERM first (so sidecar serve can end its
// terminals), SIGKILL if it has not exited 10 s later.
func (p *proc) kill(t testing.TB) {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return
	case <-time.After(10 * time.Second):
	}
	t.Errorf("sidecar %v ignored SIGTERM for 10 s; killing it", p.cmd.Args[1:])
	_ = p.cmd.Process.Kill()
	<-p.done
}

// wait waits for the process to exit and returns its exit status.
func (p *proc) wait(t *testing.T, timeout time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(timeout):
		t.Fatalf("sidecar %v did not exit within %v\nstdout:\n%s\nstderr:\n%s", p.cmd.Args[1:], timeout, tail(p.stdout.String(), 2000), tail(p.stderr.String(), 2000))
	}
	return exitCode(p.err)
}

func exitCode(err error) int {
	if err == nil {
		return 0
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	return -1
}

// server is a running `sidecar serve`.
type server struct {
	p      *proc
	url    string // wss://127.0.0.1:PORT/ahp
	host   string // 127.0.0.1:PORT
	token  string
	hash   string
	config string // the config file
}

// connArgs are the flags every client command needs.
func (s *server) connArgs() []string {
	return []string{"--token", s.token, "--cert-hash", s.hash}
}

// terminalConfig is the terminal block of every test server: a plain
// /bin/sh with a recognisable prompt.
const terminalConfig = `terminal {
  shell = "/bin/sh"
  login = false
  env = {
    LANG = "C.UTF-8"
    PS1  = "XPROMPT> "
  }
}
`

// attachLine is the line sidecar serve prints; its URL has the base path
// (listener.base_path) before /ahp when one is set.
var attachLine = regexp.MustCompile(`sidecar attach (wss://(127\.0\.0\.1:\d+)(?:/\S*)?/ahp) --token (\S+) --cert-hash ([0-9a-f]{64})\n`)

// startServer starts `sidecar serve` on 127.0.0.1:0 with its own config
// file (the terminal block above plus extra) and state directory, and
// parses the attach line it prints.
func startServer(t testing.TB, extra string) *server {
	t.Helper()
	return startServerWith(t, "", terminalConfig, extra)
}

// startServerListener is startServer with more settings (lines) in the
// listener block.
func startServerListener(t testing.TB, listener, extra string) *server {
	t.Helper()
	return startServerWith(t, listener, terminalConfig, extra)
}

// startServerTerminal is startServer with its own terminal block.
func startServerTerminal(t testing.TB, terminal, extra string) *server {
	t.Helper()
	return startServerWith(t, "", terminal, extra)
}

// startServerWith is startServer with more settings (lines) in the
// listener block and its own terminal block.
func startServerWith(t testing.TB, listener, terminal, extra string) *server {
	t.Helper()
	return startServerVia(t, nil, listener, terminal, extra)
}

// startServerVia is startServerWith run through the command via (its
// program and arguments, the sidecar's path and arguments appended), or
// directly when via is nil.
func startServerVia(t testing.TB, via []string, listener, terminal, extra string) *server {
	t.Helper()
	dir := t.TempDir()
	cfgFile := filepath.Join(dir, "sidecar.hcl")
	cfg := "listener {\n  address = \"127.0.0.1:0\"\n" + listener + "}\n" + terminal + "log {\n  level = \"debug\"\n  format = \"json\"\n}\n" + extra
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	token := "tok-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	args := []string{"serve", "--config", cfgFile, "--listen", "127.0.0.1:0", "--token", token, "--state-dir", filepath.Join(dir, "state")}
	var p *proc
	if via == nil {
		p = start(t, args...)
	} else {
		cmd := exec.Command(via[0], append(append(via[1:len(via):len(via)], sidecarBin), args...)...)
		cmd.Env = cleanEnv()
		p = startCmd(t, cmd, nil)
	}
	var m []string
	text, ok := p.stdout.waitMatch(waitTimeout, func(text string) bool {
		m = attachLine.FindStringSubmatch(text)
		return m != nil
	})
	if !ok {
		t.Fatalf("sidecar serve printed no attach line within %v\nstdout:\n%s\nstderr:\n%s", waitTimeout, text, tail(p.stderr.String(), 3000))
	}
	if m[3] != `"$SIDECAR_TOKEN"` { // a token given with --token is not printed
		t.Fatalf("attach line has token %q, want \"$SIDECAR_TOKEN\"", m[3])
	}
	s := &server{p: p, url: m[1], host: m[2], token: token, hash: m[4], config: cfgFile}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("sidecar serve stderr:\n%s", tail(p.stderr.String(), 6000))
		}
	})
	return s
}

// run runs a client command to completion (bounded) and returns stdout,
// stderr and the exit status.
func (s *server) run(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	p := start(t, args...)
	code = p.wait(t, waitTimeout)
	return p.stdout.String(), p.stderr.String(), code
}

// tlsConfig pins the server certificate (what --cert-hash does).
func (s *server) tlsConfig() *tls.Config {
	return &tls.Config{
		InsecureSkipVerify: true, // replaced by the pin check below
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			if len(raw) == 0 {
				return errors.New("no certificate")
			}
			sum := sha256.Sum256(raw[0])
			if got := hex.EncodeToString(sum[:]); got != s.hash {
				return fmt.Errorf("pin mismatch: got %s want %s", got, s.hash)
			}
			return nil
		},
	}
}

// httpClient returns an HTTP client pinned to the server; its idle
// connections are closed at cleanup.
func (s *server) httpClient(t *testing.T) *http.Client {
	tr := &http.Transport{TLSClientConfig: s.tlsConfig(), DisableKeepAlives: true}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: waitTimeout}
}

// wsMsg is one message received on a raw WebSocket.
type wsMsg struct {
	text []byte
	err  error // set on the last item: why reading ended
}

// rawConn is a raw WebSocket to /ahp. A goroutine reads every message
// into a channel so that waiting with a deadline never cancels a Read
// (which would close a coder/websocket connection).
type rawConn struct {
	t      *testing.T
	c      *websocket.Conn
	msgs   chan wsMsg
	done   chan struct{}
	nextID int
	closed error // set once the reader has ended, by next
}

// dialRaw opens a raw WebSocket with the token and the certificate pin.
func (s *server) dialRaw(t *testing.T) *rawConn {
	t.Helper()
	return s.dialRawOffering(t)
}

// dialRawOffering is dialRaw offering the WebSocket subprotocols given.
func (s *server) dialRawOffering(t *testing.T, subprotocols ...string) *rawConn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	hdr := http.Header{}
	hdr.Set("Authorization", "Bearer "+s.token)
	c, resp, err := websocket.Dial(ctx, s.url, &websocket.DialOptions{HTTPHeader: hdr, HTTPClient: s.httpClient(t), Subprotocols: subprotocols})
	if err != nil {
		t.Fatalf("dial %s: %v (response %v)", s.url, err, resp)
	}
	c.SetReadLimit(64 << 20)
	rc := &rawConn{t: t, c: c, msgs: make(chan wsMsg, 256), done: make(chan struct{})}
	go func() {
		defer close(rc.done)
		defer close(rc.msgs)
		for {
			_, data, err := c.Read(context.Background())
			if err != nil {
				rc.msgs <- wsMsg{err: err}
				return
			}
			rc.msgs <- wsMsg{text: data}
		}
	}()
	t.Cleanup(rc.close)
	return rc
}

// close closes the connection at once and waits for the reader.
func (rc *rawConn) close() {
	_ = rc.c.CloseNow()
	for range rc.msgs {
	}
	<-rc.done
}

// send writes one text frame.
func (rc *rawConn) send(text string) {
	rc.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := rc.c.Write(ctx, websocket.MessageText, []byte(text)); err != nil {
		rc.t.Fatalf("write %.200s: %v", text, err)
	}
}

// sendJSON writes v as one text frame.
func (rc *rawConn) sendJSON(v any) {
	rc.t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		rc.t.Fatal(err)
	}
	rc.send(string(b))
}

// next returns the next message, or (nil, false) if none arrives within
// timeout. It fails the test if the connection has ended.
//
// root/portsChanged actions are skipped: the host sends them whenever a
// port opens or closes anywhere on the machine, so no test can expect
// them at a given point.
func (rc *rawConn) next(timeout time.Duration) ([]byte, bool) {
	rc.t.Helper()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		select {
		case m, ok := <-rc.msgs:
			if !ok || m.err != nil {
				if m.err != nil {
					rc.closed = m.err
				}
				rc.t.Fatalf("connection ended while waiting for a message: %v", rc.closed)
			}
			if bytes.Contains(m.text, []byte(`"type":"root/portsChanged"`)) {
				continue
			}
			return m.text, true
		case <-timer.C:
			return nil, false
		}
	}
}

// waitClosed waits until the connection ends and returns the messages
// received meanwhile and the read error.
func (rc *rawConn) waitClosed(timeout time.Duration) ([][]byte, error) {
	rc.t.Helper()
	var got [][]byte
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		select {
		case m, ok := <-rc.msgs:
			if !ok {
				return got, rc.closed
			}
			if m.err != nil {
				rc.closed = m.err
				return got, m.err
			}
			got = append(got, m.text)
		case <-timer.C:
			rc.t.Fatalf("connection still open after %v", timeout)
		}
	}
}

// message is a decoded JSON-RPC message.
type message struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int             `json:"code"`
		Message string          `json:"message"`
		Data    json.RawMessage `json:"data"`
	} `json:"error"`
	raw []byte
}

func decode(t *testing.T, raw []byte) message {
	t.Helper()
	var m message
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("bad JSON from server: %v: %.300s", err, raw)
	}
	m.raw = raw
	return m
}

// channelOf returns params.channel.
func (m message) channelOf() string {
	var p struct {
		Channel string `json:"channel"`
	}
	_ = json.Unmarshal(m.Params, &p)
	return p.Channel
}

// request sends a request with the next id and returns the id.
func (rc *rawConn) request(method string, params any) int {
	rc.t.Helper()
	rc.nextID++
	rc.sendJSON(map[string]any{"jsonrpc": "2.0", "id": rc.nextID, "method": method, "params": params})
	return rc.nextID
}

// response waits for the response with id, passing other messages to
// other (which may be nil).
func (rc *rawConn) response(id int, other func(message)) message {
	rc.t.Helper()
	deadline := time.Now().Add(waitTimeout)
	want := strconv.Itoa(id)
	for {
		raw, ok := rc.next(time.Until(deadline))
		if !ok {
			rc.t.Fatalf("no response to request %d within %v", id, waitTimeout)
		}
		m := decode(rc.t, raw)
		if m.Method == "" && string(m.ID) == want {
			return m
		}
		if other != nil {
			other(m)
		}
	}
}

// call sends a request and waits for its response.
func (rc *rawConn) call(method string, params any) message {
	rc.t.Helper()
	return rc.response(rc.request(method, params), nil)
}

// mustCall is call that fails the test on an error response.
func (rc *rawConn) mustCall(method string, params any) message {
	rc.t.Helper()
	m := rc.call(method, params)
	if m.Error != nil {
		rc.t.Fatalf("%s: error %d %s", method, m.Error.Code, m.Error.Message)
	}
	return m
}

// initialize initializes the connection as clientID.
func (rc *rawConn) initialize(clientID string) message {
	rc.t.Helper()
	return rc.mustCall("initialize", map[string]any{
		"channel": "ahp-root://", "protocolVersions": []string{"0.5.0"}, "clientId": clientID,
	})
}

// waitNotification reads until match returns true for a notification.
func (rc *rawConn) waitNotification(what string, match func(message) bool) message {
	rc.t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		raw, ok := rc.next(time.Until(deadline))
		if !ok {
			rc.t.Fatalf("%s: not received within %v", what, waitTimeout)
		}
		m := decode(rc.t, raw)
		if m.Method != "" && match(m) {
			return m
		}
	}
}

// utf16Bytes is the size of text in the units of windowed delivery:
// two bytes per UTF-16 code unit.
func utf16Bytes(text []byte) int {
	return 2 * len(utf16.Encode([]rune(string(text))))
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// pid (comm) S ...: the state follows the last ')'.
	i := bytes.LastIndexByte(stat, ')')
	return i < 0 || i+2 >= len(stat) || stat[i+2] != 'Z'
}

// exitsWithin reports whether pid has exited (or is a zombie) within d: a
// process SIGKILLed a moment ago may still be on its way out. It waits on
// a pidfd (Linux 5.3+), which becomes readable when the process exits;
// without one it answers at once.
func exitsWithin(pid int, d time.Duration) bool {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return !alive(pid) // ESRCH: gone
	}
	defer unix.Close(fd)
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	deadline := time.Now().Add(d)
	for alive(pid) {
		left := time.Until(deadline)
		if left <= 0 {
			return false
		}
		if _, err := unix.Poll(fds, int(left.Milliseconds())+1); err != nil && err != unix.EINTR {
			return !alive(pid)
		}
		if fds[0].Revents&unix.POLLIN != 0 {
			return true
		}
	}
	return true
}

// freePort returns a loopback port nothing listens on (it was free a
// moment ago).
func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}
