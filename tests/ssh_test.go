package tests

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sidecar-dev/sidecar/tests/fault"
)

// OpenSSH through `sidecar connect` as its ProxyCommand (issue 29): a
// private sshd on a loopback port, with its own config, host key and
// authorized key in the test's directory (never /etc/ssh, never port
// 22), reached by ssh and scp through the daemon.

// sshTools returns the paths of sshd, ssh, scp and ssh-keygen, or skips
// (fails under CI=true, as the browser tests do without chromium).
func sshTools(t *testing.T) (sshd, ssh, scp, keygen string) {
	t.Helper()
	paths := []string{"/usr/sbin/sshd", "ssh", "scp", "ssh-keygen"}
	for i, p := range paths {
		found, err := exec.LookPath(p)
		if err != nil {
			msg := fmt.Sprintf("no %s (apt-get install openssh-server openssh-client): %v", p, err)
			if os.Getenv("CI") == "true" {
				t.Fatal(msg)
			}
			t.Skip(msg)
		}
		paths[i] = found
	}
	return paths[0], paths[1], paths[2], paths[3]
}

// sshServer is a private sshd.
type sshServer struct {
	port string
	key  string // the client's private key, authorized
	user string
}

// startSSHD starts sshd -D -e on a free loopback port with a config,
// host key and authorized key of its own in a temporary directory, and
// waits until it listens. It is stopped at cleanup.
func startSSHD(t *testing.T, sshd, keygen string) *sshServer {
	t.Helper()
	u, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		// sshd run by root needs its privilege separation directory,
		// which the package's service makes at start (RuntimeDirectory):
		// an empty directory, made here the same way where it is missing.
		if _, err := os.Stat("/run/sshd"); os.IsNotExist(err) {
			if err := os.MkdirAll("/run/sshd", 0o755); err != nil {
				t.Skipf("sshd as root needs /run/sshd: %v", err)
			}
		}
	}
	dir := t.TempDir()
	for _, k := range []string{"host_key", "id"} {
		out, err := exec.Command(keygen, "-q", "-t", "ed25519", "-N", "", "-C", "sidecar-test", "-f", filepath.Join(dir, k)).CombinedOutput()
		if err != nil {
			t.Fatalf("ssh-keygen: %v\n%s", err, out)
		}
	}
	pub, err := os.ReadFile(filepath.Join(dir, "id.pub"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "authorized_keys"), pub, 0o600); err != nil {
		t.Fatal(err)
	}
	addr := freePort(t)
	port := addr[strings.LastIndexByte(addr, ':')+1:]
	conf := filepath.Join(dir, "sshd_config")
	cfg := fmt.Sprintf(`Port %s
ListenAddress 127.0.0.1
HostKey %s
AuthorizedKeysFile %s
PidFile none
StrictModes no
UsePAM no
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
Subsystem sftp internal-sftp
LogLevel VERBOSE
`, port, filepath.Join(dir, "host_key"), filepath.Join(dir, "authorized_keys"))
	if err := os.WriteFile(conf, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(sshd, "-f", conf, "-D", "-e")
	p := startCmd(t, cmd, nil)
	p.stderr.waitFor(t, "sshd listening", 0, "Server listening on 127.0.0.1 port "+port)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("sshd stderr:\n%s", tail(p.stderr.String(), 4000))
		}
	})
	return &sshServer{port: port, key: filepath.Join(dir, "id"), user: u.Username}
}

// TestSSHThroughConnect: `ssh -o ProxyCommand='sidecar connect URL
// %h:%p'` runs a command on the sshd through the daemon, the token from
// --token-file and the pin from $SIDECAR_CERT_HASH; scp copies 8 MiB up
// and 8 MiB down through it, SHA-256 compared; and sidecar connect says
// nothing on ssh's standard error (not even when ssh ends it with SIGHUP).
func TestSSHThroughConnect(t *testing.T) {
	t.Parallel()
	sshd, ssh, scp, keygen := sshTools(t)
	srv := startSSHD(t, sshd, keygen)
	s := startServer(t, "")
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(s.token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	common := []string{"-F", "/dev/null",
		"-o", fmt.Sprintf("ProxyCommand=%s connect --token-file %s %s %%h:%%p", sidecarBin, tokenFile, s.url),
		"-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "BatchMode=yes",
		"-o", "IdentitiesOnly=yes", "-o", "LogLevel=ERROR", "-i", srv.key}
	run := func(what, prog string, args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 2*waitTimeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, prog, args...)
		cmd.Env = append(cleanEnv(), "SIDECAR_CERT_HASH="+s.hash)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("%s: %v\nstdout:\n%s\nstderr:\n%s", what, err, tail(stdout.String(), 2000), tail(stderr.String(), 2000))
		}
		if strings.Contains(stderr.String(), "sidecar:") {
			t.Errorf("%s: sidecar connect wrote to ssh's standard error:\n%s", what, stderr.String())
		}
		return stdout.String()
	}
	target := srv.user + "@127.0.0.1"
	if out := run("ssh", ssh, append(common, "-p", srv.port, target, "echo through-$((6*7))")...); out != "through-42\n" {
		t.Fatalf("ssh printed %q, want %q", out, "through-42\n")
	}
	run("ssh true", ssh, append(common, "-p", srv.port, target, "true")...)

	const size = 8 << 20
	rng := rand.NewChaCha8([32]byte{29, 8})
	up, down := make([]byte, size), make([]byte, size)
	_, _ = rng.Read(up)
	_, _ = rng.Read(down)
	local, remote := filepath.Join(dir, "up"), filepath.Join(dir, "down")
	if err := os.WriteFile(local, up, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(remote, down, 0o600); err != nil {
		t.Fatal(err)
	}
	// The sshd is on this machine: "remote" paths are in dir too.
	run("scp up", scp, append(common, "-P", srv.port, local, target+":"+filepath.Join(dir, "up.copy"))...)
	run("scp down", scp, append(common, "-P", srv.port, target+":"+remote, filepath.Join(dir, "down.copy"))...)
	for _, c := range []struct {
		path string
		want []byte
	}{{filepath.Join(dir, "up.copy"), up}, {filepath.Join(dir, "down.copy"), down}} {
		got, err := os.ReadFile(c.path)
		if err != nil {
			t.Fatal(err)
		}
		if sha256.Sum256(got) != sha256.Sum256(c.want) {
			t.Errorf("%s: %d bytes, SHA-256 differs from the %d sent", filepath.Base(c.path), len(got), len(c.want))
		}
	}
}

// TestSSHSessionSurvivesCuts: an ssh session through `sidecar connect`
// (its remote command cat, an echo) goes on across 3 cuts of the link to
// the daemon, each in the middle of a megabyte on its way up: every
// chunk comes back whole, and the session ends as it should (ssh exits 0)
// once its input ends. Plain ssh over the cut link would have died.
func TestSSHSessionSurvivesCuts(t *testing.T) {
	t.Parallel()
	sshd, ssh, _, keygen := sshTools(t)
	srv := startSSHD(t, sshd, keygen)
	s := startServer(t, "")
	relay, url := relayed(t, s)
	cmd := exec.Command(ssh, "-F", "/dev/null",
		"-o", fmt.Sprintf("ProxyCommand=%s connect -v %s %%h:%%p", sidecarBin, url),
		"-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "BatchMode=yes",
		"-o", "IdentitiesOnly=yes", "-o", "LogLevel=ERROR", "-i", srv.key,
		"-p", srv.port, srv.user+"@127.0.0.1", "cat")
	cmd.Env = append(cleanEnv(), "SIDECAR_TOKEN="+s.token, "SIDECAR_CERT_HASH="+s.hash)
	p, inW, outR := startPiped(t, cmd)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("ssh stderr:\n%s", tail(p.stderr.String(), 4000))
		}
	})
	rng := rand.NewChaCha8([32]byte{29, 3})
	chunk := make([]byte, 1<<20)
	echo := func(i int) {
		t.Helper()
		_, _ = rng.Read(chunk)
		werr := make(chan error, 1)
		go func() {
			_, err := inW.Write(chunk)
			werr <- err
		}()
		back := make([]byte, len(chunk))
		if _, err := io.ReadFull(outR, back); err != nil || !bytes.Equal(back, chunk) {
			t.Fatalf("chunk %d: echoed back %v, equal %v", i, err, bytes.Equal(back, chunk))
		}
		if err := <-werr; err != nil {
			t.Fatal(err)
		}
	}
	echo(0)
	pos := p.stderr.waitFor(t, "connect's connected line", 0, "sidecar: connected to "+url)
	for i := 1; i <= 3; i++ {
		relay.CutAfter(int64(64<<10*i), fault.Up)
		echo(i)
		pos = p.stderr.waitFor(t, fmt.Sprintf("resume %d", i), pos, "sidecar: resumed\n")
	}
	echo(4)
	_ = inW.Close()
	if rest, err := io.ReadAll(outR); err != nil || len(rest) != 0 {
		t.Fatalf("after the end of input: %d bytes more, %v", len(rest), err)
	}
	if code := p.wait(t, waitTimeout); code != 0 {
		t.Fatalf("ssh exited %d, want 0", code)
	}
}
