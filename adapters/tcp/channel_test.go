package tcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/sidecar-dev/sidecar/adapters"
	"github.com/sidecar-dev/sidecar/auth"
	"github.com/sidecar-dev/sidecar/delivery"
	"github.com/sidecar-dev/sidecar/rpc"
)

// leaseSub is the creator's windowed subscription, on a Scheduler that
// does not run: nothing is sent, the stream has its whole window.
type leaseSub struct {
	conn adapters.ConnID
	st   *delivery.Stream
}

func (s *leaseSub) ClientID() string         { return "c" }
func (*leaseSub) Identity() auth.Identity    { return auth.Anonymous }
func (s *leaseSub) Conn() adapters.ConnID    { return s.conn }
func (s *leaseSub) Stream() *delivery.Stream { return s.st }
func (s *leaseSub) CanPush(int) bool         { return false }
func (s *leaseSub) Push([]byte, int) bool    { return false }
func (s *leaseSub) PushControl([]byte)       {}
func (s *leaseSub) Closing() bool            { return false }

// TestSubscribeLease: a created TCP connection nobody subscribes to is
// reset and its URI freed exactly SubscribeLease (10 s) after it
// opened; one its creator subscribes to in time is kept past it.
//
// It runs in a synctest bubble over a real loopback socket. That fits
// only because nothing reads the socket while the clock has to move:
// before the subscription the reader waits on channels, and the
// subscribed connection's destination has closed its side, so the
// reader takes the end of stream and stops. A goroutine blocked reading
// a socket would stop the bubble's clock (DrainTimeout, which waits
// while the reader drains a destination that does not end, is left to
// the host's tests for that reason).
func TestSubscribeLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		port := l.Addr().(*net.TCPAddr).Port
		pol, _ := NewPolicy([]string{"127.0.0.0/8"})
		limits := delivery.Limits{WindowBytes: 1 << 20, MaximumFrameBytes: 16 << 10}
		tb := NewTable(TableConfig{
			Dialer: &Dialer{Policy: pol},
			Quotas: adapters.NewQuotas(),
			Quota:  &adapters.QuotaLimits{},
			Limits: limits,
			Seq:    func() uint64 { return 0 },
			Log:    hclog.NewNullLogger(),
		})
		defer tb.Shutdown()
		const conn adapters.ConnID = 1
		open := func(uri string) (*Channel, net.Conn) {
			t.Helper()
			params := fmt.Sprintf(`{"channel":%q,"host":"127.0.0.1","port":%d}`, uri, port)
			caller := adapters.Caller{ClientID: "c", Principal: "p", Conn: conn}
			if e, err := tb.Open(context.Background(), caller, json.RawMessage(params)); e != nil {
				t.Fatalf("Open(%s): %v (%v)", uri, e, err)
			}
			peer, err := l.Accept()
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = peer.Close() })
			tc := tb.Channel(uri)
			if tc == nil {
				t.Fatalf("%s not open after Open", uri)
			}
			return tc, peer
		}

		// Nobody subscribes: open until the lease ends, then reset.
		const idle = "ahp-tcp:/idle"
		_, peer := open(idle)
		time.Sleep(SubscribeLease - time.Nanosecond)
		synctest.Wait()
		if tb.Channel(idle) == nil {
			t.Fatalf("closed before SubscribeLease (%v)", SubscribeLease)
		}
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		if tb.Channel(idle) != nil {
			t.Fatalf("still open SubscribeLease (%v) after it opened, unsubscribed", SubscribeLease)
		}
		if dialing, open, draining := tb.Counts(); dialing+open+draining != 0 {
			t.Fatalf("counts %d dialing, %d open, %d draining after the lease; want none", dialing, open, draining)
		}
		// The destination sees a reset, not the end of a complete stream.
		if _, err := peer.Read(make([]byte, 1)); !errors.Is(err, syscall.ECONNRESET) {
			t.Errorf("destination read %v after the lease, want ECONNRESET", err)
		}

		// The creator subscribes halfway through: the lease is off.
		const used = "ahp-tcp:/used"
		tc, peer := open(used)
		_ = peer.Close() // the reader gets EOF at once and stops reading
		time.Sleep(SubscribeLease / 2)
		sub := &leaseSub{conn: conn}
		sub.st = delivery.NewScheduler(delivery.SchedulerConfig{}).AddStream(used, limits, tc.Source(sub))
		tc.Subscribe(sub)
		time.Sleep(2 * SubscribeLease)
		synctest.Wait()
		if tb.Channel(used) == nil {
			t.Fatalf("subscribed in time, closed by the lease")
		}
	})
}

// TestReceiveKeepsBuffer: a binary tcp/data whose message offers Keep is
// written to the destination from the message's own buffer (no copy),
// which goes back (recycle) exactly once, after the bytes are written and
// the message released; a resend of bytes already taken is recycled at
// once; a message without Keep is copied as before. The destination
// reads exactly the stream's bytes.
func TestReceiveKeepsBuffer(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	pol, _ := NewPolicy([]string{"127.0.0.0/8"})
	limits := delivery.Limits{WindowBytes: 1 << 20, MaximumFrameBytes: 16 << 10}
	tb := NewTable(TableConfig{
		Dialer: &Dialer{Policy: pol},
		Quotas: adapters.NewQuotas(),
		Quota:  &adapters.QuotaLimits{},
		Limits: limits,
		Seq:    func() uint64 { return 0 },
		Log:    hclog.NewNullLogger(),
	})
	defer tb.Shutdown()
	const conn adapters.ConnID = 1
	const uri = "ahp-tcp:/keep"
	caller := adapters.Caller{ClientID: "c", Principal: "p", Conn: conn}
	params := fmt.Sprintf(`{"channel":%q,"host":"127.0.0.1","port":%d}`, uri, port)
	if e, err := tb.Open(context.Background(), caller, json.RawMessage(params)); e != nil {
		t.Fatalf("Open: %v (%v)", e, err)
	}
	peer, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	tc := tb.Channel(uri)
	sub := &leaseSub{conn: conn}
	sub.st = delivery.NewScheduler(delivery.SchedulerConfig{}).AddStream(uri, limits, tc.Source(sub))
	tc.Subscribe(sub)

	type event struct {
		what string
		i    int
	}
	events := make(chan event, 16)
	send := func(i int, off uint64, data []byte, keep bool) {
		h := &rpc.Header{JSONRPC: "2.0", Method: rpc.BinaryDataMethod, Channel: uri,
			Binary: &rpc.BinaryData{Offset: off, Data: data}}
		m := adapters.Message{ClientID: "c", Conn: conn, Sub: sub, Header: h,
			Release: func() { events <- event{"release", i} }}
		if keep {
			m.Keep = func() func() {
				events <- event{"keep", i}
				return func() { events <- event{"recycle", i} }
			}
		}
		tc.Receive(m)
	}
	want := func(what string, i int) {
		t.Helper()
		select {
		case e := <-events:
			if e != (event{what, i}) {
				t.Fatalf("event %v, want %s of message %d", e, what, i)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no %s of message %d in 10 s", what, i)
		}
	}
	read := func(want string) {
		t.Helper()
		got := make([]byte, len(want))
		_ = peer.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.ReadFull(peer, got); err != nil || string(got) != want {
			t.Fatalf("destination read %q (%v), want %q", got, err, want)
		}
	}

	send(0, 0, []byte("hello "), true)
	want("keep", 0)
	read("hello ")
	want("release", 0)
	want("recycle", 0)

	send(1, 3, []byte("lo world"), true) // "lo " again, then new bytes
	want("keep", 1)
	read("world")
	want("release", 1)
	want("recycle", 1)

	send(2, 0, []byte("hello"), true) // all taken already
	want("keep", 2)
	want("recycle", 2)
	want("release", 2)

	send(3, 11, []byte("!"), false) // copied: no Keep
	read("!")
	want("release", 3)
	select {
	case e := <-events:
		t.Fatalf("unexpected event %v", e)
	default:
	}
}
