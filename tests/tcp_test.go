package tests

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sidecar-dev/sidecar/client"
	"github.com/sidecar-dev/sidecar/rpc"
)

// The end-to-end tests of TCP channels and `sidecar forward`. Each one
// starts the real `sidecar serve` and, for the CLI, `sidecar forward`, and
// talks to destinations it runs itself on loopback.
//
// TestForwardBulkConcurrent moves 64 × 8 MiB each way; it is skipped under
// -race (tcpRaceEnabled, set by tcp_race_test.go) and with -short, where it
// would take minutes on two cores; plain `go test ./tests` runs it.

// tcpForward is a running `sidecar forward`.
type tcpForward struct {
	p     *proc
	addrs []string // local addresses, in the order of the -L/-D flags
}

var tcpForwardLine = regexp.MustCompile(`sidecar: (?:forwarding (\S+) -> \S+|SOCKS5 proxy on (\S+))\n`)

// tcpStartForward runs `sidecar forward URL specs...` (each spec a full
// "-L x" or "-D x" pair) and waits until it listens on every one.
func tcpStartForward(t *testing.T, s *server, specs ...string) *tcpForward {
	t.Helper()
	return tcpStartForwardAt(t, s, s.url, specs...)
}

// tcpStartForwardAt is tcpStartForward to url (https://host/ for the
// transport-io transports).
func tcpStartForwardAt(t *testing.T, s *server, url string, specs ...string) *tcpForward {
	t.Helper()
	args := append([]string{"forward", url}, s.connArgs()...)
	n := 0
	for _, sp := range specs {
		args = append(args, strings.Fields(sp)...)
		if strings.HasPrefix(sp, "-L") || strings.HasPrefix(sp, "-D") {
			n++ // else another flag (--transport websocket)
		}
	}
	p := start(t, args...)
	var addrs []string
	text, ok := p.stderr.waitMatch(waitTimeout, func(text string) bool {
		m := tcpForwardLine.FindAllStringSubmatch(text, -1)
		if len(m) < n {
			return false
		}
		addrs = addrs[:0]
		for _, x := range m {
			addrs = append(addrs, x[1]+x[2])
		}
		return true
	})
	if !ok {
		t.Fatalf("sidecar forward did not start listening within %v; stderr:\n%s", waitTimeout, text)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("sidecar forward stderr:\n%s", tail(p.stderr.String(), 4000))
		}
	})
	return &tcpForward{p: p, addrs: addrs}
}

// tcpListen starts a loopback destination server running handle for every
// connection; it is closed, and its handlers waited for, at cleanup.
func tcpListen(t *testing.T, handle func(c *net.TCPConn)) (port int) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				handle(c.(*net.TCPConn))
			}()
		}
	}()
	t.Cleanup(func() {
		_ = l.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return l.Addr().(*net.TCPAddr).Port
}

// tcpClosedPort returns a loopback port nothing listens on.
func tcpClosedPort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	return port
}

func tcpDial(t *testing.T, addr string) *net.TCPConn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, waitTimeout)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	_ = c.SetDeadline(time.Now().Add(2 * waitTimeout))
	return c.(*net.TCPConn)
}

// tcpClient dials the server with the Go client.
func tcpClient(t *testing.T, s *server) *client.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	c, err := client.Dial(ctx, s.url, client.Options{Token: s.token, CertHash: s.hash, ClientName: "tcp-test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestForwardCurl: curl through -L reaches an HTTP server and gets its
// answer.
func TestForwardCurl(t *testing.T) {
	t.Parallel()
	curl, err := exec.LookPath("curl")
	if err != nil {
		t.Skip("curl not installed")
	}
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello from %s %s\n", r.Method, r.URL.Path)
	}))
	t.Cleanup(hs.Close)
	port := hs.Listener.Addr().(*net.TCPAddr).Port
	s := startServer(t, "")
	fw := tcpStartForward(t, s, fmt.Sprintf("-L 127.0.0.1:0:127.0.0.1:%d", port))
	for i := range 3 { // three connections in turn on one forwarder
		out, err := exec.Command(curl, "-sS", "--max-time", "20", "http://"+fw.addrs[0]+"/path"+strconv.Itoa(i)).CombinedOutput()
		if err != nil || string(out) != fmt.Sprintf("hello from GET /path%d\n", i) {
			t.Fatalf("curl: %v, output %q; forward stderr:\n%s", err, out, fw.p.stderr.String())
		}
	}
}

// tcpStream is the deterministic content one side sends on connection i.
func tcpStream(i uint64, side uint64) *rand.ChaCha8 {
	var seed [32]byte
	binary.LittleEndian.PutUint64(seed[:], i)
	binary.LittleEndian.PutUint64(seed[8:], side)
	return rand.NewChaCha8(seed)
}

func tcpStreamSum(i, side uint64, n int64) [32]byte {
	h := sha256.New()
	_, _ = io.CopyN(h, tcpStream(i, side), n)
	var s [32]byte
	copy(s[:], h.Sum(nil))
	return s
}

// TestForwardBulkConcurrent: 64 connections at once through one forwarder,
// each moving 8 MiB in both directions at the same time, every byte
// checked by SHA-256.
func TestForwardBulkConcurrent(t *testing.T) {
	t.Parallel()
	// 64 × 8 MiB each way; under -race (as CI runs) or -short, still more
	// connections at once than the host takes requests in progress (16),
	// but 1 MiB each.
	conns, size := 64, int64(8<<20)
	if tcpRaceEnabled || testing.Short() {
		conns, size = 40, 1<<20
	}
	var mu sync.Mutex
	got := map[uint64][32]byte{} // what the destination received, by connection
	recorded := make(chan struct{}, conns)
	port := tcpListen(t, func(c *net.TCPConn) {
		var id [8]byte
		if _, err := io.ReadFull(c, id[:]); err != nil {
			return
		}
		i := binary.LittleEndian.Uint64(id[:])
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, _ = io.CopyN(c, tcpStream(i, 1), size)
			_ = c.CloseWrite()
		}()
		h := sha256.New()
		_, _ = io.Copy(h, c)
		<-done
		var s [32]byte
		copy(s[:], h.Sum(nil))
		mu.Lock()
		got[i] = s
		mu.Unlock()
		recorded <- struct{}{}
	})
	s := startServer(t, "")
	fw := tcpStartForward(t, s, fmt.Sprintf("-L 127.0.0.1:0:127.0.0.1:%d", port))
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, conns)
	for i := range uint64(conns) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.DialTimeout("tcp", fw.addrs[0], waitTimeout)
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(3 * time.Minute))
			tc := c.(*net.TCPConn)
			sent := make(chan error, 1)
			go func() {
				var id [8]byte
				binary.LittleEndian.PutUint64(id[:], i)
				_, err := tc.Write(id[:])
				if err == nil {
					_, err = io.CopyN(tc, tcpStream(i, 0), size-8)
				}
				if err == nil {
					err = tc.CloseWrite()
				}
				sent <- err
			}()
			h := sha256.New()
			n, err := io.Copy(h, tc)
			if serr := <-sent; serr != nil {
				errs <- fmt.Errorf("connection %d: send: %v", i, serr)
				return
			}
			if err != nil || n != size {
				errs <- fmt.Errorf("connection %d: received %d bytes, %v", i, n, err)
				return
			}
			if [32]byte(h.Sum(nil)) != tcpStreamSum(i, 1, size) {
				errs <- fmt.Errorf("connection %d: the bytes from the destination differ", i)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	elapsed := time.Since(start)
	t.Logf("%d × %d MiB each way in %v (%.0f MiB/s both ways together)", conns, size>>20, elapsed, float64(2*int64(conns)*size>>20)/elapsed.Seconds())
	// The destination records its hash once both directions ended.
	timeout := time.After(waitTimeout)
	for range conns {
		select {
		case <-recorded:
		case <-timeout:
			t.Fatal("the destination did not finish every connection")
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for i := range uint64(conns) {
		if got[i] != tcpStreamSum(i, 0, size-8) {
			t.Errorf("connection %d: the destination received different bytes", i)
		}
	}
}

// TestForwardHalfClose: the client shuts its write side and still reads
// the server's answer, which the server sends only after it saw EOF.
func TestForwardHalfClose(t *testing.T) {
	t.Parallel()
	port := tcpListen(t, func(c *net.TCPConn) {
		req, err := io.ReadAll(c)
		if err != nil {
			return
		}
		fmt.Fprintf(c, "got %d bytes: %s", len(req), bytes.ToUpper(req))
	})
	s := startServer(t, "")
	fw := tcpStartForward(t, s, fmt.Sprintf("-L 127.0.0.1:0:127.0.0.1:%d", port))
	c := tcpDial(t, fw.addrs[0])
	if _, err := c.Write([]byte("question")); err != nil {
		t.Fatal(err)
	}
	if err := c.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	answer, err := io.ReadAll(c)
	if err != nil || string(answer) != "got 8 bytes: QUESTION" {
		t.Fatalf("answer %q, %v", answer, err)
	}
}

// TestForwardReset: an RST on either side reaches the other side as an
// RST (ECONNRESET), not as an orderly end of stream.
func TestForwardReset(t *testing.T) {
	t.Parallel()
	type arrival struct {
		c *net.TCPConn
	}
	arrivals := make(chan arrival, 4)
	destErr := make(chan error, 4)
	port := tcpListen(t, func(c *net.TCPConn) {
		arrivals <- arrival{c}
		// Echo until the connection ends; report how it ended.
		buf := make([]byte, 1024)
		for {
			n, err := c.Read(buf)
			if n > 0 {
				if _, werr := c.Write(buf[:n]); werr != nil {
					destErr <- werr
					return
				}
			}
			if err != nil {
				destErr <- err
				return
			}
		}
	})
	s := startServer(t, "")
	fw := tcpStartForward(t, s, fmt.Sprintf("-L 127.0.0.1:0:127.0.0.1:%d", port))
	roundTrip := func(c *net.TCPConn) {
		t.Helper()
		if _, err := c.Write([]byte("ping")); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 4)
		if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "ping" {
			t.Fatalf("echo: %q, %v", buf, err)
		}
	}

	t.Run("client resets", func(t *testing.T) {
		c := tcpDial(t, fw.addrs[0])
		roundTrip(c)
		<-arrivals
		_ = c.SetLinger(0)
		_ = c.Close()
		select {
		case err := <-destErr:
			if !errors.Is(err, syscall.ECONNRESET) {
				t.Errorf("destination saw %v, want ECONNRESET", err)
			}
		case <-time.After(waitTimeout):
			t.Fatal("the destination never saw the reset")
		}
	})
	t.Run("destination resets", func(t *testing.T) {
		c := tcpDial(t, fw.addrs[0])
		roundTrip(c)
		a := <-arrivals
		_ = a.c.SetLinger(0)
		_ = a.c.Close()
		<-destErr // its own reader ends
		_, err := io.ReadAll(c)
		if !errors.Is(err, syscall.ECONNRESET) {
			t.Errorf("client read ended with %v, want ECONNRESET", err)
		}
	})
}

// TestForwardOpenErrors: a refused destination and one the policy denies
// reset the local connection, and the forwarder says why, like ssh; the
// protocol codes are -32012 and -32009 (and -32010 for a duplicate URI,
// -32009 for the per-client limit).
func TestForwardOpenErrors(t *testing.T) {
	t.Parallel()
	s := startServer(t, "tcp {\n  max_per_client = 2\n}\n")
	closed := tcpClosedPort(t)
	fw := tcpStartForward(t, s,
		fmt.Sprintf("-L 127.0.0.1:0:127.0.0.1:%d", closed),
		"-L 127.0.0.1:0:169.254.169.254:80",
		"-L 127.0.0.1:0:10.255.255.1:80")
	for i, want := range []string{
		fmt.Sprintf("open failed: connect to 127.0.0.1:%d refused", closed),
		"open failed: connect to 169.254.169.254:80 not allowed by policy",
		"open failed: connect to 10.255.255.1:80 not allowed by policy",
	} {
		fwDialReset(t, want, fw.addrs[i])
		fw.p.stderr.waitFor(t, "forward stderr", 0, want)
	}

	conn := tcpClient(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	code := func(err error) int64 {
		var re *rpc.Error
		if errors.As(err, &re) {
			return re.Code
		}
		return 0
	}
	if _, err := conn.DialTCP(ctx, "127.0.0.1", closed); code(err) != rpc.CodeTCPConnectionOpenFailed {
		t.Errorf("refused destination: %v, want code -32012", err)
	}
	if _, err := conn.DialTCP(ctx, "10.255.255.1", 80); code(err) != rpc.CodePermissionDenied || !strings.Contains(err.Error(), "not allowed by policy") {
		t.Errorf("denied destination: %v, want code -32009 \"not allowed by policy\"", err)
	}
	port := tcpListen(t, func(c *net.TCPConn) { _, _ = io.Copy(io.Discard, c) })
	params := map[string]any{"channel": "ahp-tcp:/dup", "host": "127.0.0.1", "port": port}
	if err := conn.Call(ctx, "createTcpConnection", params, nil); err != nil {
		t.Fatal(err)
	}
	if err := conn.Call(ctx, "createTcpConnection", params, nil); code(err) != rpc.CodeAlreadyExists {
		t.Errorf("duplicate createTcpConnection: %v, want -32010", err)
	}
	// One open (dup) plus one more reaches max_per_client = 2.
	c2, err := conn.DialTCP(ctx, "127.0.0.1", port)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if _, err := conn.DialTCP(ctx, "127.0.0.1", port); code(err) != rpc.CodePermissionDenied || !strings.Contains(err.Error(), "tcp.max_per_client") {
		t.Errorf("third connection: %v, want -32009 naming tcp.max_per_client", err)
	}
	if err := conn.Call(ctx, "createTcpConnection", map[string]any{"channel": "ahp-tcp:/url", "host": "http://x/", "port": port}, nil); code(err) != rpc.CodeInvalidParams {
		t.Errorf("URL as host: %v, want -32602", err)
	}
}

// TestTCPOwnListenerRefused (issue 27 item 14): createTcpConnection to
// the daemon's own listener is refused (-32009, naming the rule) however
// the address is spelled: 127.0.0.1, IPv4-mapped IPv6, localhost; its
// metrics listener too. It was accepted: a TCP channel into sidecar
// itself. Another port on the same address still opens.
func TestTCPOwnListenerRefused(t *testing.T) {
	t.Parallel()
	s := startServer(t, "metrics {\n  listen = \"127.0.0.1:0\"\n}\n")
	m := regexp.MustCompile(`"@message":"metrics listening"[^\n]*"address":"127\.0\.0\.1:(\d+)"`)
	text, ok := s.p.stderr.waitMatch(waitTimeout, func(text string) bool { return m.MatchString(text) })
	if !ok {
		t.Fatalf("no metrics listening line:\n%s", tail(text, 2000))
	}
	metricsPort, _ := strconv.Atoi(m.FindStringSubmatch(text)[1])
	_, p, _ := net.SplitHostPort(s.host)
	port, _ := strconv.Atoi(p)
	rc := s.dialRaw(t)
	rc.initialize("own-listener")
	for i, c := range []struct {
		host string
		port int
		own  string
	}{
		{"127.0.0.1", port, s.host},
		{"::ffff:127.0.0.1", port, s.host},
		{"[::ffff:7f00:1]", port, s.host},
		{"localhost", port, s.host},
		{"127.0.0.1", metricsPort, fmt.Sprintf("127.0.0.1:%d", metricsPort)},
		{"localhost", metricsPort, fmt.Sprintf("127.0.0.1:%d", metricsPort)},
	} {
		r := rc.call("createTcpConnection", map[string]any{"channel": fmt.Sprintf("ahp-tcp:/own%d", i), "host": c.host, "port": c.port})
		want := "not allowed by policy: the daemon's own listener " + c.own + " (a TCP channel may not connect back into sidecar)"
		if r.Error == nil || r.Error.Code != rpc.CodePermissionDenied || !strings.HasSuffix(r.Error.Message, want) {
			t.Errorf("createTcpConnection %s port %d: %s; want -32009 ending %q", c.host, c.port, r.raw, want)
		}
	}
	other := tcpListen(t, func(c *net.TCPConn) {})
	rc.mustCall("createTcpConnection", map[string]any{"channel": "ahp-tcp:/other", "host": "localhost", "port": other})
}

// TestForwardStalledReader: forwarded connections whose local reader has
// stopped hold at most about one window each on the host (RSS grows by far
// less than 0.5 MiB per connection while the destinations keep sending),
// and another forwarded connection on the same client connection still
// moves data at once.
func TestForwardStalledReader(t *testing.T) {
	t.Parallel()
	const stalled = 16
	floodPort := tcpListen(t, func(c *net.TCPConn) {
		buf := make([]byte, 64<<10)
		for {
			if _, err := c.Write(buf); err != nil {
				return
			}
		}
	})
	echoPort := tcpListen(t, func(c *net.TCPConn) { _, _ = io.Copy(c, c) })
	s := startServer(t, "")
	fw := tcpStartForward(t, s,
		fmt.Sprintf("-L 127.0.0.1:0:127.0.0.1:%d", floodPort),
		fmt.Sprintf("-L 127.0.0.1:0:127.0.0.1:%d", echoPort))
	echo := tcpDial(t, fw.addrs[1])
	rtt := func() time.Duration {
		t.Helper()
		start := time.Now()
		if _, err := echo.Write([]byte{'x'}); err != nil {
			t.Fatal(err)
		}
		var b [1]byte
		if _, err := io.ReadFull(echo, b[:]); err != nil {
			t.Fatal(err)
		}
		return time.Since(start)
	}
	rtt() // warm up
	before := tcpRSS(t, s.p.cmd.Process.Pid)
	for range stalled {
		c := tcpDial(t, fw.addrs[0])
		_ = c.SetReadBuffer(4096) // the local reader never reads
	}
	// Let the windows fill: the echo keeps working meanwhile.
	var rtts []time.Duration
	for range 200 {
		rtts = append(rtts, rtt())
	}
	sort.Slice(rtts, func(i, j int) bool { return rtts[i] < rtts[j] })
	p50 := rtts[len(rtts)/2]
	after := tcpRSS(t, s.p.cmd.Process.Pid)
	t.Logf("echo RTT p50 %v p99 %v with %d stalled connections; host RSS %d KiB -> %d KiB", p50, rtts[len(rtts)*99/100], stalled, before, after)
	if p50 > 50*time.Millisecond {
		t.Errorf("echo RTT p50 %v with stalled connections beside it, want well under 50 ms", p50)
	}
	if grown := after - before; grown > stalled*512 {
		t.Errorf("host RSS grew %d KiB for %d stalled connections, want at most 512 KiB each", grown, stalled)
	}
	// A bulk transfer on the echo connection is not held up either.
	payload := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	go func() { _, _ = echo.Write(payload) }()
	got := make([]byte, len(payload))
	if _, err := io.ReadFull(echo, got); err != nil || !bytes.Equal(got, payload) {
		t.Fatalf("1 MiB echo beside stalled connections: %v", err)
	}
}

func tcpRSS(t *testing.T, pid int) int {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			return n
		}
	}
	t.Skip("no VmRSS")
	return 0
}

// TestForwardSOCKS: -D runs a SOCKS5 proxy whose connections go out from
// the host; a refused destination gets the SOCKS "connection refused"
// reply.
func TestForwardSOCKS(t *testing.T) {
	t.Parallel()
	port := tcpListen(t, func(c *net.TCPConn) {
		line, _ := bufio.NewReader(c).ReadString('\n')
		fmt.Fprintf(c, "echo: %s", line)
	})
	s := startServer(t, "")
	fw := tcpStartForward(t, s, "-D 127.0.0.1:0")
	socks := func(host string, port int) (*net.TCPConn, byte) {
		c := tcpDial(t, fw.addrs[0])
		req := []byte{5, 1, 0}
		if _, err := c.Write(req); err != nil {
			t.Fatal(err)
		}
		var m [2]byte
		if _, err := io.ReadFull(c, m[:]); err != nil || m != [2]byte{5, 0} {
			t.Fatalf("SOCKS method reply %v, %v", m, err)
		}
		cr := []byte{5, 1, 0, 3, byte(len(host))}
		cr = append(cr, host...)
		cr = binary.BigEndian.AppendUint16(cr, uint16(port))
		if _, err := c.Write(cr); err != nil {
			t.Fatal(err)
		}
		var rep [10]byte
		if _, err := io.ReadFull(c, rep[:]); err != nil {
			t.Fatalf("SOCKS reply: %v", err)
		}
		return c, rep[1]
	}
	c, rep := socks("localhost", port)
	if rep != 0 {
		t.Fatalf("SOCKS CONNECT localhost:%d: reply %d", port, rep)
	}
	fmt.Fprintf(c, "hello\n")
	if b, err := io.ReadAll(c); err != nil || string(b) != "echo: hello\n" {
		t.Fatalf("through SOCKS: %q, %v", b, err)
	}
	if _, rep := socks("127.0.0.1", tcpClosedPort(t)); rep != 5 {
		t.Errorf("refused destination: SOCKS reply %d, want 5 (connection refused)", rep)
	}
	fw.p.stderr.waitFor(t, "forward stderr", 0, "refused")
}

// tcpForwardedEcho starts a server and a forward with one -L to an echo
// destination, and returns a local connection through it that has made a
// round trip (its channel is open).
func tcpForwardedEcho(t *testing.T) (*server, *tcpForward, *net.TCPConn) {
	t.Helper()
	port := tcpListen(t, func(c *net.TCPConn) { _, _ = io.Copy(c, c) })
	s := startServer(t, "")
	fw := tcpStartForward(t, s, fmt.Sprintf("-L 127.0.0.1:0:127.0.0.1:%d", port))
	c := tcpDial(t, fw.addrs[0])
	if _, err := c.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	var b [1]byte
	if _, err := io.ReadFull(c, b[:]); err != nil {
		t.Fatalf("through -L: %v", err)
	}
	return s, fw, c
}

// TestForwardCtrlC: SIGINT resets every forwarded connection still open
// (so that a transfer cut short never looks complete), says so, and exits 0.
func TestForwardCtrlC(t *testing.T) {
	t.Parallel()
	_, fw, c := tcpForwardedEcho(t)
	_ = fw.p.cmd.Process.Signal(os.Interrupt)
	if code := fw.p.wait(t, waitTimeout); code != 0 {
		t.Errorf("forward exited %d after SIGINT, want 0; stderr:\n%s", code, fw.p.stderr.String())
	}
	if _, err := io.ReadAll(c); !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("local connection after Ctrl-C: %v, want a reset", err)
	}
	if !regexp.MustCompile(`sidecar: connected to \S+ over (WebTransport|WebSocket \(transport-io\)|WebSocket \(/ahp\))\n`).MatchString(fw.p.stderr.String()) {
		t.Errorf("stderr does not name the transport:\n%s", fw.p.stderr.String())
	}
	if !strings.Contains(fw.p.stderr.String(), "sidecar: reset 1 forwarded connection(s) still open") {
		t.Errorf("stderr does not say the connection was reset:\n%s", fw.p.stderr.String())
	}
}

// TestForwardCtrlCBlockedUpload: SIGINT ends forward at once even while a
// forwarded upload waits on a destination that reads nothing (its handler
// waits on the host's window, not on the local socket that Ctrl-C closes):
// well within the drain bound (forwardDrain, 3 s), not after it.
func TestForwardCtrlCBlockedUpload(t *testing.T) {
	t.Parallel()
	hold := make(chan struct{})
	port := tcpListen(t, func(*net.TCPConn) { <-hold }) // reads nothing
	t.Cleanup(func() { close(hold) })                   // before tcpListen's cleanup waits
	s := startServer(t, "")
	fw := tcpStartForward(t, s, fmt.Sprintf("-L 127.0.0.1:0:127.0.0.1:%d", port))
	c := tcpDial(t, fw.addrs[0])
	// Write until the writes stop: the window, the queues and the socket
	// buffers on the way are full.
	chunk := make([]byte, 64<<10)
	for i := 0; ; i++ {
		if i == 4096 { // 256 MiB: something does not hold back
			t.Fatal("the upload into a destination that reads nothing never blocked")
		}
		_ = c.SetWriteDeadline(time.Now().Add(300 * time.Millisecond))
		if _, err := c.Write(chunk); err != nil {
			if !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatal(err)
			}
			break
		}
	}
	start := time.Now()
	_ = fw.p.cmd.Process.Signal(os.Interrupt)
	if code := fw.p.wait(t, waitTimeout); code != 0 {
		t.Errorf("forward exited %d after SIGINT, want 0; stderr:\n%s", code, fw.p.stderr.String())
	}
	if d := time.Since(start); d >= 2500*time.Millisecond {
		t.Errorf("forward took %v to exit after SIGINT, want well under the 3 s drain bound", d)
	}
}

// TestListShowsPorts: `sidecar ls` lists the host's listening ports
// (RootState.ports).
func TestListShowsPorts(t *testing.T) {
	t.Parallel()
	port := tcpListen(t, func(c *net.TCPConn) {})
	s := startServer(t, "")
	want := fmt.Sprintf("127.0.0.1:%d", port)
	var out string
	deadline := time.Now().Add(waitTimeout)
	for time.Now().Before(deadline) {
		var code int
		out, _, code = s.run(t, append([]string{"ls", s.url}, s.connArgs()...)...)
		if code != 0 {
			t.Fatalf("ls exited %d", code)
		}
		if strings.Contains(out, want) {
			return
		}
		// The host reads the ports every few seconds: ask again.
	}
	t.Errorf("ls does not list %s:\n%s", want, out)
}

// TestListViaShowsPorts (issue 27 item 7): `sidecar ls --via 'sidecar
// stdio'` lists the listening ports. Each run starts a fresh host, which
// served its root state before its first reading of the ports had ended,
// so ls showed none in most runs. The test opens 1000 more loopback
// listeners, so that a reading takes as long as on a machine with many
// sockets (where it was found, 9 runs of 10 showed no ports; here too
// before the fix), and runs ls 10 times: every run lists the port.
func TestListViaShowsPorts(t *testing.T) {
	t.Parallel()
	port := tcpListen(t, func(c *net.TCPConn) {})
	for range 1000 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
	}
	want := fmt.Sprintf("\n127.0.0.1:%d ", port)
	via := sidecarBin + " stdio"
	missing := 0
	for i := range 10 {
		p := start(t, "ls", "--via", via)
		if code := p.wait(t, waitTimeout); code != 0 {
			t.Fatalf("ls --via (run %d) exited %d; stderr:\n%s", i+1, code, p.stderr.String())
		}
		if out := p.stdout.String(); !strings.Contains(out, want) {
			missing++
			t.Logf("ls --via (run %d) does not list 127.0.0.1:%d:\n%s", i+1, port, tail(out, 500))
		}
	}
	if missing > 0 {
		t.Errorf("ls --via left out 127.0.0.1:%d in %d runs of 10", port, missing)
	}
}

// TestForwardBindName: a bind name listens, as ssh does, on every address
// it resolves to (localhost: 127.0.0.1 and, where /etc/hosts says so and
// the machine has IPv6 loopback, ::1), all on the port the first one got
// for port 0, each with its own line; -L and -D alike. Each address
// reaches the destination through the host.
func TestForwardBindName(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	resolved, err := net.DefaultResolver.LookupIPAddr(ctx, "localhost")
	if err != nil {
		t.Fatal(err)
	}
	var want []string // the addresses forward should listen on, in order
	for _, a := range resolved {
		network := "tcp6"
		if a.IP.To4() != nil {
			network = "tcp4"
		}
		l, err := net.Listen(network, net.JoinHostPort(a.String(), "0"))
		if err != nil {
			t.Logf("localhost's %s cannot be bound here (%v): forward skips it", a, err)
			continue
		}
		_ = l.Close()
		want = append(want, a.IP.String())
	}
	if len(want) == 0 {
		t.Skip("localhost has no address to bind")
	}
	if !slices.Contains(want, "::1") {
		t.Logf("localhost resolves to %v here: the [::1] part is not exercised", want)
	}
	port := tcpListen(t, func(c *net.TCPConn) {
		line, _ := bufio.NewReader(c).ReadString('\n')
		fmt.Fprintf(c, "echo: %s", line)
	})
	s := startServer(t, "")
	fw := tcpStartForward(t, s, fmt.Sprintf("-L localhost:0:127.0.0.1:%d", port), "-D localhost:0")
	var lAddrs, dAddrs []string
	text, ok := fw.p.stderr.waitMatch(waitTimeout, func(text string) bool {
		lAddrs, dAddrs = lAddrs[:0], dAddrs[:0]
		for _, m := range tcpForwardLine.FindAllStringSubmatch(text, -1) {
			if m[1] != "" {
				lAddrs = append(lAddrs, m[1])
			} else {
				dAddrs = append(dAddrs, m[2])
			}
		}
		return len(lAddrs) >= len(want) && len(dAddrs) >= len(want)
	})
	if !ok {
		t.Fatalf("want %d forwarding and %d SOCKS5 lines for %v; stderr:\n%s", len(want), len(want), want, text)
	}
	for _, kind := range []struct {
		flag  string
		addrs []string
	}{{"-L", lAddrs}, {"-D", dAddrs}} {
		if len(kind.addrs) != len(want) {
			t.Fatalf("%s localhost:0 listens on %v, want %v", kind.flag, kind.addrs, want)
		}
		var firstPort string
		for i, addr := range kind.addrs {
			host, p, err := net.SplitHostPort(addr)
			if err != nil || host != want[i] {
				t.Fatalf("%s localhost:0 listens on %v, want %v", kind.flag, kind.addrs, want)
			}
			if i == 0 {
				firstPort = p
			} else if p != firstPort {
				t.Errorf("%s localhost:0 listens on %v: want one port for all", kind.flag, kind.addrs)
			}
		}
	}
	for _, addr := range lAddrs {
		c := tcpDial(t, addr)
		fmt.Fprintf(c, "via %s\n", addr)
		if b, err := io.ReadAll(c); err != nil || string(b) != "echo: via "+addr+"\n" {
			t.Errorf("through -L %s: %q, %v", addr, b, err)
		}
	}
	for _, addr := range dAddrs {
		c := tcpDial(t, addr)
		if _, err := c.Write([]byte{5, 1, 0}); err != nil {
			t.Fatal(err)
		}
		var m [2]byte
		if _, err := io.ReadFull(c, m[:]); err != nil || m != [2]byte{5, 0} {
			t.Errorf("SOCKS5 on %s: method reply %v, %v", addr, m, err)
		}
	}
}

// TestForwardCompress: `sidecar forward --compress` on each transport says
// whether compression took effect (on over both WebSocket mappings, no
// effect over WebTransport), and a 2 MiB exchange each way crosses intact
// (SHA-256 at both ends): the host's permessage-deflate and ours agree.
func TestForwardCompress(t *testing.T) {
	t.Parallel()
	const size = 2 << 20
	port := tcpListen(t, func(c *net.TCPConn) {
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, _ = io.CopyN(c, tcpStream(7, 1), size)
		}()
		h := sha256.New()
		_, _ = io.Copy(h, c)
		<-done
		_, _ = c.Write(h.Sum(nil)) // after the download: the upload's checksum
		_ = c.CloseWrite()
	})
	s := startServer(t, "")
	for _, tc := range []struct{ transport, notice string }{
		{"ahp", "compression on (WebSocket permessage-deflate)"},
		{"websocket", "compression on (WebSocket permessage-deflate)"},
		{"webtransport", "--compress has no effect over WebTransport"},
	} {
		t.Run(tc.transport, func(t *testing.T) {
			url := s.url
			if tc.transport != "ahp" {
				url = "https://" + s.host + "/"
			}
			fw := tcpStartForwardAt(t, s, url, "--compress", "--transport "+tc.transport, fmt.Sprintf("-L 127.0.0.1:0:127.0.0.1:%d", port))
			if _, ok := fw.p.stderr.waitMatch(waitTimeout, func(s string) bool { return strings.Contains(s, tc.notice) }); !ok {
				t.Fatalf("no %q; stderr:\n%s", tc.notice, fw.p.stderr.String())
			}
			c, err := net.Dial("tcp", fw.addrs[0])
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(waitTimeout))
			go func() {
				_, _ = io.CopyN(c, tcpStream(7, 0), size)
				_ = c.(*net.TCPConn).CloseWrite()
			}()
			got := sha256.New()
			if _, err := io.CopyN(got, c, size); err != nil {
				t.Fatalf("download: %v", err)
			}
			if sum := tcpStreamSum(7, 1, size); !bytes.Equal(got.Sum(nil), sum[:]) {
				t.Fatal("the download differs from what the destination sent")
			}
			echo := make([]byte, sha256.Size)
			if _, err := io.ReadFull(c, echo); err != nil {
				t.Fatalf("the destination's checksum of the upload: %v", err)
			}
			if sum := tcpStreamSum(7, 0, size); !bytes.Equal(echo, sum[:]) {
				t.Fatal("the upload differs from what the client sent")
			}
		})
	}
}

// TestForwardKilledResets: when either end of a forward dies at once
// (SIGKILL), the program on the other side of it gets a reset, never the
// EOF of a complete stream: the destination of an upload cut short when
// the daemon is killed, and the local program of a download cut short
// when `sidecar forward` is. (Each end arms SO_LINGER 0 on its sockets
// and disarms it for a graceful close; TestForwardHalfClose shows that
// one still ends with EOF and every byte.)
func TestForwardKilledResets(t *testing.T) {
	t.Parallel()
	for _, killed := range []string{"daemon", "forward"} {
		t.Run(killed, func(t *testing.T) {
			t.Parallel()
			const chunk = 64 << 10
			read := make(chan struct{}, 1)
			ended := make(chan error, 1)
			port := tcpListen(t, func(c *net.TCPConn) {
				if killed == "forward" {
					_, _ = c.Write(make([]byte, chunk)) // a download, never ended
				}
				buf := make([]byte, 32<<10)
				total := 0
				for {
					n, err := c.Read(buf)
					total += n
					if total >= chunk && killed == "daemon" {
						select {
						case read <- struct{}{}:
						default:
						}
					}
					if err != nil {
						ended <- err
						return
					}
				}
			})
			s := startServer(t, "")
			fw := tcpStartForward(t, s, fmt.Sprintf("-L 127.0.0.1:0:127.0.0.1:%d", port))
			c, err := net.Dial("tcp", fw.addrs[0])
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(waitTimeout))
			if killed == "daemon" {
				if _, err := c.Write(make([]byte, chunk)); err != nil { // an upload, never ended
					t.Fatal(err)
				}
				select {
				case <-read:
				case <-time.After(waitTimeout):
					t.Fatal("the destination did not get the upload's start")
				}
				_ = s.p.cmd.Process.Kill()
				select {
				case err := <-ended:
					if !errors.Is(err, syscall.ECONNRESET) {
						t.Fatalf("the destination's read ended with %v, want ECONNRESET (not the EOF of a complete upload)", err)
					}
				case <-time.After(waitTimeout):
					t.Fatal("the destination's read did not end")
				}
				return
			}
			if _, err := io.ReadFull(c, make([]byte, chunk)); err != nil {
				t.Fatalf("download start: %v", err)
			}
			_ = fw.p.cmd.Process.Kill()
			_, err = c.Read(make([]byte, 1))
			if !errors.Is(err, syscall.ECONNRESET) {
				t.Fatalf("the local read ended with %v, want ECONNRESET (not the EOF of a complete download)", err)
			}
		})
	}
}
