package adapters

import (
	"strings"
	"sync"

	"github.com/sidecar-dev/sidecar/rpc"
)

// Quotas is the host's one catalogue of what callers hold, shared by every
// kind (DESIGN.md §7: limits per client and in total). A kind reserves an
// entry before it creates a resource (a terminal, a TCP connection) and
// releases it when the resource is gone; each entry counts against four
// bounds of its kind's QuotaLimits: on the host, per principal (one token,
// whatever its clientIds), per clientId, and per connection, so that
// neither a new clientId nor a new connection makes room.
type Quotas struct {
	mu   sync.Mutex
	held map[*QuotaLimits]map[*Reservation]struct{}
}

// NewQuotas returns an empty catalogue.
func NewQuotas() *Quotas {
	return &Quotas{held: map[*QuotaLimits]map[*Reservation]struct{}{}}
}

// QuotaLimits are one kind's bounds and how its refusals read. A maximum of
// 0 or less is no bound (config validation never lets one through; a
// hand-built config may).
type QuotaLimits struct {
	Total, PerPrincipal, PerClient, PerConn int
	// What the refusal says: "<Name> limit reached: <n> <Counted> on this
	// host (<Block>.max_total); <Advice>", for example "terminal limit
	// reached: 64 terminals on this host (terminal.max_total); dispose
	// one first".
	Name, Counted, Block, Advice string
	// Subject, if set, names the settings max_<Subject>_total,
	// max_<Subject>_per_principal, ... ("listeners":
	// tunnels.max_listeners_per_principal) instead of max_total, ...
	Subject string
}

// Reservation is one entry of the catalogue, held until Release.
type Reservation struct {
	q      *Quotas
	l      *QuotaLimits
	caller Caller
}

// Reserve records an entry for caller under l, or refuses with
// PermissionDenied (-32009) naming the bound reached when one is.
func (q *Quotas) Reserve(l *QuotaLimits, caller Caller) (*Reservation, *rpc.Error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	total, principal, client, conn := 0, 0, 0, 0
	for r := range q.held[l] {
		total++
		if r.caller.Principal == caller.Principal {
			principal++
		}
		if r.caller.ClientID == caller.ClientID {
			client++
		}
		if r.caller.Conn == caller.Conn {
			conn++
		}
	}
	for _, b := range []struct {
		n, max     int
		where, key string
	}{
		{total, l.Total, "on this host", "max_total"},
		{principal, l.PerPrincipal, "for this token", "max_per_principal"},
		{client, l.PerClient, "for this client", "max_per_client"},
		{conn, l.PerConn, "on this connection", "max_per_connection"},
	} {
		if b.max > 0 && b.n >= b.max {
			key := b.key
			if l.Subject != "" {
				key = "max_" + l.Subject + "_" + strings.TrimPrefix(key, "max_")
			}
			return nil, rpc.Errorf(rpc.CodePermissionDenied, "%s limit reached: %d %s %s (%s.%s); %s",
				l.Name, b.max, l.Counted, b.where, l.Block, key, l.Advice)
		}
	}
	r := &Reservation{q: q, l: l, caller: caller}
	if q.held[l] == nil {
		q.held[l] = map[*Reservation]struct{}{}
	}
	q.held[l][r] = struct{}{}
	return r, nil
}

// Release frees the entry; a second call does nothing.
func (r *Reservation) Release() {
	r.q.mu.Lock()
	delete(r.q.held[r.l], r)
	r.q.mu.Unlock()
}

// Move counts the entry on conn from now on: its resource moved to another
// connection of the same client (a TCP channel a reconnect resumed).
func (r *Reservation) Move(conn ConnID) {
	r.q.mu.Lock()
	r.caller.Conn = conn
	r.q.mu.Unlock()
}

// Count returns how many entries are held under l.
func (q *Quotas) Count(l *QuotaLimits) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.held[l])
}
