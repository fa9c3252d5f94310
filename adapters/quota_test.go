package adapters

import (
	"testing"

	"github.com/sidecar-dev/sidecar/rpc"
)

// TestQuotas: each of the four bounds refuses exactly at its maximum with
// -32009 naming the bound; a new clientId or connection does not make
// room under the bounds it shares; Release frees an entry (twice is
// harmless); Move counts it on another connection; a maximum of 0 is no
// bound.
func TestQuotas(t *testing.T) {
	q := NewQuotas()
	l := &QuotaLimits{Total: 5, PerPrincipal: 4, PerClient: 3, PerConn: 2,
		Name: "terminal", Counted: "terminals", Block: "terminal", Advice: "dispose one first"}
	a := Caller{ClientID: "a", Principal: "p", Conn: 1}
	refused := func(c Caller, want string) {
		t.Helper()
		if _, e := q.Reserve(l, c); e == nil || e.Code != rpc.CodePermissionDenied || e.Message != want {
			t.Fatalf("Reserve(%+v) = %v, want -32009 %q", c, e, want)
		}
	}
	reserve := func(c Caller) *Reservation {
		t.Helper()
		r, e := q.Reserve(l, c)
		if e != nil {
			t.Fatalf("Reserve(%+v): %v", c, e)
		}
		return r
	}
	r1 := reserve(a)
	reserve(a)
	refused(a, "terminal limit reached: 2 terminals on this connection (terminal.max_per_connection); dispose one first")
	reserve(Caller{ClientID: "a", Principal: "p", Conn: 2})
	refused(Caller{ClientID: "a", Principal: "p", Conn: 3}, "terminal limit reached: 3 terminals for this client (terminal.max_per_client); dispose one first")
	reserve(Caller{ClientID: "b", Principal: "p", Conn: 4})
	refused(Caller{ClientID: "c", Principal: "p", Conn: 5}, "terminal limit reached: 4 terminals for this token (terminal.max_per_principal); dispose one first")
	reserve(Caller{ClientID: "d", Principal: "q", Conn: 6})
	refused(Caller{ClientID: "e", Principal: "r", Conn: 7}, "terminal limit reached: 5 terminals on this host (terminal.max_total); dispose one first")
	if n := q.Count(l); n != 5 {
		t.Fatalf("Count = %d, want 5", n)
	}
	r1.Release()
	r1.Release()
	if n := q.Count(l); n != 4 {
		t.Fatalf("Count after Release = %d, want 4", n)
	}

	// An entry moved to connection 2 counts there, not on connection 1.
	q, l = NewQuotas(), &QuotaLimits{PerConn: 1, Name: "TCP connection", Counted: "open", Block: "tcp", Advice: "close one first"}
	r := reserve(a)
	refused(a, "TCP connection limit reached: 1 open on this connection (tcp.max_per_connection); close one first")
	r.Move(2)
	reserve(a)
	refused(Caller{ClientID: "a", Principal: "p", Conn: 2}, "TCP connection limit reached: 1 open on this connection (tcp.max_per_connection); close one first")

	unbounded := &QuotaLimits{Name: "x"}
	for range 100 {
		if _, e := q.Reserve(unbounded, a); e != nil {
			t.Fatalf("a maximum of 0 refused: %v", e)
		}
	}
	if n := q.Count(unbounded); n != 100 {
		t.Fatalf("Count = %d, want 100", n)
	}
}
