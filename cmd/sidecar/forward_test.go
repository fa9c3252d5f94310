package main

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/sidecar-dev/sidecar/client"
)

// TestListenNetwork: -L and -D listen as ssh does: an IPv4 bind address
// (0.0.0.0 included) on IPv4 only, an IPv6 one on IPv6 only, a name (or
// anything unparsable, left to net.Listen's error) on both.
func TestListenNetwork(t *testing.T) {
	for bind, want := range map[string]string{
		"0.0.0.0:8080":   "tcp4",
		"127.0.0.1:8080": "tcp4",
		"[::]:8080":      "tcp6",
		"[::1]:8080":     "tcp6",
		"localhost:8080": "tcp",
		":8080":          "tcp",
		"no-port":        "tcp",
	} {
		if got := listenNetwork(bind); got != want {
			t.Errorf("listenNetwork(%q) = %q, want %q", bind, got, want)
		}
	}
}

// hasIPv6Loopback reports whether this machine can listen on [::1].
func hasIPv6Loopback() bool {
	l, err := net.Listen("tcp6", "[::1]:0")
	if err != nil {
		return false
	}
	_ = l.Close()
	return true
}

// staticLookup resolves every name to addrs.
func staticLookup(addrs ...string) lookupFunc {
	return func(context.Context, string) ([]net.IPAddr, error) {
		var out []net.IPAddr
		for _, a := range addrs {
			out = append(out, net.IPAddr{IP: net.ParseIP(a)})
		}
		return out, nil
	}
}

// failingListen listens for real, except on network, where it fails with
// errno as net.Listen would; every real listener is kept in *opened.
func failingListen(network string, errno syscall.Errno, opened *[]net.Listener) listenFunc {
	return func(ctx context.Context, nw, addr string) (net.Listener, error) {
		if nw == network {
			return nil, &net.OpError{Op: "listen", Net: nw, Err: os.NewSyscallError("bind", errno)}
		}
		l, err := listenTCP(ctx, nw, addr)
		if err == nil {
			*opened = append(*opened, l)
		}
		return l, err
	}
}

func closeAll(ls []net.Listener) {
	for _, l := range ls {
		_ = l.Close()
	}
}

// acceptsOn dials l's address and accepts the connection on l.
func acceptsOn(t *testing.T, l net.Listener) {
	t.Helper()
	c, err := net.DialTimeout("tcp", l.Addr().String(), 5*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", l.Addr(), err)
	}
	defer c.Close()
	_ = l.(*net.TCPListener).SetDeadline(time.Now().Add(5 * time.Second))
	a, err := l.Accept()
	if err != nil {
		t.Fatalf("accept on %s: %v", l.Addr(), err)
	}
	_ = a.Close()
}

// failLookup is a lookupFunc for binds that must not be resolved: any
// call fails the test.
func failLookup(t *testing.T) lookupFunc {
	return func(_ context.Context, host string) ([]net.IPAddr, error) {
		t.Errorf("%q resolved, want no lookup", host)
		return nil, errors.New("no lookup")
	}
}

// TestListenBind: a bind name listens on every address it resolves to,
// on one port, as ssh does; an address family the machine lacks is
// skipped while another address is bound; any other failure closes what
// was bound; a literal address is not resolved.
func TestListenBind(t *testing.T) {
	ctx := context.Background()
	noLookup := failLookup(t)

	t.Run("name binds every address on one port", func(t *testing.T) {
		ls, err := listenBind(ctx, "localhost:0", staticLookup("127.0.0.1", "::1"), listenTCP)
		if err != nil {
			t.Fatal(err)
		}
		defer closeAll(ls)
		want := []string{"127.0.0.1"}
		if hasIPv6Loopback() {
			want = append(want, "::1")
		} else {
			t.Log("no IPv6 loopback here: [::1] skipped")
		}
		if len(ls) != len(want) {
			t.Fatalf("%d listeners, want %d (%v)", len(ls), len(want), want)
		}
		port := ls[0].Addr().(*net.TCPAddr).Port
		for i, l := range ls {
			a := l.Addr().(*net.TCPAddr)
			if a.IP.String() != want[i] || a.Port != port {
				t.Errorf("listener %d on %v, want %s port %d", i, a, want[i], port)
			}
			acceptsOn(t, l)
		}
	})

	t.Run("link-local without a zone", func(t *testing.T) {
		einval := func(context.Context, string, string) (net.Listener, error) {
			return nil, &net.OpError{Op: "listen", Net: "tcp6", Err: os.NewSyscallError("bind", syscall.EINVAL)}
		}
		_, err := listenBind(ctx, "[fe80::1]:8080", noLookup, einval)
		want := "cannot listen on [fe80::1]:8080: invalid argument (a link-local address needs its interface: [fe80::1%eth0])"
		if err == nil || err.Error() != want {
			t.Errorf("error %v, want %q", err, want)
		}
	})

	for _, errno := range []syscall.Errno{syscall.EADDRNOTAVAIL, syscall.EAFNOSUPPORT} {
		t.Run("no IPv6 is skipped: "+errno.Error(), func(t *testing.T) {
			var opened []net.Listener
			ls, err := listenBind(ctx, "localhost:0", staticLookup("::1", "127.0.0.1"), failingListen("tcp6", errno, &opened))
			if err != nil {
				t.Fatal(err)
			}
			defer closeAll(ls)
			if len(ls) != 1 || ls[0].Addr().(*net.TCPAddr).IP.String() != "127.0.0.1" {
				t.Fatalf("listeners %v, want 127.0.0.1 only", ls)
			}
			acceptsOn(t, ls[0])
		})
	}

	t.Run("no family at all fails", func(t *testing.T) {
		var opened []net.Listener
		_, err := listenBind(ctx, "localhost:8080", staticLookup("::1"), failingListen("tcp6", syscall.EADDRNOTAVAIL, &opened))
		want := "cannot listen on [::1]:8080 (localhost): cannot assign requested address"
		if err == nil || err.Error() != want {
			t.Fatalf("error %v, want %q", err, want)
		}
	})

	t.Run("another failure closes the listeners bound", func(t *testing.T) {
		var opened []net.Listener
		_, err := listenBind(ctx, "localhost:0", staticLookup("127.0.0.1", "::1"), failingListen("tcp6", syscall.EADDRINUSE, &opened))
		if err == nil || !strings.HasPrefix(err.Error(), "cannot listen on [::1]:") || !strings.HasSuffix(err.Error(), " (localhost): address already in use") {
			t.Fatalf("error %v, want cannot listen on [::1]:PORT (localhost): address already in use", err)
		}
		if len(opened) != 1 {
			t.Fatalf("%d listeners opened, want 1 (127.0.0.1)", len(opened))
		}
		if _, err := opened[0].Accept(); !errors.Is(err, net.ErrClosed) {
			t.Errorf("the 127.0.0.1 listener is still open (Accept: %v)", err)
		}
	})

	t.Run("lookup failure", func(t *testing.T) {
		lookup := func(context.Context, string) ([]net.IPAddr, error) {
			return nil, &net.DNSError{Err: "no such host", Name: "nosuch.invalid", IsNotFound: true}
		}
		_, err := listenBind(ctx, "nosuch.invalid:0", lookup, listenTCP)
		if err == nil || !strings.HasPrefix(err.Error(), "cannot listen on nosuch.invalid:0: ") {
			t.Fatalf("error %v, want cannot listen on nosuch.invalid:0: ...", err)
		}
	})

	t.Run("literal is one listener, not resolved", func(t *testing.T) {
		ls, err := listenBind(ctx, "127.0.0.1:0", noLookup, listenTCP)
		if err != nil {
			t.Fatal(err)
		}
		defer closeAll(ls)
		if len(ls) != 1 {
			t.Fatalf("%d listeners, want 1", len(ls))
		}
		acceptsOn(t, ls[0])
	})

	t.Run("literal in use", func(t *testing.T) {
		busy, err := net.Listen("tcp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer busy.Close()
		bind := busy.Addr().String()
		_, err = listenBind(ctx, bind, noLookup, listenTCP)
		if want := "cannot listen on " + bind + ": address already in use"; err == nil || err.Error() != want {
			t.Fatalf("error %v, want %q", err, want)
		}
	})
}

// TestForwardListensBeforeDialing: a -L or -D port already in use fails
// with the listen error (exit 1, not the 255 of a failed connection)
// before anything is dialled: the server
// the URL names (a listener that never answers, so that a dial would hang
// until --connect-timeout) gets no connection. A failed dial closes the
// listeners already bound.
// silentHost returns a listener that accepts and never answers (a dial to
// it only times out), closed when the test ends, its URL and client flags
// for it.
func silentHost(t *testing.T) (net.Listener, string, *connFlags) {
	t.Helper()
	silent, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { silent.Close() })
	return silent, "wss://" + silent.Addr().String() + "/ahp", &connFlags{timeout: 5 * time.Second, transport: client.TransportAuto}
}

func TestForwardListensBeforeDialing(t *testing.T) {
	busy, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	silent, url, cf := silentHost(t)
	bind := busy.Addr().String()
	for name, args := range map[string][2][]string{
		"-L":                  {{bind + ":127.0.0.1:80"}, nil},
		"-D":                  {nil, {bind}},
		"-L after a good one": {{"127.0.0.1:0:127.0.0.1:80", bind + ":127.0.0.1:80"}, nil},
	} {
		t.Run(name, func(t *testing.T) {
			err := forward(cf, url, args[0], args[1], nil)
			var ee *exitError
			given := "-L " + bind
			if name == "-D" {
				given = "-D " + bind
			}
			want := given + ": cannot listen on " + bind + ": address already in use (another program holds it: pick another local port, or 0 for any free one)"
			if !errors.As(err, &ee) || ee.code != 1 || err.Error() != want || !errors.Is(err, syscall.EADDRINUSE) {
				t.Fatalf("forward: %v, want exit 1 and %q", err, want)
			}
			// A dial would have left a connection in the backlog.
			_ = silent.(*net.TCPListener).SetDeadline(time.Now())
			if c, err := silent.Accept(); err == nil {
				_ = c.Close()
				t.Errorf("forward connected to %s before listening", url)
			}
		})
	}

	t.Run("failed dial closes the listeners", func(t *testing.T) {
		free, err := net.Listen("tcp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		bind := free.Addr().String()
		_ = free.Close()
		closed, err := net.Listen("tcp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		closedURL := "wss://" + closed.Addr().String() + "/ahp"
		_ = closed.Close()
		err = forward(cf, closedURL, []string{bind + ":127.0.0.1:80"}, nil, nil)
		if err == nil || !strings.Contains(err.Error(), "nothing is listening") {
			t.Fatalf("forward to %s: %v, want nothing is listening", closedURL, err)
		}
		l, err := net.Listen("tcp4", bind)
		if err != nil {
			t.Fatalf("%s still bound after the dial failed: %v", bind, err)
		}
		_ = l.Close()
	})
}

// TestParseForwardSpecs: -L and -D read the bind address as ssh does: no
// bind part is 127.0.0.1, an empty one or * all interfaces (anyHost), a
// name or an address stays; an unbracketed IPv6 address is pointed out.
func TestParseForwardSpecs(t *testing.T) {
	locals := []struct {
		spec, bind, given, host string
		hostPort                int
	}{
		{"5602:h:80", "127.0.0.1:5602", "5602", "h", 80},
		{":5602:h:80", "*:5602", ":5602", "h", 80},
		{"*:5602:h:80", "*:5602", "*:5602", "h", 80},
		{"localhost:5602:h:80", "localhost:5602", "localhost:5602", "h", 80},
		{"0.0.0.0:5602:h:80", "0.0.0.0:5602", "0.0.0.0:5602", "h", 80},
		{"[::1]:05602:[::1]:80", "[::1]:5602", "[::1]:05602", "::1", 80},
	}
	for _, tt := range locals {
		f, err := parseLocal(tt.spec)
		if err != nil || f.bind != tt.bind || f.given != tt.given || f.host != tt.host || f.hostPort != tt.hostPort {
			t.Errorf("parseLocal(%q) = %+v, %v; want bind %q, given %q, %s:%d", tt.spec, f, err, tt.bind, tt.given, tt.host, tt.hostPort)
		}
	}
	dynamics := []struct{ spec, bind, given string }{
		{"1080", "127.0.0.1:1080", "1080"},
		{":1080", "*:1080", ":1080"},
		{"*:1080", "*:1080", "*:1080"},
		{"[::1]:1080", "[::1]:1080", "[::1]:1080"},
	}
	for _, tt := range dynamics {
		bind, given, err := parseDynamic(tt.spec)
		if err != nil || bind != tt.bind || given != tt.given {
			t.Errorf("parseDynamic(%q) = %q, %q, %v; want %q, %q", tt.spec, bind, given, err, tt.bind, tt.given)
		}
	}
	for spec, want := range map[string]string{
		"5605:::1:5600":       `bad -L "5605:::1:5600": put IPv6 addresses in brackets: [::1]`,
		"::1:5605:h:80":       `bad -L "::1:5605:h:80": put IPv6 addresses in brackets: [::1]`,
		"5605:fe80::1:80":     `bad -L "5605:fe80::1:80": put IPv6 addresses in brackets: [::1]`,
		"5605:h":              `bad -L "5605:h": want [bind:]port:host:hostport`,
		"1:2:3:4:5":           `bad -L "1:2:3:4:5": want [bind:]port:host:hostport`,
		"x:h:80":              `bad -L "x:h:80": "x" is not a port (0 to 65535)`,
		"70000:h:80":          `bad -L "70000:h:80": "70000" is not a port (0 to 65535)`,
		"+80:h:80":            `bad -L "+80:h:80": "+80" is not a port (0 to 65535)`,
		"5822:h:0":            `bad -L "5822:h:0": "0" is not a port (1 to 65535)`,
		"[::1]:x:[::1]:80":    `bad -L "[::1]:x:[::1]:80": "x" is not a port (0 to 65535)`,
		"5605::80":            `bad -L "5605::80": no destination host`,
		"48501: 127.0.0.1:80": `bad -L "48501: 127.0.0.1:80": destination host " 127.0.0.1" must be a DNS name or an IP address, without white space`,
		"8080:http//h:80":     `bad -L "8080:http//h:80": destination host "http//h" must be a DNS name or an IP address, not a URL`,
		"5605:[::1:80":        `bad -L "5605:[::1:80": unbalanced brackets`,
		"-D [::1:1080":        `bad -D "[::1:1080": unbalanced brackets`,
		"-D ::1:1080":         `bad -D "::1:1080": put IPv6 addresses in brackets: [::1]`,
		"-D 1:2:3":            `bad -D "1:2:3": want [bind:]port`,
		"-D localhost:1x80":   `bad -D "localhost:1x80": "1x80" is not a port (0 to 65535)`,
		"5822:h:-80":          `bad -L "5822:h:-80": "-80" is not a port (1 to 65535)`,
		"5822:h:+80":          `bad -L "5822:h:+80": "+80" is not a port (1 to 65535)`,
	} {
		var err error
		if d, ok := strings.CutPrefix(spec, "-D "); ok {
			_, _, err = parseDynamic(d)
		} else {
			_, err = parseLocal(spec)
		}
		if err == nil || err.Error() != want {
			t.Errorf("%q: error %v, want %q", spec, err, want)
		}
	}
}

// TestForwardSamePortTwice: the same bind address and port given twice
// (-L and -L, or -L and -D) is a usage error (exit 2) that says so, found
// before anything is bound; port 0 and different bind addresses are no
// clash.
func TestForwardSamePortTwice(t *testing.T) {
	free, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(free.Addr().(*net.TCPAddr).Port)
	_ = free.Close()
	cf := &connFlags{timeout: 5 * time.Second, transport: client.TransportAuto}
	for _, tt := range []struct {
		locals, dynamics []string
		want             string
	}{
		{[]string{port + ":a:1", port + ":b:2"}, nil, "-L " + port + " given twice"},
		{[]string{"*:" + port + ":a:1", ":" + port + ":b:2"}, nil, "-L *:" + port + " and -L :" + port + " listen on the same port"},
		{[]string{port + ":a:1"}, []string{"127.0.0.1:" + port}, "-L " + port + " and -D 127.0.0.1:" + port + " listen on the same port"},
		{nil, []string{port, port}, "-D " + port + " given twice"},
		// A wildcard and an address of its family clash too (Linux refuses
		// the second bind even with SO_REUSEADDR).
		{[]string{"*:" + port + ":a:1", "127.0.0.1:" + port + ":b:2"}, nil, "-L *:" + port + " and -L 127.0.0.1:" + port + " listen on the same port"},
		{nil, []string{":" + port, port}, "-D :" + port + " and -D " + port + " listen on the same port"},
		{nil, []string{"[::1]:" + port, "[::]:" + port}, "-D [::1]:" + port + " and -D [::]:" + port + " listen on the same port"},
	} {
		err := forward(cf, "wss://127.0.0.1:1/ahp", tt.locals, tt.dynamics, nil)
		var ee *exitError
		if !errors.As(err, &ee) || ee.code != 2 || err.Error() != tt.want {
			t.Errorf("-L %q -D %q: %v, want exit 2 and %q", tt.locals, tt.dynamics, err, tt.want)
		}
	}
	for _, binds := range [][]string{
		{"127.0.0.1:0", "127.0.0.1:0"},
		{"127.0.0.1:" + port, "localhost:" + port}, // a name: left to the kernel
		{"127.0.0.1:" + port, "127.0.0.2:" + port},
		{"0.0.0.0:" + port, "[::1]:" + port}, // families apart (tcp4, tcp6 v6-only)
	} {
		if msg := sameLocalPort(binds, []string{"-L a", "-L b"}); msg != "" {
			t.Errorf("sameLocalPort(%q) = %q, want no clash", binds, msg)
		}
	}
}

// loopbackListen listens on loopback in place of the wildcard addresses
// (0.0.0.0 becomes 127.0.0.1, [::] becomes [::1], the port kept), so that
// tests never listen on other interfaces; it records the network and
// address asked for, and fails on the networks in fail with their errno.
func loopbackListen(calls *[]string, fail map[string]syscall.Errno) listenFunc {
	return func(ctx context.Context, network, addr string) (net.Listener, error) {
		*calls = append(*calls, network+" "+addr)
		if errno, ok := fail[network]; ok {
			return nil, &net.OpError{Op: "listen", Net: network, Err: os.NewSyscallError("bind", errno)}
		}
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		switch host {
		case "0.0.0.0":
			host = "127.0.0.1"
		case "::":
			host = "::1"
		}
		return listenTCP(ctx, network, net.JoinHostPort(host, port))
	}
}

// TestListenBindAllInterfaces: * (an empty or * bind address) listens on
// 0.0.0.0 over tcp4 and on [::] over tcp6, on one port, without a lookup;
// a family the machine lacks is skipped.
func TestListenBindAllInterfaces(t *testing.T) {
	ctx := context.Background()
	noLookup := failLookup(t)
	t.Run("both families", func(t *testing.T) {
		if !hasIPv6Loopback() {
			t.Skip("no IPv6 loopback here to stand in for [::]")
		}
		var calls []string
		ls, err := listenBind(ctx, "*:0", noLookup, loopbackListen(&calls, nil))
		if err != nil {
			t.Fatal(err)
		}
		defer closeAll(ls)
		if len(ls) != 2 {
			t.Fatalf("%d listeners, want 2", len(ls))
		}
		port := strconv.Itoa(ls[0].Addr().(*net.TCPAddr).Port)
		if want := []string{"tcp4 0.0.0.0:0", "tcp6 [::]:" + port}; !slices.Equal(calls, want) {
			t.Errorf("listened on %q, want %q", calls, want)
		}
		for _, l := range ls {
			acceptsOn(t, l)
		}
	})
	t.Run("no IPv6", func(t *testing.T) {
		var calls []string
		ls, err := listenBind(ctx, "*:0", noLookup, loopbackListen(&calls, map[string]syscall.Errno{"tcp6": syscall.EAFNOSUPPORT}))
		if err != nil {
			t.Fatal(err)
		}
		defer closeAll(ls)
		if len(ls) != 1 || len(calls) != 2 || calls[0] != "tcp4 0.0.0.0:0" {
			t.Fatalf("listeners %v after %q, want one on 0.0.0.0 (tcp4), [::] tried", ls, calls)
		}
		acceptsOn(t, ls[0])
	})
}

// TestForwardHidesOrdinary: forward refuses --ordinary, so its help does
// not offer it; the other client commands do.
func TestForwardHidesOrdinary(t *testing.T) {
	if f := forwardCmd().Flags().Lookup("ordinary"); f == nil || !f.Hidden {
		t.Errorf("forward's --ordinary: %+v, want a hidden flag", f)
	}
	var help bytes.Buffer
	fc := forwardCmd()
	fc.SetOut(&help)
	fc.SetArgs([]string{"--help"})
	if err := fc.Execute(); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(help.String(), "--ordinary") || !strings.Contains(help.String(), "--connect-timeout") {
		t.Errorf("forward --help lists --ordinary, or not the other connection flags:\n%s", help.String())
	}
	if f := lsCmd().Flags().Lookup("ordinary"); f == nil || f.Hidden {
		t.Errorf("ls's --ordinary: %+v, want a visible flag", f)
	}
}

// TestForwardSameAddressResolved: two -L/-D whose bind name and address
// resolve to the same local address (-L localhost:P and -L 127.0.0.1:P)
// are the usage error the literal forms get (exit 2, naming both flags as
// typed), found when the second bind fails on our own first listener,
// before anything is dialled; a port held by another program is still the
// listen error (exit 1).
func TestForwardSameAddressResolved(t *testing.T) {
	addrs, err := net.DefaultResolver.LookupHost(context.Background(), "localhost")
	if err != nil || !slices.Contains(addrs, "127.0.0.1") {
		t.Skipf("localhost does not resolve to 127.0.0.1 here (%q, %v)", addrs, err)
	}
	silent, url, cf := silentHost(t)
	free, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := strconv.Itoa(free.Addr().(*net.TCPAddr).Port)
	_ = free.Close()
	for _, tt := range []struct {
		locals, dynamics []string
		want             string
	}{
		{[]string{"localhost:" + p + ":127.0.0.1:80", "127.0.0.1:" + p + ":127.0.0.1:81"}, nil,
			"-L localhost:" + p + " and -L 127.0.0.1:" + p + " listen on the same port"},
		{[]string{"127.0.0.1:" + p + ":127.0.0.1:80", "localhost:" + p + ":127.0.0.1:81"}, nil,
			"-L 127.0.0.1:" + p + " and -L localhost:" + p + " listen on the same port"},
		{[]string{p + ":127.0.0.1:80"}, []string{"localhost:" + p},
			"-L " + p + " and -D localhost:" + p + " listen on the same port"},
	} {
		err := forward(cf, url, tt.locals, tt.dynamics, nil)
		var ee *exitError
		if !errors.As(err, &ee) || ee.code != 2 || err.Error() != tt.want {
			t.Errorf("-L %q -D %q: %v, want exit 2 and %q", tt.locals, tt.dynamics, err, tt.want)
		}
	}
	// Nothing was dialled (a dial would have left a connection in the
	// backlog), and nothing stays bound.
	_ = silent.(*net.TCPListener).SetDeadline(time.Now())
	if c, err := silent.Accept(); err == nil {
		_ = c.Close()
		t.Errorf("forward connected to %s", url)
	}
	l, err := net.Listen("tcp4", "127.0.0.1:"+p)
	if err != nil {
		t.Fatalf("127.0.0.1:%s still bound: %v", p, err)
	}
	defer l.Close()

	// Held by someone else (l): not ours to name.
	err = forward(cf, url, []string{"localhost:" + p + ":127.0.0.1:80"}, nil, nil)
	var ee *exitError
	want := "-L localhost:" + p + ": cannot listen on 127.0.0.1:" + p + " (localhost): address already in use (another program holds it: pick another local port, or 0 for any free one)"
	if !errors.As(err, &ee) || ee.code != 1 || err.Error() != want {
		t.Errorf("port held by another listener: %v, want exit 1 and %q", err, want)
	}
}

// TestForwardArgs: forward takes one URL; a missing one and extra
// arguments are said in our words, naming what is extra, as usage errors
// (exit 2); with --via the URL may be left out.
func TestForwardArgs(t *testing.T) {
	t.Setenv("SIDECAR_CERT_HASH", "")
	for _, tt := range []struct {
		args []string
		want string // "" for none
	}{
		{nil, "missing URL: sidecar forward URL -L [bind:]port:host:hostport or -D [bind:]port"},
		{[]string{"-L", "8080:127.0.0.1:80"}, "missing URL: sidecar forward URL -L [bind:]port:host:hostport or -D [bind:]port"},
		{[]string{"wss://h/ahp", "extra"}, `unexpected argument "extra": forward takes one URL; give forwardings with -L/-D`},
		{[]string{"wss://h/ahp", "8080:127.0.0.1:80"}, `unexpected argument "8080:127.0.0.1:80": forward takes one URL; give forwardings with -L/-D`},
		{[]string{"wss://h/ahp", "a", "b c"}, `unexpected arguments "a" "b c": forward takes one URL; give forwardings with -L/-D`},
		{[]string{"--via", "cat", "stdio:", "extra"}, `unexpected argument "extra": forward takes one URL; give forwardings with -L/-D`},
		{[]string{"wss://h/ahp", "-L", "8080:127.0.0.1:80"}, ""},
		{[]string{"--via", "cat", "-L", "8080:127.0.0.1:80"}, ""}, // "stdio:" put in
		{[]string{"--via", "cat", "stdio:", "-D", "1080"}, ""},
	} {
		cmd := forwardCmd()
		if err := cmd.ParseFlags(tt.args); err != nil {
			t.Fatalf("%q: %v", tt.args, err)
		}
		err := cmd.ValidateArgs(cmd.Flags().Args())
		got := ""
		if err != nil {
			got = err.Error()
		}
		if got != tt.want {
			t.Errorf("forward %q: %q, want %q", tt.args, got, tt.want)
		}
	}

	t.Run("exit 2", func(t *testing.T) {
		for args, want := range map[string]string{
			"forward":                   "missing URL: sidecar forward URL -L [bind:]port:host:hostport or -D [bind:]port (see sidecar forward --help)",
			"forward wss://h/ahp extra": `unexpected argument "extra": forward takes one URL; give forwardings with -L/-D (see sidecar forward --help)`,
		} {
			root := &cobra.Command{Use: "sidecar", SilenceUsage: true, SilenceErrors: true}
			root.AddCommand(forwardCmd())
			usageErrors(root)
			root.SetArgs(strings.Fields(args))
			err := root.Execute()
			var ee *exitError
			if !errors.As(err, &ee) || ee.code != 2 || err.Error() != want {
				t.Errorf("sidecar %s: %v, want exit 2 and %q", args, err, want)
			}
		}
	})
}

// TestForwardHelpExitStatus: forward --help gives every exit status, as
// the code has them: 0 after a signal once connected, 128+n while
// connecting (dialFailed), 1 when a local port cannot be bound
// (listenFailed), 255 when the connection is lost and not resumed
// (runUntil) or cannot be made, 2 for usage errors.
func TestForwardHelpExitStatus(t *testing.T) {
	const want = `Exit status: 0 after Ctrl-C, SIGTERM or SIGHUP once connected (130, 143
or 129 while still connecting); 1 when a local port cannot be bound (in
use, say: nothing is dialled then); 255 when the connection cannot be
made, or is lost and cannot be resumed; 2 for a usage error.`
	if long := forwardCmd().Long; !strings.HasSuffix(long, "\n\n"+want) {
		t.Errorf("forward --help ends\n%s\nwant it to end with the paragraph\n%s", long[max(0, len(long)-400):], want)
	}
	for sig, code := range map[syscall.Signal]int{syscall.SIGINT: 130, syscall.SIGTERM: 143, syscall.SIGHUP: 129} {
		var ee *exitError
		if err := dialFailed(errors.New("x"), sig); !errors.As(err, &ee) || ee.code != code {
			t.Errorf("%v while connecting: %v, want exit %d", sig, err, code)
		}
	}
}
