package tests

import (
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// startServerAt is startServer listening at addr (a port picked by the
// test, so that it can hold the port's UDP side first).
func startServerAt(t *testing.T, addr string) *server {
	t.Helper()
	dir := t.TempDir()
	cfgFile := filepath.Join(dir, "sidecar.hcl")
	if err := os.WriteFile(cfgFile, []byte(terminalConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	token := "tok-" + time.Now().Format("150405.000000000")
	p := start(t, "serve", "--config", cfgFile, "--listen", addr, "--token", token, "--state-dir", filepath.Join(dir, "state"))
	var m []string
	text, ok := p.stdout.waitMatch(waitTimeout, func(text string) bool {
		m = attachLine.FindStringSubmatch(text)
		return m != nil
	})
	if !ok {
		t.Fatalf("sidecar serve printed no attach line within %v\nstdout:\n%s\nstderr:\n%s", waitTimeout, text, tail(p.stderr.String(), 3000))
	}
	return &server{p: p, url: m[1], host: m[2], token: token, hash: m[4], config: cfgFile}
}

// TestCLIAutoUDPDropped: `sidecar ls https://HOST:PORT` with auto, where
// the QUIC port takes packets and never answers (a socket of the test
// holds it: a path that drops UDP), connects over WebSocket in well under
// a second (it took 3 s), remembers that, and goes straight to WebSocket
// next time; a wrong memory (WebTransport) still connects, and is
// corrected.
func TestCLIAutoUDPDropped(t *testing.T) {
	t.Parallel()
	addr := freePort(t)
	udpAddr, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	udp, err := net.ListenUDP("udp", udpAddr)
	if err != nil {
		t.Skipf("cannot hold UDP %s: %v", addr, err)
	}
	defer udp.Close()
	s := startServerAt(t, addr)
	cache := t.TempDir()
	memFile := filepath.Join(cache, "sidecar", "transports.json")
	origin := "https://" + addr
	ls := func(what string) time.Duration {
		t.Helper()
		p := startCmdEnv(t, "XDG_CACHE_HOME="+cache, append([]string{"ls", origin + "/"}, s.connArgs()...)...)
		start := time.Now()
		code := p.wait(t, waitTimeout)
		took := time.Since(start)
		if code != 0 {
			t.Fatalf("%s: ls exit %d, stderr %s", what, code, p.stderr.String())
		}
		t.Logf("%s: sidecar ls took %v", what, took)
		if took >= time.Second {
			t.Errorf("%s: sidecar ls took %v, want under 1 s", what, took)
		}
		return took
	}
	remembered := func() string {
		t.Helper()
		b, err := os.ReadFile(memFile)
		if err != nil {
			t.Fatalf("transport memory: %v", err)
		}
		var f struct {
			Origins map[string]struct{ Transport string }
		}
		if err := json.Unmarshal(b, &f); err != nil {
			t.Fatalf("transport memory %s: %v", b, err)
		}
		return f.Origins[origin].Transport
	}
	ls("first, nothing remembered")
	if got := remembered(); got != "websocket" {
		t.Fatalf("remembered %q for %s, want websocket", got, origin)
	}
	ls("second, WebSocket remembered")
	// A memory from a day when UDP got through: WebTransport is tried
	// first, the WebSocket mapping 250 ms later.
	wrong := `{"version":1,"origins":{"` + origin + `":{"transport":"webtransport","at":"2026-01-01T00:00:00Z"}}}`
	if err := os.WriteFile(memFile, []byte(wrong), 0o600); err != nil {
		t.Fatal(err)
	}
	ls("WebTransport remembered, wrongly")
	if got := remembered(); got != "websocket" {
		t.Errorf("remembered %q after the wrong memory failed, want websocket", got)
	}
}

// startCmdEnv starts the sidecar binary with args, with env (KEY=VALUE)
// added to cleanEnv's (a later entry wins).
func startCmdEnv(t *testing.T, env string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(sidecarBin, args...)
	cmd.Env = append(cleanEnv(), env)
	return startCmd(t, cmd, nil)
}
