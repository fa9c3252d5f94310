package tests

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// forwardedPort returns the local port sidecar forward says it forwards.
func forwardedPort(t *testing.T, p *proc) string {
	t.Helper()
	i := p.stderr.waitFor(t, "the forward's port", 0, "sidecar: forwarding 127.0.0.1:")
	return regexp.MustCompile(`^\d+`).FindString(p.stderr.String()[i:])
}

// TestRolesCLI (issue 32): the CLI as each role, over plain /ahp and
// transport-io (WebSocket): what a user may (run, cp both ways, forward
// -L within the role's tcp_allow, -R, kill her own) and may not (kill
// or share the owner's terminal, forward outside her tcp_allow), and
// what a viewer may (ls, top) and may not (run, cp, forward -L and -R,
// kill, share, the daemon's logs), each refusal said with the -32009
// message naming the permission, and the exit status.
func TestRolesCLI(t *testing.T) {
	t.Parallel()
	allowed, other := echoListener(t), echoListener(t)
	dir := t.TempDir()
	src := filepath.Join(dir, "src.txt")
	if err := os.WriteFile(src, []byte("hello roles\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := startServerRoles(t, fmt.Sprintf("tcp {\n  allow = [\"127.0.0.1/32\"]\n}\nrole \"user\" {\n  tcp_allow = [\"127.0.0.1:%d\"]\n}\nfiles {\n  read = [%q]\n  write = [%q]\n}\n", allowed, dir, dir))
	olga := s.dialMC(t, "ahp", olgaTok, "o1")
	olga.mustCall("createTerminal", map[string]any{"channel": "ahp-terminal:/olgas", "command": []string{"sleep", "300"}})

	for _, tr := range []struct{ name, url string }{{"ahp", s.url}, {"tio", "https://" + s.host}} {
		t.Run(tr.name, func(t *testing.T) {
			url := tr.url
			flags := func(tok string) []string {
				f := []string{"--token", tok, "--cert-hash", s.hash}
				if tr.name == "tio" {
					f = append(f, "--transport", "websocket")
				}
				return f
			}
			run := func(tok string, args ...string) (string, string, int) {
				return s.run(t, append(append(args[:1:1], flags(tok)...), args[1:]...)...)
			}
			expect := func(what string, gotCode int, gotErr string, wantCode int, wantErr string) {
				t.Helper()
				if gotCode != wantCode || !strings.Contains(gotErr, wantErr) {
					t.Errorf("%s: exit %d, stderr %q; want %d and %q", what, gotCode, gotErr, wantCode, wantErr)
				}
			}

			// ulla, a user.
			out, errOut, code := run(ullaTok, "run", url, "--", "sh", "-c", "echo $((6*7))")
			if code != 0 || out != "42\n" {
				t.Errorf("ulla's run: exit %d, stdout %q, stderr %q", code, out, errOut)
			}
			up := filepath.Join(dir, "up-"+tr.name)
			_, errOut, code = run(ullaTok, "cp", src, url+":"+up)
			if b, _ := os.ReadFile(up); code != 0 || string(b) != "hello roles\n" {
				t.Errorf("ulla's cp to the host: exit %d, %q, stderr %q", code, b, errOut)
			}
			down := filepath.Join(t.TempDir(), "down")
			_, errOut, code = run(ullaTok, "cp", url+":"+src, down)
			if b, _ := os.ReadFile(down); code != 0 || string(b) != "hello roles\n" {
				t.Errorf("ulla's cp from the host: exit %d, %q, stderr %q", code, b, errOut)
			}
			_, errOut, code = run(ullaTok, "kill", url, "olgas")
			expect("ulla kills olga's terminal", code, errOut, 255, "sidecar: olgas: permission denied: terminal.kill: ahp-terminal:/olgas is held by olga; only its holder or an owner may; ulla is user (code -32009)")
			_, errOut, code = run(ullaTok, "share", url, "olgas", "--with", "ulla", "--read-write")
			expect("ulla shares olga's terminal", code, errOut, 255, "sidecar: olgas: permission denied: terminal.share: ahp-terminal:/olgas is held by olga; only its holder or an owner may; ulla is user (code -32009)")

			fwd := start(t, append(append([]string{"forward"}, flags(ullaTok)...), url, "-L", fmt.Sprintf("127.0.0.1:0:127.0.0.1:%d", allowed), "-L", fmt.Sprintf("127.0.0.1:0:127.0.0.1:%d", other))...)
			checkNarrowedForward(t, fwd, "ulla", allowed, other)
			fwd.stderr.waitFor(t, "ulla's refused forward", 0, fmt.Sprintf("open failed: connect to 127.0.0.1:%d not allowed by policy: permission denied: tcp.open for role user is limited to its tcp_allow (127.0.0.1:%d)", other, allowed))
			rfwd := start(t, append(append([]string{"forward"}, flags(ullaTok)...), url, "-R", fmt.Sprintf("127.0.0.1:0:127.0.0.1:%d", allowed))...)
			rfwd.stderr.waitFor(t, "ulla's -R", 0, "on the host -> 127.0.0.1:")

			// vera, a viewer.
			if out, errOut, code := run(veraTok, "ls", url); code != 0 || !strings.Contains(out, "TERMINAL") {
				t.Errorf("vera's ls: exit %d\n%s%s", code, out, errOut)
			}
			if out, errOut, code := run(veraTok, "top", url, "--once"); code != 0 || !strings.Contains(out, "PID") {
				t.Errorf("vera's top --once: exit %d\n%s%s", code, tail(out, 500), errOut)
			}
			_, errOut, code = run(veraTok, "run", url, "--", "echo", "hi")
			expect("vera's run", code, errOut, 255, "sidecar: cannot start echo: permission denied: terminal.create needs role user or owner; vera is viewer (code -32009)")
			_, errOut, code = run(veraTok, "cp", url+":"+src, filepath.Join(t.TempDir(), "x"))
			expect("vera's cp from the host", code, errOut, 1, "sidecar: permission denied: files.read needs role user or owner; vera is viewer\n")
			_, errOut, code = run(veraTok, "cp", src, url+":"+filepath.Join(dir, "vera-"+tr.name))
			expect("vera's cp to the host", code, errOut, 1, "permission denied: files.")
			if _, err := os.Stat(filepath.Join(dir, "vera-"+tr.name)); err == nil {
				t.Error("vera's cp wrote the file")
			}
			_, errOut, code = run(veraTok, "kill", url, "olgas")
			expect("vera's kill", code, errOut, 255, "sidecar: olgas: permission denied: terminal.kill needs role user or owner; vera is viewer (code -32009)")
			_, errOut, code = run(veraTok, "share", url, "olgas", "--with", "vera", "--read-only")
			expect("vera's share", code, errOut, 255, "sidecar: olgas: permission denied: terminal.share needs role user or owner; vera is viewer (code -32009)")
			_, errOut, code = run(veraTok, "logs", url, "--audit")
			expect("vera's logs --audit", code, errOut, 1, "sidecar: permission denied: audit.read needs role owner; vera is viewer\n")
			vfwd := start(t, append(append([]string{"forward"}, flags(veraTok)...), url, "-L", fmt.Sprintf("127.0.0.1:0:127.0.0.1:%d", allowed))...)
			if c, err := net.Dial("tcp", "127.0.0.1:"+forwardedPort(t, vfwd)); err == nil {
				_ = c.SetDeadline(time.Now().Add(waitTimeout))
				got, _ := io.ReadAll(c)
				_ = c.Close()
				if len(got) != 0 {
					t.Errorf("vera's forward carried %q", got)
				}
			}
			vfwd.stderr.waitFor(t, "vera's refused forward", 0, "open failed: permission denied: tcp.open needs role user or owner; vera is viewer")
			vrfwd := start(t, append(append([]string{"forward"}, flags(veraTok)...), url, "-R", fmt.Sprintf("127.0.0.1:0:127.0.0.1:%d", allowed))...)
			vrfwd.stderr.waitFor(t, "vera's refused -R", 0, fmt.Sprintf("sidecar: -R 127.0.0.1:0:127.0.0.1:%d: refused by the host: permission denied: tunnel.listen needs role user or owner; vera is viewer", allowed))
		})
	}
}

// checkNarrowedForward checks fwd, a sidecar forward of who with two -L
// (to allowed, an echo server within its tcp_allow, and to other, one
// outside it): through the first "ping" comes back, through the second
// nothing (the host refuses the connection).
func checkNarrowedForward(t *testing.T, fwd *proc, who string, allowed, other int) {
	t.Helper()
	text, _ := fwd.stderr.waitMatch(waitTimeout, func(s string) bool { return strings.Count(s, "sidecar: forwarding 127.0.0.1:") == 2 })
	ports := regexp.MustCompile(`forwarding 127\.0\.0\.1:(\d+) -> 127\.0\.0\.1:(\d+)`).FindAllStringSubmatch(text, -1)
	if len(ports) != 2 {
		t.Fatalf("%s's forward:\n%s", who, text)
	}
	for _, p := range ports {
		c, err := net.Dial("tcp", "127.0.0.1:"+p[1])
		if err != nil && p[2] == fmt.Sprint(other) && errors.Is(err, syscall.ECONNRESET) {
			// The forward reset the refused connection before the
			// dial looked at its socket: nothing carried either.
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(waitTimeout))
		_, _ = c.Write([]byte("ping"))
		got, _ := io.ReadAll(io.LimitReader(c, 4))
		_ = c.Close()
		if p[2] == fmt.Sprint(allowed) && string(got) != "ping" {
			t.Errorf("%s's forward to its tcp_allow echoed %q", who, got)
		}
		if p[2] == fmt.Sprint(other) && len(got) != 0 {
			t.Errorf("%s's forward outside its tcp_allow carried %q", who, got)
		}
	}
}
