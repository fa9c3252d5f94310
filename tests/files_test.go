package tests

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sidecar-dev/sidecar/tests/fault"
	"github.com/sidecar-dev/sidecar/transportio"
)

// cpFileSize is the file each way of TestCPThroughCuts (per transport)
// and TestCPThroughBlackHole: 24 MiB, so that each transport's up and
// down through 10 faults each stays within about 20 s under -race on two
// cores (the 256 MiB is a benchmark size, not a unit of CI time;
// the path is the same at any size, the faults are what is tested).
const cpFileSize = 24 << 20

// cpFaults is how many faults each copy of TestCPThroughCuts goes
// through.
const cpFaults = 10

func fileSHA(t *testing.T, p string) string {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

func writeRandom(t *testing.T, p string, n int, seed uint64) {
	t.Helper()
	b := make([]byte, n+8)
	r := rand.New(rand.NewPCG(seed, seed))
	for i := 0; i < n; i += 8 { // 8 bytes a draw: 256 MiB in a fraction of a second, even under -race
		binary.LittleEndian.PutUint64(b[i:], r.Uint64())
	}
	b = b[:n]
	if err := os.WriteFile(p, b, 0o640); err != nil {
		t.Fatal(err)
	}
}

// faulter is a relay's fault for cpThroughFaults: traffic counts what
// went through (bytes or datagrams, both ways), fault makes one.
type faulter struct {
	traffic func() int64
	fault   func(t *testing.T)
	// every is the traffic between two faults for a file of
	// cpFileSize, so that cpFaults fit in one copy.
	every int64
}

// tcpCuts cuts every connection through r.
func tcpCuts(r *fault.TCP) faulter {
	return faulter{
		traffic: func() int64 { return r.Bytes(fault.Up) + r.Bytes(fault.Down) },
		fault:   func(*testing.T) { r.Cut() },
		every:   cpFileSize / (2*cpFaults + 4),
	}
}

// udpFaults drops every datagram through u until 20 more were dropped,
// then moves the relay to a new port (the path changes).
func udpFaults(u *fault.UDP) faulter {
	dropped := func() int64 { return u.Dropped(fault.Up) + u.Dropped(fault.Down) }
	return faulter{
		traffic: func() int64 { return u.Datagrams(fault.Up) + u.Datagrams(fault.Down) },
		fault: func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
			defer cancel()
			u.Drop(true)
			from := dropped()
			err := u.Await(ctx, func() bool { return dropped() >= from+20 })
			u.Cut()
			u.Drop(false)
			if err != nil {
				t.Errorf("no datagram to drop: %v", err)
			}
		},
		// Up to 1,400 payload bytes a datagram one way (and fewer ACKs
		// the other): at least cpFaults+4 intervals in one copy.
		every: cpFileSize / 1400 / (cpFaults + 4),
	}
}

// faultsWhileRunning makes a fault each time f.every more traffic went
// through, until p exits or max were made; it returns how many.
func faultsWhileRunning(t *testing.T, f faulter, p *proc, max int) int {
	made := 0
	next := f.traffic() + f.every
	for made < max {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		for ctx.Err() == nil && f.traffic() < next {
			select {
			case <-p.done:
				cancel()
				return made
			case <-ctx.Done():
			case <-time.After(2 * time.Millisecond): // polled: the counters have no wake-up shared by both relays
			}
		}
		cancel()
		select {
		case <-p.done:
			return made
		default:
		}
		if f.traffic() >= next {
			f.fault(t)
			made++
			next = f.traffic() + f.every
		}
	}
	return made
}

// cpThroughFaults uploads a file with sidecar cp (args before the
// arguments, url the remote side's) while f makes cpFaults faults, then
// downloads it the same way; both copies are exact (SHA-256), keep mode
// and mtime, and no partial file is left.
func cpThroughFaults(t *testing.T, url string, args []string, f faulter) {
	cpThroughFaultsSize(t, url, args, f, cpFileSize)
}

// cpThroughFaultsSize is cpThroughFaults with a file of size bytes (the
// faults spread over it alike).
func cpThroughFaultsSize(t *testing.T, url string, args []string, f faulter, size int) {
	f.every = f.every * int64(size) / cpFileSize
	limit := 60 * time.Second
	if size > cpFileSize {
		limit = 240 * time.Second
	}
	dir := t.TempDir()
	local := filepath.Join(dir, "local.bin")
	writeRandom(t, local, size, 1)
	mt := time.Unix(1_700_000_000, 123_000_000)
	if err := os.Chtimes(local, mt, mt); err != nil {
		t.Fatal(err)
	}
	want := fileSHA(t, local)
	remote := filepath.Join(dir, "remote.bin")
	back := filepath.Join(dir, "back.bin")
	for _, c := range []struct{ name, from, to, got string }{
		{"upload", local, url + ":" + remote, remote},
		{"download", url + ":" + remote, back, back},
	} {
		begin := time.Now()
		p := start(t, append([]string{"cp", c.from, c.to}, args...)...)
		faults := faultsWhileRunning(t, f, p, cpFaults)
		if code := p.wait(t, limit); code != 0 {
			t.Fatalf("cp %s exited %d\nstderr:\n%s", c.name, code, tail(p.stderr.String(), 3000))
		}
		t.Logf("%s: %d faults, %d reconnects, %v", c.name, faults, strings.Count(p.stderr.String(), "sidecar: resumed"), time.Since(begin).Round(time.Millisecond))
		if faults < cpFaults {
			t.Errorf("%s: only %d of %d faults fell in the copy", c.name, faults, cpFaults)
		}
		if got := fileSHA(t, c.got); got != want {
			t.Fatalf("%s: SHA-256 %s, want %s", c.name, got, want)
		}
		if !strings.Contains(p.stderr.String(), "copied 1 file, ") {
			t.Errorf("%s: no summary line:\n%s", c.name, p.stderr.String())
		}
	}
	for _, p := range []string{remote, back} {
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o640 || !st.ModTime().Equal(mt) {
			t.Errorf("%s: mode %v mtime %v, want 0640 and %v", p, st.Mode().Perm(), st.ModTime(), mt)
		}
	}
	if m, _ := filepath.Glob(filepath.Join(dir, "*.sidecar-part")); len(m) > 0 {
		t.Errorf("partial files left: %v", m)
	}
}

// TestCPThroughCuts: sidecar cp uploads and downloads a file through 10
// faults each way, on every transport: plain AHP and transport-io over
// WebSocket through a TCP relay that cuts every connection, WebTransport
// through a UDP relay that drops datagrams and changes the path.
func TestCPThroughCuts(t *testing.T) {
	s := startServer(t, "")
	t.Run("ahp", func(t *testing.T) {
		r, url := relayed(t, s)
		cpThroughFaults(t, url, s.connArgs(), tcpCuts(r))
	})
	t.Run("transport-io WebSocket", func(t *testing.T) {
		r, _ := relayed(t, s)
		cpThroughFaults(t, "https://"+r.Addr()+"/transport-io", append(s.connArgs(), "--transport", "websocket"), tcpCuts(r))
	})
	t.Run("WebTransport", func(t *testing.T) {
		tcp, udp, err := fault.NewPair(s.host)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = tcp.Close(); _ = udp.Close() })
		cpThroughFaults(t, "https://"+tcp.Addr()+"/transport-io", append(s.connArgs(), "--transport", "webtransport"), udpFaults(udp))
	})
}

// cpLargeSize is TestCPLargeThroughCuts' file: the 256 MiB.
const cpLargeSize = 256 << 20

// TestCPLargeThroughCuts is TestCPThroughCuts with a 256 MiB file each
// way on every transport: a long transfer (many windows, the writeback
// of a large file, hashes pipelined on both ends) through the same 10
// faults, exact.
func TestCPLargeThroughCuts(t *testing.T) {
	s := startServer(t, "")
	t.Run("ahp", func(t *testing.T) {
		r, url := relayed(t, s)
		cpThroughFaultsSize(t, url, s.connArgs(), tcpCuts(r), cpLargeSize)
	})
	t.Run("transport-io WebSocket", func(t *testing.T) {
		r, _ := relayed(t, s)
		cpThroughFaultsSize(t, "https://"+r.Addr()+"/transport-io", append(s.connArgs(), "--transport", "websocket"), tcpCuts(r), cpLargeSize)
	})
	t.Run("WebTransport", func(t *testing.T) {
		tcp, udp, err := fault.NewPair(s.host)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = tcp.Close(); _ = udp.Close() })
		cpThroughFaultsSize(t, "https://"+tcp.Addr()+"/transport-io", append(s.connArgs(), "--transport", "webtransport"), udpFaults(udp), cpLargeSize)
	})
}

// TestCPThroughBlackHole: a copy each way whose path goes silent for 5 s
// mid-transfer (no byte either way, the connection kept) carries on once
// it is back, exact.
func TestCPThroughBlackHole(t *testing.T) {
	s := startServer(t, "")
	r, url := relayed(t, s)
	dir := t.TempDir()
	local := filepath.Join(dir, "local.bin")
	writeRandom(t, local, cpFileSize, 3)
	want := fileSHA(t, local)
	remote := filepath.Join(dir, "remote.bin")
	back := filepath.Join(dir, "back.bin")
	for _, c := range []struct {
		name, from, to, got string
		dir                 fault.Direction
	}{
		{"upload", local, url + ":" + remote, remote, fault.Up},
		{"download", url + ":" + remote, back, back, fault.Down},
	} {
		from := r.Bytes(c.dir)
		p := start(t, append([]string{"cp", c.from, c.to}, s.connArgs()...)...)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := r.Await(ctx, func() bool { return r.Bytes(c.dir)-from > cpFileSize/3 })
		cancel()
		if err != nil {
			t.Fatalf("%s did not get a third through: %v\n%s", c.name, err, p.stderr.String())
		}
		r.Stall(true)
		// A write the relay had begun before the stall (at most one
		// 32 KiB chunk, in Held) may still complete: that is not the
		// hole's leak. Held is read before Bytes, so a chunk that
		// completes in between is in both.
		inFlight := r.Held(c.dir)
		held := r.Bytes(c.dir)
		<-time.After(5 * time.Second) // the hole's length is what is tested, not a synchronization
		if moved := r.Bytes(c.dir) - held; moved > inFlight {
			t.Errorf("%s: %d bytes through the black hole (%d were being written at its start)", c.name, moved, inFlight)
		}
		r.Stall(false)
		if code := p.wait(t, 60*time.Second); code != 0 {
			t.Fatalf("cp %s exited %d\n%s", c.name, code, tail(p.stderr.String(), 3000))
		}
		if got := fileSHA(t, c.got); got != want {
			t.Fatalf("%s: SHA-256 %s, want %s", c.name, got, want)
		}
	}
}

// TestCPWebTransportReconnects: over WebTransport a black hole longer
// than QUIC's idle timeout (transportio.QUICIdleTimeout) ends the QUIC
// connection, which no path migration saves: cp dials a new one once the
// path is back, resumes its session, and the upload carries on from where
// the host's bytes end, exact.
func TestCPWebTransportReconnects(t *testing.T) {
	s := startServer(t, "")
	tcp, udp, err := fault.NewPair(s.host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tcp.Close(); _ = udp.Close() })
	dir := t.TempDir()
	local := filepath.Join(dir, "local.bin")
	writeRandom(t, local, cpFileSize, 5)
	want := fileSHA(t, local)
	remote := filepath.Join(dir, "remote.bin")
	p := start(t, append([]string{"cp", local, "https://" + tcp.Addr() + "/transport-io:" + remote, "--transport", "webtransport"}, s.connArgs()...)...)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	// About a third of the file's datagrams (up to 1,400 bytes each).
	err = udp.Await(ctx, func() bool { return udp.Datagrams(fault.Up) > cpFileSize/1400/3 })
	cancel()
	if err != nil {
		t.Fatalf("the upload did not get a third through: %v\n%s", err, p.stderr.String())
	}
	udp.Drop(true)
	// The hole's length is what is tested (past the idle timeout), not a
	// synchronization.
	<-time.After(transportio.QUICIdleTimeout + 3*time.Second)
	udp.Drop(false)
	if code := p.wait(t, 90*time.Second); code != 0 {
		t.Fatalf("cp exited %d\n%s", code, tail(p.stderr.String(), 3000))
	}
	if got := fileSHA(t, remote); got != want {
		t.Fatalf("SHA-256 %s, want %s", got, want)
	}
	if !strings.Contains(p.stderr.String(), "sidecar: resumed") {
		t.Errorf("no reconnect (the QUIC connection outlived the hole?):\n%s", p.stderr.String())
	}
}

// TestCPKilledThenAgain: a cp killed mid-upload leaves only the partial
// file (never the target name); the same cp again continues it and the
// result is exact.
func TestCPKilledThenAgain(t *testing.T) {
	s := startServer(t, "")
	r, url := relayed(t, s)
	dir := t.TempDir()
	local := filepath.Join(dir, "src.bin")
	writeRandom(t, local, cpFileSize, 2)
	remote := filepath.Join(dir, "dst.bin")
	args := append([]string{"cp", local, url + ":" + remote}, s.connArgs()...)
	p := start(t, args...)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := r.Await(ctx, func() bool { return r.Bytes(fault.Up) > cpFileSize/3 }); err != nil {
		t.Fatalf("upload did not get a third through: %v\n%s", err, p.stderr.String())
	}
	r.Stall(true) // nothing more gets through: the kill is mid-transfer
	p.kill(t)
	r.Stall(false)
	if _, err := os.Stat(remote); !os.IsNotExist(err) {
		t.Fatalf("target exists after the kill: %v", err)
	}
	part := filepath.Join(dir, ".dst.bin.sidecar-part")
	st, err := os.Stat(part)
	if err != nil {
		t.Fatalf("no partial file: %v", err)
	}
	t.Logf("partial: %d bytes", st.Size())
	before := r.Bytes(fault.Up)
	again := start(t, args...)
	if code := again.wait(t, 60*time.Second); code != 0 {
		t.Fatalf("cp again exited %d\n%s", code, again.stderr.String())
	}
	if got, want := fileSHA(t, remote), fileSHA(t, local); got != want {
		t.Fatalf("SHA-256 %s, want %s", got, want)
	}
	if sent := r.Bytes(fault.Up) - before; st.Size() > cpFileSize/4 && sent > cpFileSize*2 {
		t.Errorf("the second cp sent %d bytes for a %d-byte file with %d kept: did not continue", sent, cpFileSize, st.Size())
	}
	if _, err := os.Stat(part); !os.IsNotExist(err) {
		t.Errorf("partial file left: %v", err)
	}
}

// TestCPTree: a tree of 2,000 files with directories, modes and symbolic
// links goes up and comes back identical (diff -r, and each entry's mode
// and mtime).
func TestCPTree(t *testing.T) {
	s := startServer(t, "")
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	for i := range 2000 {
		d := filepath.Join(src, fmt.Sprintf("d%02d", i%40), fmt.Sprintf("e%d", i%3))
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(d, fmt.Sprintf("f%04d", i))
		if err := os.WriteFile(p, []byte(strings.Repeat(fmt.Sprint(i), i%50+1)), os.FileMode(0o600|(i%8)<<3)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("d00/e0/f0000", filepath.Join(src, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../e1", filepath.Join(src, "d01", "e0", "up")); err != nil {
		t.Fatal(err)
	}
	for i, l := range []string{"link", "d01/e0/up"} { // links keep their own mtime
		tv := []unix.Timeval{{Sec: 1_600_000_000 + int64(i)}, {Sec: 1_600_000_000 + int64(i), Usec: 250_000}}
		if err := unix.Lutimes(filepath.Join(src, l), tv); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Join(src, "d02"), 0o700); err != nil {
		t.Fatal(err)
	}
	remote := filepath.Join(dir, "remote")
	_, stderr, code := s.run(t, append([]string{"cp", "-r", src, s.url + ":" + remote}, s.connArgs()...)...)
	if code != 0 {
		t.Fatalf("cp -r up exited %d\n%s", code, stderr)
	}
	back := filepath.Join(dir, "back")
	_, stderr, code = s.run(t, append([]string{"cp", "-r", s.url + ":" + remote, back}, s.connArgs()...)...)
	if code != 0 {
		t.Fatalf("cp -r down exited %d\n%s", code, stderr)
	}
	for _, d := range []string{remote, back} {
		if out, err := exec.Command("diff", "-r", "--no-dereference", src, d).CombinedOutput(); err != nil {
			t.Fatalf("diff -r %s %s: %v\n%s", src, d, err, tail(string(out), 2000))
		}
		stats := func(root string) string {
			out, err := exec.Command("sh", "-c", "cd "+root+" && { find . ! -type l -printf '%p %M %T@\\n'; find . -type l -printf '%p %l %T@\\n'; } | sort").Output()
			if err != nil {
				t.Fatal(err)
			}
			return string(out)
		}
		if a, b := stats(src), stats(d); a != b {
			t.Fatalf("modes or times differ between %s and %s:\n%s\n%s", src, d, tail(a, 500), tail(b, 500))
		}
	}
}

// TestCPRefusals: a path outside files.write is refused naming the path
// and the rule; a symbolic link leading out of the destination is refused
// by the host, named, and the rest of the tree is copied.
func TestCPRefusals(t *testing.T) {
	dir := t.TempDir()
	allowed := filepath.Join(dir, "allowed")
	if err := os.Mkdir(allowed, 0o755); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, fmt.Sprintf("files {\n  read = [%q]\n  write = [%q]\n}\n", dir, allowed))
	local := filepath.Join(dir, "f.txt")
	if err := os.WriteFile(local, []byte("hello\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, stderr, code := s.run(t, append([]string{"cp", local, s.url + ":" + filepath.Join(dir, "nope.txt")}, s.connArgs()...)...)
	want := fmt.Sprintf("write %s not allowed by policy: not under files.write", filepath.Join(dir, "nope.txt"))
	if code != 1 || !strings.Contains(stderr, want) {
		t.Fatalf("cp outside files.write: exit %d, stderr:\n%s\nwant %q", code, stderr, want)
	}
	_, stderr, code = s.run(t, append([]string{"cp", s.url + ":/etc/hostname", filepath.Join(dir, "h")}, s.connArgs()...)...)
	if code != 1 || !strings.Contains(stderr, "read /etc/hostname not allowed by policy: not under files.read") {
		t.Fatalf("cp outside files.read: exit %d, stderr:\n%s", code, stderr)
	}
	// A trailing slash on the host's side names a directory that must
	// exist, as cp and scp read it: never a file made under that name.
	for _, c := range []struct{ remote, want string }{
		{filepath.Join(allowed, "nodir") + "/", filepath.Join(allowed, "nodir") + "/: no such directory on the host"},
		{local + "/", local + "/: not a directory on the host"},
	} {
		_, stderr, code = s.run(t, append([]string{"cp", local, s.url + ":" + c.remote}, s.connArgs()...)...)
		if code != 1 || !strings.Contains(stderr, c.want) {
			t.Errorf("cp to %s: exit %d, stderr:\n%s\nwant %q", c.remote, code, stderr, c.want)
		}
	}
	if _, err := os.Lstat(filepath.Join(allowed, "nodir")); !os.IsNotExist(err) {
		t.Errorf("cp to nodir/ made something: %v", err)
	}
	if _, stderr, code = s.run(t, append([]string{"cp", local, s.url + ":" + allowed + "/"}, s.connArgs()...)...); code != 0 {
		t.Errorf("cp into an existing directory/: exit %d\n%s", code, stderr)
	} else if b, err := os.ReadFile(filepath.Join(allowed, "f.txt")); err != nil || string(b) != "hello\n" {
		t.Errorf("cp into allowed/: %q, %v", b, err)
	}
	tree := filepath.Join(dir, "tree")
	if err := os.MkdirAll(filepath.Join(tree, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tree, "sub", "ok"), []byte("ok"), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, target := range map[string]string{"abs": "/etc/passwd", "sub/climb": "../../x"} {
		if err := os.Symlink(target, filepath.Join(tree, name)); err != nil {
			t.Fatal(err)
		}
	}
	_, stderr, code = s.run(t, append([]string{"cp", "-r", tree, s.url + ":" + filepath.Join(allowed, "t")}, s.connArgs()...)...)
	if code != 1 || !strings.Contains(stderr, `symbolic link "abs" points to the absolute path "/etc/passwd", outside the destination`) ||
		!strings.Contains(stderr, `symbolic link "sub/climb" points to "../../x", outside the destination`) {
		t.Fatalf("hostile links: exit %d, stderr:\n%s", code, stderr)
	}
	if b, err := os.ReadFile(filepath.Join(allowed, "t", "sub", "ok")); err != nil || string(b) != "ok" {
		t.Fatalf("the rest of the tree: %q, %v", b, err)
	}
	for _, n := range []string{"abs", "sub/climb"} {
		if _, err := os.Lstat(filepath.Join(allowed, "t", n)); !os.IsNotExist(err) {
			t.Errorf("hostile link %s was created: %v", n, err)
		}
	}
}

// TestCPTreeDownloadHostile: a tree on the host holding symbolic links
// that lead out of it and a named pipe comes down with every other entry;
// the client, as the receiver, refuses each hostile one by name and
// creates none of them, and cp exits 1.
func TestCPTreeDownloadHostile(t *testing.T) {
	s := startServer(t, "")
	dir := t.TempDir()
	tree := filepath.Join(dir, "tree")
	if err := os.MkdirAll(filepath.Join(tree, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tree, "sub", "ok"), []byte("ok"), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, target := range map[string]string{"abs": "/etc/passwd", "sub/climb": "../../x", "sub/in": "ok"} {
		if err := os.Symlink(target, filepath.Join(tree, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Mkfifo(filepath.Join(tree, "pipe"), 0o644); err != nil {
		t.Fatal(err)
	}
	back := filepath.Join(dir, "back")
	_, stderr, code := s.run(t, append([]string{"cp", "-r", s.url + ":" + tree, back}, s.connArgs()...)...)
	for _, want := range []string{
		"sidecar: not copied: " + tree + `/abs: refused: symbolic link "abs" points to the absolute path "/etc/passwd", outside the destination`,
		"sidecar: not copied: " + tree + `/sub/climb: refused: symbolic link "sub/climb" points to "../../x", outside the destination`,
		"sidecar: not copied: " + tree + "/pipe: not a regular file, directory or symbolic link (a device?): refused",
		"sidecar: 3 entries not copied",
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q", want)
		}
	}
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	if t.Failed() {
		t.Fatalf("stderr:\n%s", stderr)
	}
	if b, err := os.ReadFile(filepath.Join(back, "sub", "ok")); err != nil || string(b) != "ok" {
		t.Errorf("sub/ok: %q, %v", b, err)
	}
	if l, err := os.Readlink(filepath.Join(back, "sub", "in")); err != nil || l != "ok" {
		t.Errorf("sub/in: %q, %v", l, err)
	}
	for _, n := range []string{"abs", "sub/climb", "pipe"} {
		if _, err := os.Lstat(filepath.Join(back, n)); !os.IsNotExist(err) {
			t.Errorf("%s was created: %v", n, err)
		}
	}
}

// TestCPTreePartialNamedEntry: a tree holding X and .X.sidecar-part (the
// leftover of an interrupted copy, with other bytes) is copied up and
// down: X arrives with its own SHA-256 every time, the leftover is
// skipped and named on both ends and never written, and cp exits 0.
// Before, the leftover was written over X's live partial file, and its
// bytes became X (or X ended empty).
func TestCPTreePartialNamedEntry(t *testing.T) {
	s := startServer(t, "")
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	if err := os.MkdirAll(filepath.Join(src, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{src, filepath.Join(src, "sub")} {
		writeRandom(t, filepath.Join(d, "X"), 3<<20, 1)
		writeRandom(t, filepath.Join(d, ".X.sidecar-part"), 1<<20, 2)
	}
	want := fileSHA(t, filepath.Join(src, "X"))
	for round := range 3 {
		remote := filepath.Join(dir, fmt.Sprint("remote", round))
		back := filepath.Join(dir, fmt.Sprint("back", round))
		for _, c := range []struct{ from, to, shown, at string }{
			{src, s.url + ":" + remote, src, remote},
			{s.url + ":" + src, back, src, back},
		} {
			_, stderr, code := s.run(t, append([]string{"cp", "-r", c.from, c.to}, s.connArgs()...)...)
			if code != 0 {
				t.Fatalf("cp -r %s %s exited %d\n%s", c.from, c.to, code, stderr)
			}
			for _, rel := range []string{".X.sidecar-part", "sub/.X.sidecar-part"} {
				if w := "sidecar: " + filepath.Join(c.shown, rel) + ": skipped: named like a partial file"; !strings.Contains(stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, stderr)
				}
				if _, err := os.Lstat(filepath.Join(c.at, rel)); !os.IsNotExist(err) {
					t.Errorf("%s was written: %v", filepath.Join(c.at, rel), err)
				}
			}
			for _, rel := range []string{"X", "sub/X"} {
				if got := fileSHA(t, filepath.Join(c.at, rel)); got != want {
					t.Fatalf("round %d: %s has SHA-256 %s, want %s (the source's X)", round, filepath.Join(c.at, rel), got, want)
				}
			}
		}
	}
	// Named as a target, on either end, the name is refused.
	_, stderr, code := s.run(t, append([]string{"cp", filepath.Join(src, "X"), s.url + ":" + filepath.Join(dir, "remote0", ".X.sidecar-part")}, s.connArgs()...)...)
	if code != 1 || !strings.Contains(stderr, "is named like a partial file of an interrupted copy") {
		t.Errorf("upload onto a partial name: exit %d\n%s", code, stderr)
	}
	_, stderr, code = s.run(t, append([]string{"cp", s.url + ":" + filepath.Join(src, ".X.sidecar-part"), dir}, s.connArgs()...)...)
	if code != 1 || !strings.Contains(stderr, "is named like a partial file of an interrupted copy") {
		t.Errorf("download onto a partial name: exit %d\n%s", code, stderr)
	}
}

// TestCPTreeUnderQuota: with files.max_per_principal at cp's own
// parallelism (4), trees of 300 files go up and down in full, twice
// over: a quota refusal while the places of the transfers that just
// ended are being freed is waited out, not an entry lost; and no empty
// partial file is left on either end.
func TestCPTreeUnderQuota(t *testing.T) {
	s := startServer(t, "files {\n  max_per_principal = 4\n}\n")
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	for i := range 300 {
		d := filepath.Join(src, fmt.Sprintf("d%d", i%5))
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, fmt.Sprintf("f%03d", i)), []byte(strings.Repeat(fmt.Sprint(i), i%20+1)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for round := range 2 {
		remote := filepath.Join(dir, fmt.Sprint("remote", round))
		back := filepath.Join(dir, fmt.Sprint("back", round))
		for _, c := range [][2]string{{src, s.url + ":" + remote}, {s.url + ":" + remote, back}} {
			_, stderr, code := s.run(t, append([]string{"cp", "-r", c[0], c[1]}, s.connArgs()...)...)
			if code != 0 {
				t.Fatalf("cp -r %s %s exited %d\n%s", c[0], c[1], code, tail(stderr, 3000))
			}
		}
		for _, d := range []string{remote, back} {
			if out, err := exec.Command("diff", "-r", src, d).CombinedOutput(); err != nil {
				t.Fatalf("diff -r %s %s: %v\n%s", src, d, err, tail(string(out), 2000))
			}
		}
	}
}

// TestCPKilledDownloadsYield: downloads killed mid-transfer (kill -9,
// their channels parked for a reconnect that never comes) take every
// place of files.max_per_principal; a new cp of the same token still
// copies, the parked transfers giving their places up (each one's
// partial file stays for a resume).
func TestCPKilledDownloadsYield(t *testing.T) {
	s := startServer(t, "files {\n  max_per_principal = 2\n}\n")
	r, url := relayed(t, s)
	dir := t.TempDir()
	src := filepath.Join(dir, "src.bin")
	writeRandom(t, src, cpFileSize, 4)
	for i := range 2 {
		from := r.Bytes(fault.Down)
		p := start(t, append([]string{"cp", url + ":" + src, filepath.Join(dir, fmt.Sprint("killed", i))}, s.connArgs()...)...)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := r.Await(ctx, func() bool { return r.Bytes(fault.Down)-from > cpFileSize/4 })
		cancel()
		if err != nil {
			t.Fatalf("download %d did not get a quarter through: %v\n%s", i, err, p.stderr.String())
		}
		r.Stall(true)
		p.kill(t)
		r.Stall(false)
		if _, err := os.Stat(filepath.Join(dir, fmt.Sprintf(".killed%d.sidecar-part", i))); err != nil {
			t.Fatalf("download %d left no partial file: %v", i, err)
		}
	}
	back := filepath.Join(dir, "back.bin")
	_, stderr, code := s.run(t, append([]string{"cp", s.url + ":" + src, back}, s.connArgs()...)...)
	if code != 0 {
		t.Fatalf("cp after two killed downloads exited %d\n%s", code, tail(stderr, 3000))
	}
	if got, want := fileSHA(t, back), fileSHA(t, src); got != want {
		t.Fatalf("SHA-256 %s, want %s", got, want)
	}
}

// TestCPLinkToDirectory: cp -r of a host's symbolic link to a directory
// copies the directory it leads to (as cp does), byte for byte.
func TestCPLinkToDirectory(t *testing.T) {
	s := startServer(t, "")
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "real", "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeRandom(t, filepath.Join(dir, "real", "sub", "f"), 100_000, 5)
	if err := os.Symlink("real", filepath.Join(dir, "linkdir")); err != nil {
		t.Fatal(err)
	}
	back := filepath.Join(dir, "ld")
	_, stderr, code := s.run(t, append([]string{"cp", "-r", s.url + ":" + filepath.Join(dir, "linkdir"), back}, s.connArgs()...)...)
	if code != 0 {
		t.Fatalf("cp -r of a link to a directory exited %d\n%s", code, stderr)
	}
	if got, want := fileSHA(t, filepath.Join(back, "sub", "f")), fileSHA(t, filepath.Join(dir, "real", "sub", "f")); got != want {
		t.Fatalf("SHA-256 %s, want %s", got, want)
	}
}
