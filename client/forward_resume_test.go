package client_test

import (
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/sidecar-dev/sidecar/client"
)

// lineLog collects a Forwarder's log lines.
type lineLog struct{ lines chan string }

func (l *lineLog) Write(p []byte) (int, error) {
	l.lines <- string(p)
	return len(p), nil
}

// TestForwardOpensOnceResumed: connections accepted by -L while the
// connection to the host is down wait and open once it resumed, at most
// MaxOpening of them (2 here) accepted: one more waits in the listen
// backlog, not reset, and opens once a slot frees; a
// SOCKS5 CONNECT (-D) made meanwhile is answered once resumed; and a
// connection open at the cut carries on after it.
func TestForwardOpensOnceResumed(t *testing.T) {
	ctx := testCtx(t)
	echoPort := loopbackServer(t, func(c *net.TCPConn) { _, _ = io.Copy(c, c) })
	h := newRealHost(t, nil)
	st := newStatuses()
	c := h.connect(ctx, st)
	log := &lineLog{lines: make(chan string, 16)}
	fw := client.NewForwarder(c, client.ForwarderOptions{Log: log, MaxOpening: 2})
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := fw.ServeLocal(l, "127.0.0.1", echoPort); err != nil {
		t.Fatal(err)
	}
	defer func() {
		fw.Close()
		_ = fw.Wait(ctx)
	}()
	dial := func() *net.TCPConn {
		t.Helper()
		lc, err := net.DialTimeout("tcp4", l.Addr().String(), testDeadline)
		if errors.Is(err, syscall.ECONNRESET) {
			return nil // reset before connect returned: refused
		}
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = lc.Close() })
		_ = lc.SetDeadline(time.Now().Add(testDeadline))
		return lc.(*net.TCPConn)
	}
	roundTrip := func(lc *net.TCPConn, msg string) error {
		if _, err := io.WriteString(lc, msg); err != nil {
			return err
		}
		b := make([]byte, len(msg))
		if _, err := io.ReadFull(lc, b); err != nil {
			return err
		}
		if string(b) != msg {
			return errors.New("echo differs: " + string(b))
		}
		return nil
	}
	before := dial()
	if err := roundTrip(before, "before\n"); err != nil {
		t.Fatal(err)
	}
	// -D: a second forwarder on the same Conn, a SOCKS5 proxy.
	socks := client.NewForwarder(c, client.ForwarderOptions{Log: io.Discard})
	sl, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := socks.ServeSOCKS(sl); err != nil {
		t.Fatal(err)
	}
	defer func() {
		socks.Close()
		_ = socks.Wait(ctx)
	}()
	h.d.Refuse(errors.New("connection refused"))
	h.d.CutLast()
	st.await(t, client.Lost)
	// A SOCKS5 CONNECT while the connection is down: answered once resumed.
	sc, err := net.DialTimeout("tcp4", sl.Addr().String(), testDeadline)
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	_ = sc.SetDeadline(time.Now().Add(testDeadline))
	port := echoPort
	if _, err := sc.Write([]byte{5, 1, 0, 5, 1, 0, 1, 127, 0, 0, 1, byte(port >> 8), byte(port)}); err != nil {
		t.Fatal(err)
	}
	waiting := []*net.TCPConn{dial(), dial(), dial()}
	h.d.Refuse(nil)
	st.await(t, client.Resumed)
	ok, reset := 0, 0
	for i, lc := range waiting {
		if lc == nil {
			reset++
			continue
		}
		switch err := roundTrip(lc, "after\n"); {
		case err == nil:
			ok++
		case errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE):
			reset++
		default:
			t.Errorf("connection %d: %v", i, err)
		}
	}
	if ok != 3 || reset != 0 {
		t.Errorf("%d connections opened once resumed and %d were reset; want 3 and 0 (the third waits for a slot)", ok, reset)
	}
	select {
	case line := <-log.lines:
		t.Errorf("a line while connections waited: %q", line)
	default:
	}
	if err := roundTrip(before, "still\n"); err != nil {
		t.Errorf("the connection open at the cut: %v", err)
	}
	var reply [2 + 8]byte // method choice, then the CONNECT reply (IPv4)
	if _, err := io.ReadFull(sc, reply[:]); err != nil || reply[3] != 0 {
		t.Fatalf("SOCKS5 CONNECT made while reconnecting: reply % x, %v", reply, err)
	}
	var rest [2]byte
	if _, err := io.ReadFull(sc, rest[:]); err != nil {
		t.Fatal(err)
	}
	if err := roundTrip(sc.(*net.TCPConn), "socks\n"); err != nil {
		t.Errorf("through -D after the resume: %v", err)
	}
}
