package main

import (
	"context"
	"errors"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

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

// TestListenBind: a bind name listens on every address it resolves to,
// on one port, as ssh does; an address family the machine lacks is
// skipped while another address is bound; any other failure closes what
// was bound; a literal address is not resolved.
func TestListenBind(t *testing.T) {
	ctx := context.Background()
	noLookup := func(_ context.Context, host string) ([]net.IPAddr, error) {
		t.Errorf("literal address resolved (%q)", host)
		return nil, errors.New("no lookup")
	}

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
// with the listen error (exit 255) before anything is dialled: the server
// the URL names (a listener that never answers, so that a dial would hang
// until --connect-timeout) gets no connection. A failed dial closes the
// listeners already bound.
func TestForwardListensBeforeDialing(t *testing.T) {
	busy, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	silent, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	url := "wss://" + silent.Addr().String() + "/ahp"
	cf := &connFlags{timeout: 5 * time.Second, transport: client.TransportAuto}
	bind := busy.Addr().String()
	for name, args := range map[string][2][]string{
		"-L":                  {{bind + ":127.0.0.1:80"}, nil},
		"-D":                  {nil, {bind}},
		"-L after a good one": {{"127.0.0.1:0:127.0.0.1:80", bind + ":127.0.0.1:80"}, nil},
	} {
		t.Run(name, func(t *testing.T) {
			err := forward(cf, url, args[0], args[1])
			var ee *exitError
			want := "cannot listen on " + bind + ": address already in use"
			if !errors.As(err, &ee) || ee.code != 255 || err.Error() != want {
				t.Fatalf("forward: %v, want exit 255 and %q", err, want)
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
		err = forward(cf, closedURL, []string{bind + ":127.0.0.1:80"}, nil)
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
