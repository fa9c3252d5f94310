package transport

import (
	"context"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sidecar-dev/sidecar/auth"
)

// clock is a time a test moves by hand.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// alice is the identity the tickets of these tests are issued to.
var alice = auth.Identity{Name: "alice", Role: auth.User, Method: "tokens_file"}

func newClock() *clock { return &clock{now: time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)} }

// TestTicketsSingleUse: a ticket is 32 random bytes in base64url, lets
// its principal in once, and is refused as used after that.
func TestTicketsSingleUse(t *testing.T) {
	ts := NewTickets(0, 0, newClock().Now)
	a, err := ts.Issue(alice)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := base64.RawURLEncoding.DecodeString(a)
	if err != nil || len(raw) != 32 {
		t.Fatalf("ticket %q: %d bytes (%v), want 32 of base64url", a, len(raw), err)
	}
	if b, _ := ts.Issue(alice); b == a {
		t.Fatal("two tickets alike")
	}
	if p, err := ts.Redeem(a); err != nil || p != alice {
		t.Fatalf("first use: %q %v", p, err)
	}
	if _, err := ts.Redeem(a); !errors.Is(err, ErrTicketUsed) {
		t.Fatalf("replay: %v, want %v", err, ErrTicketUsed)
	}
	if _, err := ts.Redeem("not-a-ticket"); !errors.Is(err, ErrTicketUnknown) {
		t.Fatalf("unknown: %v, want %v", err, ErrTicketUnknown)
	}
}

// TestTicketsExpire: a ticket is good until its TTL has passed, refused
// as expired from then on (and an expired one stays refused once used
// tickets are forgotten: unknown).
func TestTicketsExpire(t *testing.T) {
	c := newClock()
	ts := NewTickets(0, 0, c.Now)
	early, _ := ts.Issue(alice)
	late, _ := ts.Issue(alice)
	c.Add(TicketTTL - time.Millisecond)
	if _, err := ts.Redeem(early); err != nil {
		t.Fatalf("a millisecond before expiry: %v", err)
	}
	c.Add(time.Millisecond)
	if _, err := ts.Redeem(late); !errors.Is(err, ErrTicketExpired) {
		t.Fatalf("at expiry: %v, want %v", err, ErrTicketExpired)
	}
	if ts.Outstanding() != 0 {
		t.Fatalf("outstanding %d, want 0", ts.Outstanding())
	}
}

// TestTicketsBound: at most max tickets are held. With max outstanding, a
// new one is refused (none in flight is forgotten); once one is used or
// they expire, the spent ones are forgotten and issuing goes on, the
// store never above max.
func TestTicketsBound(t *testing.T) {
	const max = 8
	c := newClock()
	ts := NewTickets(time.Second, max, c.Now)
	var issued []string
	for range max {
		k, err := ts.Issue(alice)
		if err != nil {
			t.Fatal(err)
		}
		issued = append(issued, k)
	}
	if _, err := ts.Issue(alice); !errors.Is(err, ErrTooManyTickets) {
		t.Fatalf("ticket %d: %v, want %v", max+1, err, ErrTooManyTickets)
	}
	if n := ts.Outstanding(); n != max {
		t.Fatalf("outstanding %d, want %d", n, max)
	}
	for _, k := range issued[:max-1] { // none was dropped to make room
		if _, err := ts.Redeem(k); err != nil {
			t.Fatalf("an outstanding ticket: %v", err)
		}
	}
	if _, err := ts.Issue(alice); err != nil {
		t.Fatalf("after one was used: %v", err)
	}
	c.Add(time.Second)
	for range 10 * max {
		if _, err := ts.Issue(alice); err != nil && !errors.Is(err, ErrTooManyTickets) {
			t.Fatal(err)
		}
		if len(ts.byID) > max {
			t.Fatalf("%d tickets held, bound %d", len(ts.byID), max)
		}
	}
	if n := ts.Outstanding(); n != max {
		t.Fatalf("outstanding %d, want %d", n, max)
	}
}

// ticketOpts are the door of the tests below: token "tok" (principal
// "token"), tickets on the clock c.
func ticketOpts(c *clock) TIOOptions {
	return TIOOptions{Auth: auth.NewStatic("tok"), Tickets: NewTickets(0, 0, c.Now)}
}

// owner is the identity of the static token "tok".
var owner = auth.Identity{Name: "token", Role: auth.Owner, Method: "token"}

// TestTIOTicketDoorWebSocket: on the WebSocket mapping a ticket opens a
// session once; a replay, an expired ticket, an unknown one and one of
// a revoked identity are refused as WT_UNAUTHORIZED with their reason;
// the token (header and query) still opens sessions.
func TestTIOTicketDoorWebSocket(t *testing.T) {
	c := newClock()
	opts := ticketOpts(c)
	mux := http.NewServeMux()
	mux.Handle(TIOPath, TIOWebSocketHandler(opts, echoServe))
	hs := httptest.NewServer(mux)
	defer hs.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	url := "ws" + strings.TrimPrefix(hs.URL, "http") + TIOPath
	dial := func(query string, h http.Header) (MessageConn, error) {
		return DialTIOWebSocket(ctx, url+query, h, nil, false)
	}
	refused := func(what, query, reason string) {
		t.Helper()
		_, err := dial(query, nil)
		if !IsUnauthorized(err) || CloseReason(err) != reason {
			t.Fatalf("%s: %v (reason %q), want WT_UNAUTHORIZED %q", what, err, CloseReason(err), reason)
		}
	}

	k, _ := opts.Tickets.Issue(owner)
	mc, err := dial("?ticket="+k, nil)
	if err != nil {
		t.Fatal(err)
	}
	roundTrip(t, mc)
	mc.Close(CloseNormal, "")
	refused("replayed ticket", "?ticket="+k, "ticket-used")

	k, _ = opts.Tickets.Issue(owner)
	c.Add(TicketTTL)
	refused("expired ticket", "?ticket="+k, "ticket-expired")
	refused("unknown ticket", "?ticket=AAAA", "ticket-unknown")
	k, _ = opts.Tickets.Issue(alice)
	opts.Tickets.Revoke("alice", "tokens_file")
	refused("a revoked identity's ticket", "?ticket="+k, "ticket-unknown")
	refused("wrong token", "?token=wrong", RefusalReason)

	for _, h := range []struct {
		query  string
		header http.Header
	}{{"?token=tok", nil}, {"", http.Header{"Authorization": {"Bearer tok"}}}} {
		mc, err := dial(h.query, h.header)
		if err != nil {
			t.Fatalf("token %v %v: %v", h.query, h.header, err)
		}
		roundTrip(t, mc)
		mc.Close(CloseNormal, "")
	}
}

// TestTIOTicketDoorWebTransport: the same door on WebTransport: a ticket
// once, its replay refused as ticket-used.
func TestTIOTicketDoorWebTransport(t *testing.T) {
	cert, pin := devCert(t)
	c := newClock()
	opts := ticketOpts(c)
	pc, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	srv := NewWebTransportServer(&tls.Config{Certificates: []tls.Certificate{cert}}, opts, nil, echoServe)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(pc) }()
	defer func() {
		srv.Close()
		<-served
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	url := "https://" + pc.LocalAddr().String() + TIOPath

	k, _ := opts.Tickets.Issue(owner)
	mc, err := DialWebTransport(ctx, url+"?ticket="+k, nil, pinned(t, pin))
	if err != nil {
		t.Fatal(err)
	}
	roundTrip(t, mc)
	mc.Close(CloseNormal, "")
	_, err = DialWebTransport(ctx, url+"?ticket="+k, nil, pinned(t, pin))
	if !IsUnauthorized(err) || CloseReason(err) != "ticket-used" {
		t.Fatalf("replayed ticket: %v (reason %q), want WT_UNAUTHORIZED ticket-used", err, CloseReason(err))
	}
	k, _ = opts.Tickets.Issue(owner)
	c.Add(TicketTTL)
	_, err = DialWebTransport(ctx, url+"?ticket="+k, nil, pinned(t, pin))
	if !IsUnauthorized(err) || CloseReason(err) != "ticket-expired" {
		t.Fatalf("expired ticket: %v (reason %q), want WT_UNAUTHORIZED ticket-expired", err, CloseReason(err))
	}
}
