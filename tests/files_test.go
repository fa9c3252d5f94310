package tests

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sidecar-dev/sidecar/tests/fault"
)

// cpFileSize is the file each way of TestCPThroughCuts: 32 MiB, so that
// the test stays within seconds under -race on two cores (the 256
// MiB is a benchmark, not a unit of CI time).
const cpFileSize = 32 << 20

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
	b := make([]byte, n)
	r := rand.New(rand.NewPCG(seed, seed))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	if err := os.WriteFile(p, b, 0o640); err != nil {
		t.Fatal(err)
	}
}

// cutWhileRunning cuts every relayed connection each time about every
// more bytes went through, until p exits; it returns how many cuts.
func cutWhileRunning(r *fault.TCP, p *proc, every int64, max int) int {
	cuts := 0
	next := every
	for cuts < max {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		_ = r.Await(ctx, func() bool { return r.Bytes(fault.Up)+r.Bytes(fault.Down) >= next })
		cancel()
		select {
		case <-p.done:
			return cuts
		default:
		}
		if r.Bytes(fault.Up)+r.Bytes(fault.Down) >= next {
			r.Cut()
			cuts++
			next = r.Bytes(fault.Up) + r.Bytes(fault.Down) + every
		}
	}
	return cuts
}

// TestCPThroughCuts: sidecar cp uploads and downloads a file through a
// relay that cuts the connection repeatedly; both copies are exact (SHA-256),
// keep mode and mtime, and no partial file is left.
func TestCPThroughCuts(t *testing.T) {
	s := startServer(t, "")
	r, url := relayed(t, s)
	dir := t.TempDir()
	local := filepath.Join(dir, "local.bin")
	writeRandom(t, local, cpFileSize, 1)
	mt := time.Unix(1_700_000_000, 123_000_000)
	if err := os.Chtimes(local, mt, mt); err != nil {
		t.Fatal(err)
	}
	want := fileSHA(t, local)
	remote := filepath.Join(dir, "remote.bin")

	up := start(t, append([]string{"cp", local, url + ":" + remote}, s.connArgs()...)...)
	cuts := cutWhileRunning(r, up, cpFileSize/6, 10)
	if code := up.wait(t, 60*time.Second); code != 0 {
		t.Fatalf("cp up exited %d\nstderr:\n%s", code, tail(up.stderr.String(), 3000))
	}
	t.Logf("upload: %d cuts", cuts)
	if got := fileSHA(t, remote); got != want {
		t.Fatalf("uploaded SHA-256 %s, want %s", got, want)
	}
	back := filepath.Join(dir, "back.bin")
	down := start(t, append([]string{"cp", url + ":" + remote, back}, s.connArgs()...)...)
	cuts = cutWhileRunning(r, down, cpFileSize/6, 10)
	if code := down.wait(t, 60*time.Second); code != 0 {
		t.Fatalf("cp down exited %d\nstderr:\n%s", code, tail(down.stderr.String(), 3000))
	}
	t.Logf("download: %d cuts", cuts)
	if got := fileSHA(t, back); got != want {
		t.Fatalf("downloaded SHA-256 %s, want %s", got, want)
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
	if !strings.Contains(down.stderr.String(), "copied 1 file(s)") {
		t.Errorf("no summary line:\n%s", down.stderr.String())
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
			out, err := exec.Command("sh", "-c", "cd "+root+" && { find . ! -type l -printf '%p %M %T@\\n'; find . -type l -printf '%p %l\\n'; } | sort").Output()
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
