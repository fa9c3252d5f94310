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
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

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
// --token-file and the pin from $SIDECAR_CERT_HASH; scp copies 64 MiB up
// and 64 MiB down through it, SHA-256 compared; and sidecar connect says
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

	const size = 64 << 20
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

// sshCommon is the ssh options of a test: no user config, the private
// sshd's key, a ProxyCommand of proxy (%h and %p as ssh gives them).
func sshCommon(srv *sshServer, proxy string) []string {
	return []string{"-F", "/dev/null",
		"-o", "ProxyCommand=" + proxy,
		"-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "BatchMode=yes",
		"-o", "IdentitiesOnly=yes", "-o", "LogLevel=ERROR", "-i", srv.key}
}

// TestRsyncThroughConnect: rsync -a over ssh through `sidecar connect`
// copies a tree (nested directories, 300 files of assorted sizes, modes
// 0600 to 0755, a symbolic link, an empty directory) to the sshd and
// back; both copies are the same as the original (diff -r, and each
// entry's mode, size and link target), and a second rsync finds nothing
// to send.
func TestRsyncThroughConnect(t *testing.T) {
	t.Parallel()
	sshd, _, _, keygen := sshTools(t)
	rsync, err := exec.LookPath("rsync")
	if err != nil {
		msg := fmt.Sprintf("no rsync (apt-get install rsync): %v", err)
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	srv := startSSHD(t, sshd, keygen)
	s := startServer(t, "")
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	rng := rand.New(rand.NewPCG(29, 300))
	modes := []os.FileMode{0o600, 0o644, 0o640, 0o755, 0o700}
	for i := range 300 {
		sub := filepath.Join(src, fmt.Sprintf("d%d", i%7), fmt.Sprintf("e%d", i%3))
		if err := os.MkdirAll(sub, 0o755); err != nil {
			t.Fatal(err)
		}
		data := make([]byte, rng.IntN(64<<10))
		for j := range data {
			data[j] = byte(rng.UintN(256))
		}
		name := filepath.Join(sub, fmt.Sprintf("f%03d", i))
		if err := os.WriteFile(name, data, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(name, modes[i%len(modes)]); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("d1/e1/f001", filepath.Join(src, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(src, "empty"), 0o750); err != nil {
		t.Fatal(err)
	}
	ssh := strings.Join(append([]string{"ssh"}, quoteAll(sshCommon(srv, fmt.Sprintf("%s connect %s %%h:%%p", sidecarBin, s.url)))...), " ")
	target := srv.user + "@127.0.0.1:"
	rsyncRun := func(what string, args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 2*waitTimeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, rsync, append([]string{"-a", "--stats", "-e", ssh + " -p " + srv.port}, args...)...)
		cmd.Env = append(cleanEnv(), "SIDECAR_TOKEN="+s.token, "SIDECAR_CERT_HASH="+s.hash)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", what, err, tail(string(out), 3000))
		}
		return string(out)
	}
	// The sshd is on this machine: the "remote" tree is in dir too.
	rsyncRun("rsync up", src+"/", target+filepath.Join(dir, "there"))
	rsyncRun("rsync down", target+filepath.Join(dir, "there")+"/", filepath.Join(dir, "back"))
	for _, d := range []string{"there", "back"} {
		if out, err := exec.Command("diff", "-r", "--no-dereference", src, filepath.Join(dir, d)).CombinedOutput(); err != nil {
			t.Errorf("diff -r src %s: %v\n%s", d, err, tail(string(out), 2000))
		}
		if want, got := treeEntries(t, src), treeEntries(t, filepath.Join(dir, d)); want != got {
			t.Errorf("%s: modes, sizes or links differ from the original's:\n%s", d, firstLineDiff(want, got))
		}
	}
	if out := rsyncRun("rsync again", src+"/", target+filepath.Join(dir, "there")); !strings.Contains(out, "Number of regular files transferred: 0") {
		t.Errorf("a second rsync sent files again:\n%s", tail(out, 1500))
	}
}

// quoteAll quotes each argument for rsync's -e, which splits its value
// as a shell would.
func quoteAll(args []string) []string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return q
}

// treeEntries lists a tree's entries, one line each: the path, its type
// and mode, a file's size, a link's target.
func treeEntries(t *testing.T, root string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		fmt.Fprintf(&b, "%s %v", rel, fi.Mode())
		switch {
		case fi.Mode()&os.ModeSymlink != 0:
			target, err := os.Readlink(path)
			if err != nil {
				return err
			}
			fmt.Fprintf(&b, " -> %s", target)
		case fi.Mode().IsRegular():
			fmt.Fprintf(&b, " %d", fi.Size())
		}
		b.WriteByte('\n')
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// firstLineDiff is the first line where two listings differ.
func firstLineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := range max(len(w), len(g)) {
		var a, b string
		if i < len(w) {
			a = w[i]
		}
		if i < len(g) {
			b = g[i]
		}
		if a != b {
			return fmt.Sprintf("line %d: want %q, got %q", i+1, a, b)
		}
	}
	return ""
}

// TestSSHInteractiveSurvivesCutsAndBlackHole: an interactive ssh session
// (a shell on a PTY, ssh -tt in a terminal) through `sidecar connect`
// goes on across 3 cuts of the link to the daemon and a 40 s black hole
// (a laptop asleep: nothing gets through, nothing is reset): a command
// typed before the hole and its output after it are there once, the
// output the shell wrote meanwhile whole, and the session ends as it
// should (exit, ssh exits 0). Plain ssh over that link would have died
// at the first cut.
func TestSSHInteractiveSurvivesCutsAndBlackHole(t *testing.T) {
	t.Parallel()
	sshd, ssh, _, keygen := sshTools(t)
	srv := startSSHD(t, sshd, keygen)
	s := startServer(t, "")
	relay, url := relayed(t, s)
	cmd := exec.Command(ssh, append(sshCommon(srv, fmt.Sprintf("%s connect -v %s %%h:%%p", sidecarBin, url)),
		"-tt", "-p", srv.port, srv.user+"@127.0.0.1", `env PS1='SSHPROMPT> ' bash --norc --noprofile -i`)...)
	cmd.Env = append(cleanEnv(), "SIDECAR_TOKEN="+s.token, "SIDECAR_CERT_HASH="+s.hash)
	p := startCmdInPTY(t, cmd, 100, 30)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the terminal:\n%s", tail(p.out.String(), 4000))
		}
	})
	p.out.waitFor(t, "connect's connected line", 0, "sidecar: connected to "+url)
	pos := p.out.waitFor(t, "prompt", 0, "SSHPROMPT> ")
	for i := 1; i <= 3; i++ {
		relay.Cut()
		pos = p.out.waitFor(t, fmt.Sprintf("resume %d", i), pos, "sidecar: resumed")
		p.typeText(t, fmt.Sprintf("echo CUT-$((%d*11))\r", i))
		pos = p.out.waitFor(t, fmt.Sprintf("output after cut %d", i), pos, fmt.Sprintf("CUT-%d\r\n", i*11))
	}
	relay.Stall(true)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	hole := time.Now()
	// Typed into the hole: it waits in connect (and the shell's output on
	// the host), none of it lost.
	p.typeText(t, "seq 1 3000; echo AFTER-$((2+2))\r")
	<-time.After(40*time.Second - time.Since(hole)) // the hole's length is what is tested, not a synchronization
	if err := ctx.Err(); err != nil {
		t.Fatal(err)
	}
	relay.Stall(false)
	end := p.out.waitFor(t, "output after the hole", pos, "\r\nAFTER-4\r\n")
	// The remote shell's output, its lines ending in CR LF (the remote
	// PTY's), with connect's own lines (LF: ssh's terminal is raw)
	// taken out: 1 to 3000, each once, in order, then AFTER-4.
	out := regexp.MustCompile(`sidecar: [^\r\n]*\n`).ReplaceAllString(p.out.String()[pos:end], "")
	i := strings.Index(out, "1\r\n2\r\n3\r\n")
	if i < 0 {
		t.Fatalf("after the hole: no seq output; got: %q", tail(out, 600))
	}
	lines := strings.Split(out[i:], "\r\n")
	for n := 1; n <= 3001; n++ {
		want := strconv.Itoa(n)
		if n == 3001 {
			want = "AFTER-4"
		}
		if n > len(lines) || lines[n-1] != want {
			t.Fatalf("after the hole: line %d of the output is not %q; got: %q", n, want, tail(out, 600))
		}
	}
	p.typeText(t, "exit\r")
	if code := p.wait(t); code != 0 {
		t.Fatalf("ssh exited %d, want 0", code)
	}
}
