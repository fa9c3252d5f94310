package tcp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/sidecar-dev/sidecar/rpc"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestPolicy(t *testing.T) {
	def, _ := NewPolicy([]string{"127.0.0.0/8", "::1/128"})
	wide, _ := NewPolicy([]string{"0.0.0.0/0", "::/0"})
	meta, _ := NewPolicy([]string{"0.0.0.0/0", "169.254.169.254"})
	for _, c := range []struct {
		p    *Policy
		addr string
		ok   bool
	}{
		{def, "127.0.0.1", true},
		{def, "127.1.2.3", true},
		{def, "::1", true},
		{def, "::ffff:127.0.0.1", true},
		{def, "10.0.0.1", false},
		{def, "0.0.0.0", false},
		{wide, "10.0.0.1", true},
		{wide, "0.0.0.0", false},
		{wide, "224.0.0.1", false},
		{wide, "169.254.169.254", false},
		{wide, "169.254.1.1", false},
		{wide, "fe80::1", false},
		{wide, "fd00:ec2::254", false},
		{meta, "169.254.169.254", true},
		{meta, "169.254.1.1", false},
	} {
		_, ok := c.p.Check(netip.MustParseAddr(c.addr))
		if ok != c.ok {
			t.Errorf("Check(%s) = %v, want %v", c.addr, ok, c.ok)
		}
	}
	if _, err := NewPolicy([]string{"10.0.0.0/33"}); err == nil {
		t.Error("NewPolicy accepted 10.0.0.0/33")
	}
}

type fakeResolver map[string][]netip.Addr

func (f fakeResolver) LookupNetIP(ctx context.Context, _, host string) ([]netip.Addr, error) {
	if host == "slow.test" {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	if a, ok := f[host]; ok {
		return a, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

// sendBuffer returns c's SO_SNDBUF.
func sendBuffer(t *testing.T, c *net.TCPConn) int {
	t.Helper()
	raw, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	n := -1
	if err := raw.Control(func(fd uintptr) {
		n, err = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_SNDBUF)
	}); err != nil {
		t.Fatal(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestDial(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	port := l.Addr().(*net.TCPAddr).Port
	// A port nothing listens on: bind one, close it.
	cl, _ := net.Listen("tcp", "127.0.0.1:0")
	closedPort := cl.Addr().(*net.TCPAddr).Port
	_ = cl.Close()

	pol, _ := NewPolicy([]string{"127.0.0.0/8", "::1/128"})
	d := &Dialer{Policy: pol, Resolver: fakeResolver{
		"ok.test":    {netip.MustParseAddr("127.0.0.1")},
		"meta.test":  {netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("169.254.169.254")},
		"other.test": {netip.MustParseAddr("10.1.2.3")},
	}}
	ctx := context.Background()
	c, err := d.Dial(ctx, "ok.test", port)
	if err != nil {
		t.Fatalf("dial ok.test: %v", err)
	}
	// A loopback destination gets a fixed send buffer (no autotuning up
	// to 4 MiB): a destination that does not read holds back the client
	// after LoopbackSendBuffer (Linux keeps twice the value set).
	if got, want := sendBuffer(t, c), 2*LoopbackSendBuffer; runtime.GOOS == "linux" && got != want {
		t.Errorf("SO_SNDBUF of a loopback destination: %d, want %d", got, want)
	}
	_ = c.Close()
	for _, tc := range []struct {
		host string
		port int
		kind FailKind
		msg  string
	}{
		{"127.0.0.1", closedPort, KindRefused, "refused"},
		{"meta.test", port, KindDenied, "not allowed by policy: a cloud metadata address"},
		{"other.test", port, KindDenied, "connect to other.test:"},
		{"10.0.0.1", port, KindDenied, "not allowed by policy"},
		{"nx.test", port, KindNoSuchHost, `cannot resolve "nx.test"`},
		{"[::1]", closedPort, KindRefused, "connect to [::1]:"},
	} {
		_, err := d.Dial(ctx, tc.host, tc.port)
		var oe *OpenError
		if !errors.As(err, &oe) || oe.Kind != tc.kind || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("Dial(%s:%d) = %v; want kind %d with %q", tc.host, tc.port, err, tc.kind, tc.msg)
			continue
		}
		if strings.Contains(err.Error(), "dial tcp") || strings.Contains(err.Error(), "connect: ") {
			t.Errorf("Dial(%s) message carries raw system text: %q", tc.host, err)
		}
	}
}

// TestDialTimeout: the timeout bounds the whole dial, name resolution
// included: a resolver that never answers fails the dial as KindTimeout
// exactly when it ends, 10 s (DefaultDialTimeout) when none is set. It
// runs in a synctest bubble: the resolver waits on the dial's context,
// so the bubble's clock runs the timeout out at once.
func TestDialTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pol, _ := NewPolicy([]string{"127.0.0.0/8"})
		for _, tc := range []struct {
			timeout, want time.Duration
			msg           string
		}{
			{0, DefaultDialTimeout, "timed out resolving the name after 10s"},
			{200 * time.Millisecond, 200 * time.Millisecond, "timed out resolving the name after 200ms"},
		} {
			d := &Dialer{Policy: pol, Timeout: tc.timeout, Resolver: fakeResolver{}}
			start := time.Now()
			_, err := d.Dial(context.Background(), "slow.test", 80)
			took := time.Since(start)
			var oe *OpenError
			if !errors.As(err, &oe) || oe.Kind != KindTimeout || !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("Timeout %v: Dial = %v; want KindTimeout with %q", tc.timeout, err, tc.msg)
			}
			if took != tc.want {
				t.Errorf("Timeout %v: Dial failed after %v, want %v", tc.timeout, took, tc.want)
			}
		}
	})
}

func TestListeningPorts(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	ports, err := ListeningPorts(context.Background())
	if err != nil {
		t.Skipf("listening ports not readable here: %v", err)
	}
	for _, p := range ports {
		if p.Port == port && p.Address == "127.0.0.1" {
			return
		}
	}
	t.Errorf("port %d not among the listening ports %v", port, ports)
}

// TestPollPorts: the listening ports are read at once, then every
// interval (PortsInterval, 3 s), each reading handed to publish, until
// the context ends. It runs in a synctest bubble, so the readings are
// counted against exact times; the reading itself is real (/proc).
func TestPollPorts(t *testing.T) {
	if _, err := ListeningPorts(context.Background()); err != nil {
		t.Skipf("listening ports not readable here: %v", err)
	}
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		var readings atomic.Int64
		done := make(chan struct{})
		go func() {
			defer close(done)
			PollPorts(ctx, PortsInterval, func([]rpc.ListeningPort) { readings.Add(1) }, func(err error) { t.Errorf("warned: %v", err) })
		}()
		defer func() {
			cancel()
			<-done // the context ends it
		}()
		check := func(when string, want int64) {
			t.Helper()
			synctest.Wait()
			if n := readings.Load(); n != want {
				t.Fatalf("%s: %d readings, want %d", when, n, want)
			}
		}
		check("at once", 1)
		time.Sleep(PortsInterval - time.Nanosecond)
		check("just before the interval", 1)
		time.Sleep(time.Nanosecond)
		check("after one interval", 2)
		time.Sleep(10 * PortsInterval)
		check("after eleven intervals", 12)
	})
}

// TestPolicyOwn (issue 27 item 14): the daemon's own listeners are
// refused in every spelling of their address, on their port only; one on
// the unspecified address takes every local address on its port.
func TestPolicyOwn(t *testing.T) {
	def, _ := NewPolicy([]string{"127.0.0.0/8", "::1/128"})
	wide, _ := NewPolicy([]string{"0.0.0.0/0", "::/0"})
	for _, p := range []*Policy{def, wide} {
		p.SetOwn([]netip.AddrPort{
			netip.MustParseAddrPort("[::ffff:127.0.0.1]:4433"), // as a TCPAddr may give it
			netip.MustParseAddrPort("[::]:9464"),
			netip.MustParseAddrPort("10.9.9.9:5000"),
		})
		p.localAddrs = func() []netip.Addr {
			return []netip.Addr{netip.MustParseAddr("10.1.2.3"), netip.MustParseAddr("fd00::5")}
		}
	}
	for _, c := range []struct {
		p      *Policy
		addr   string
		port   int
		reason string // "" when allowed
	}{
		{def, "127.0.0.1", 4433, "the daemon's own listener 127.0.0.1:4433 (a TCP channel may not connect back into sidecar)"},
		{def, "::ffff:127.0.0.1", 4433, "the daemon's own listener 127.0.0.1:4433 (a TCP channel may not connect back into sidecar)"},
		{def, "127.0.0.1", 4434, ""},
		{def, "127.0.0.2", 4433, ""}, // not where a listener on 127.0.0.1 accepts
		{def, "::1", 4433, ""},
		{def, "127.0.0.1", 9464, "the daemon's own listener [::]:9464 (a TCP channel may not connect back into sidecar)"},
		{def, "127.3.2.1", 9464, "the daemon's own listener [::]:9464 (a TCP channel may not connect back into sidecar)"},
		{def, "::1", 9464, "the daemon's own listener [::]:9464 (a TCP channel may not connect back into sidecar)"},
		{def, "10.1.2.3", 9464, "not in tcp.allow"}, // the allow rule speaks first
		{wide, "10.1.2.3", 9464, "the daemon's own listener [::]:9464 (a TCP channel may not connect back into sidecar)"},
		{wide, "::ffff:10.1.2.3", 9464, "the daemon's own listener [::]:9464 (a TCP channel may not connect back into sidecar)"},
		{wide, "fd00::5", 9464, "the daemon's own listener [::]:9464 (a TCP channel may not connect back into sidecar)"},
		{wide, "10.1.2.4", 9464, ""},
		{wide, "10.9.9.9", 5000, "the daemon's own listener 10.9.9.9:5000 (a TCP channel may not connect back into sidecar)"},
		{wide, "10.1.2.3", 5000, ""},
	} {
		reason, ok := c.p.CheckDest(netip.MustParseAddr(c.addr), c.port)
		if ok != (c.reason == "") || reason != c.reason {
			t.Errorf("CheckDest(%s, %d) = %q, %v; want %q", c.addr, c.port, reason, ok, c.reason)
		}
	}
}

// TestDialOwnListener (issue 27 item 14): a name that resolves to the
// daemon's own listener (localhost, a hosts-file alias) is refused
// before anything is dialled, with the rule.
func TestDialOwnListener(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	own := l.Addr().(*net.TCPAddr).AddrPort()
	pol, _ := NewPolicy([]string{"127.0.0.0/8", "::1/128"})
	pol.SetOwn([]netip.AddrPort{own})
	d := &Dialer{Policy: pol, Timeout: 2 * time.Second, Resolver: fakeResolver{
		"localhost":   {netip.MustParseAddr("::1"), netip.MustParseAddr("127.0.0.1")},
		"sidecar.lan": {netip.MustParseAddr("::ffff:127.0.0.1")},
	}}
	port := int(own.Port())
	for _, host := range []string{"127.0.0.1", "::ffff:127.0.0.1", "[::ffff:7f00:1]", "localhost", "sidecar.lan"} {
		_, err := d.Dial(context.Background(), host, port)
		var oe *OpenError
		want := fmt.Sprintf("not allowed by policy: the daemon's own listener 127.0.0.1:%d (a TCP channel may not connect back into sidecar)", port)
		if !errors.As(err, &oe) || oe.Kind != KindDenied || !strings.HasSuffix(err.Error(), want) {
			t.Errorf("Dial(%s, %d) = %v; want KindDenied ending %q", host, port, err, want)
		}
	}
	// Nothing reached the listener: an accept finds no connection.
	_ = l.(*net.TCPListener).SetDeadline(time.Now())
	if c, err := l.Accept(); err == nil {
		c.Close()
		t.Error("a refused destination was dialled")
	}
}

// TestStartPollingFirstReading (issue 27 item 7): StartPolling returns
// once the first reading is published (a host serving its root state
// after it lists the ports from the first snapshot), and its goroutine
// ends with ctx.
func TestStartPollingFirstReading(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	if _, err := ListeningPorts(context.Background()); err != nil {
		t.Skipf("listening ports not readable here: %v", err)
	}
	var mu sync.Mutex
	var got []rpc.ListeningPort
	readings := 0
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	StartPolling(ctx, &wg, time.Hour, func(ports []rpc.ListeningPort) {
		mu.Lock()
		defer mu.Unlock()
		got, readings = ports, readings+1
	}, func(err error) { t.Errorf("warned: %v", err) })
	mu.Lock()
	n, listed := readings, slices.ContainsFunc(got, func(p rpc.ListeningPort) bool { return p.Address == "127.0.0.1" && p.Port == port })
	mu.Unlock()
	if n != 1 || !listed {
		t.Errorf("when StartPolling returned: %d readings published, port %d listed %v (%v); want 1 listing it", n, port, listed, got)
	}
	cancel()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the polling goroutine did not end with its context")
	}
}
