package tests

import (
	"bufio"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// startBrokenStderr is start with stderr a pipe whose reader is gone
// (`2>&1 | head` after head has exited): every write to it fails.
func startBrokenStderr(t *testing.T, args ...string) *proc {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	_ = r.Close()
	defer w.Close() // the child has its own copy
	return startWith(t, w, args...)
}

// TestBrokenStderrPipe: sidecar serve and sidecar forward keep working
// when the reader of their stderr has gone; they used to die of SIGPIPE
// at the next log line (exit 141), forward cutting its transfers short
// without a reset.
func TestBrokenStderrPipe(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	srv := startBrokenStderr(t, "serve", "--listen", "127.0.0.1:0", "--token", "tok", "--state-dir", filepath.Join(dir, "state"))
	var m []string
	if _, ok := srv.stdout.waitMatch(waitTimeout, func(text string) bool {
		m = attachLine.FindStringSubmatch(text)
		return m != nil
	}); !ok {
		select {
		case <-srv.done:
			t.Fatalf("serve with a broken stderr exited %d (%v) before its attach line", exitCode(srv.err), srv.err)
		default:
			t.Fatalf("serve with a broken stderr printed no attach line within %v", waitTimeout)
		}
	}
	url, hash := m[1], m[4]

	// A destination that answers each line with itself.
	dest, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer dest.Close()
	go func() {
		for {
			c, err := dest.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	local := freePort(t) // 127.0.0.1:PORT
	fwd := startBrokenStderr(t, "forward", url, "--token", "tok", "--cert-hash", hash,
		"-L", local+":"+dest.Addr().String())
	// forward says nothing we can read: dial until its listener is up.
	var c net.Conn
	for deadline := time.Now().Add(waitTimeout); ; {
		if c, err = net.Dial("tcp", local); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("forward with a broken stderr never listened on %s: %v", local, err)
		}
		select {
		case <-fwd.done:
			t.Fatalf("forward with a broken stderr exited %d (%v)", exitCode(fwd.err), fwd.err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(waitTimeout))
	for i := range 3 {
		line := "line " + strconv.Itoa(i) + "\n"
		if _, err := io.WriteString(c, line); err != nil {
			t.Fatal(err)
		}
		got, err := bufio.NewReader(io.LimitReader(c, int64(len(line)))).ReadString('\n')
		if err != nil || got != line {
			t.Fatalf("echo through forward: %q, %v; want %q", got, err, line)
		}
	}
	// A client of the server (its log line is lost, not the server).
	if _, _, code := (&server{}).run(t, "ls", url, "--token", "tok", "--cert-hash", hash); code != 0 {
		t.Fatalf("ls against serve with a broken stderr: exit %d", code)
	}
	select {
	case <-srv.done:
		t.Fatalf("serve exited %d", exitCode(srv.err))
	case <-fwd.done:
		t.Fatalf("forward exited %d", exitCode(fwd.err))
	default:
	}
}
