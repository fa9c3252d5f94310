package host

import (
	"context"
	"errors"
	"sync/atomic"

	"golang.org/x/sys/cpu"

	"github.com/sidecar-dev/sidecar/adapters"
	"github.com/sidecar-dev/sidecar/delivery"
	"github.com/sidecar-dev/sidecar/transport"
)

// The host's own counters, read by both of its metric views: the
// Prometheus endpoint of `sidecar serve` (host/metrics.go) and the
// sidecar.* metrics of ahp-otlp://metrics (host/telemetry.go), so that
// the two agree. Nothing here takes a lock on the per-message path: a
// connection counts its traffic in atomics of its own (countingConn),
// its scheduler its gaps and credit waits; a scrape sums the open
// connections' counters and the totals of those that ended (folded in
// when they end, under s.mu, so that a sum never counts one twice nor
// goes back). Events that are rare (a connection, a disconnect, an
// Overloaded answer, a resume) count in the server's atomics.

// transportKinds are the transport label values, in the order of
// connCounts' arrays (transport.KindOf).
var transportKinds = [...]transport.Kind{
	transport.KindWebSocket, transport.KindTIOWebSocket, transport.KindWebTransport,
	transport.KindStdio, transport.KindOther,
}

// transportIndex returns mc's index in transportKinds.
func transportIndex(mc transport.MessageConn) int {
	k := transport.KindOf(mc)
	for i, x := range transportKinds {
		if x == k {
			return i
		}
	}
	return len(transportKinds) - 1
}

// disconnectReason is why a served connection ended, a bounded set for
// the sidecar_disconnects_total label (docs/operations.md lists them).
type disconnectReason int

const (
	discClientClose      disconnectReason = iota // the client closed it (1000 or 1001)
	discLost                                     // the transport failed under a read or write (no close, or a close with another code): its state is kept for a reconnect
	discWriteTimeout                             // closed by the host 4008: answers not read within delivery.write_timeout
	discProtocolError                            // closed by the host 1002/1009: a protocol violation, a message too big
	discInitTimeout                              // closed by the host: no initialize within 30 s
	discVersionMismatch                          // closed by the host 4005: no common protocol version
	discServerShutdown                           // closed by the host 1001: sidecar serve stopping
	discResumedElsewhere                         // closed by the host: its client reconnected on another connection
	discInternalError                            // closed by the host 1011 for another reason
	discOther                                    // none of these (the reader ended without an error)
	numDisconnectReasons
)

var disconnectNames = [numDisconnectReasons]string{
	"client_close", "lost", "write_timeout", "protocol_error", "init_timeout",
	"version_mismatch", "server_shutdown", "resumed_elsewhere", "internal_error", "other",
}

// refusal is why a connection was refused before it was served.
type refusal int

const (
	refusedLimit              refusal = iota // listener.max_connections open already (1013)
	refusedShutdown                          // the host is shutting down (1001)
	refusedPrincipalLimit                    // listener.max_connections_per_principal of its principal (1013)
	refusedUninitializedLimit                // listener.max_uninitialized of its principal (1013)
	numRefusals
)

var refusalNames = [numRefusals]string{"limit", "shutdown", "principal_limit", "uninitialized_limit"}

// resumeResult is the outcome of a reconnect request.
type resumeResult int

const (
	resumeWasResumed resumeResult = iota // the client's state was resumed
	resumeWasRefused                     // another principal, or not its resume token (kind "refused")
	resumeWasExpired                     // nothing kept: the grace ended, or the host restarted (kind "expired")
	numResumeResults
)

var resumeNames = [numResumeResults]string{"resumed", "refused", "expired"}

// serverCounters are the server's atomics for rare events.
type serverCounters struct {
	accepted    [len(transportKinds)]atomic.Uint64
	refused     [numRefusals]atomic.Uint64
	disconnects [numDisconnectReasons]atomic.Uint64
	overloaded  atomic.Uint64
	resumes     [numResumeResults]atomic.Uint64
}

// connTotals are the counters a connection keeps while it is open; the
// server adds each ended connection's to its own (Server.closed).
type connTotals struct {
	traffic  trafficCounts
	sched    delivery.Counters
	sessions sessionDrops
}

func (t *connTotals) add(o connTotals) {
	t.traffic.add(o.traffic)
	t.sched.GapsSent += o.sched.GapsSent
	t.sched.Collapsed += o.sched.Collapsed
	t.sched.CreditWaits += o.sched.CreditWaits
	t.sched.CreditWait += o.sched.CreditWait
	t.sessions.add(o.sessions)
}

// trafficCounts are what crossed a connection: message texts and their
// bytes (UTF-8, as the transport carried them, without its framing).
type trafficCounts struct {
	sentBytes, receivedBytes, sentMessages, receivedMessages uint64
}

func (t *trafficCounts) add(o trafficCounts) {
	t.sentBytes += o.sentBytes
	t.receivedBytes += o.receivedBytes
	t.sentMessages += o.sentMessages
	t.receivedMessages += o.receivedMessages
}

// sessionDrops are a transport-io session's drops (transportio.Stats).
type sessionDrops struct {
	unknownEvent                               uint64
	dgOverflow, dgStale, dgSequence, dgReceive uint64
}

func (d *sessionDrops) add(o sessionDrops) {
	d.unknownEvent += o.unknownEvent
	d.dgOverflow += o.dgOverflow
	d.dgStale += o.dgStale
	d.dgSequence += o.dgSequence
	d.dgReceive += o.dgReceive
}

// totals returns c's counters now.
func (c *conn) totals() connTotals {
	t := connTotals{sched: c.sched.Counters()}
	if c.traffic != nil {
		t.traffic = c.traffic.counts()
		if st, ok := transport.SessionStats(c.traffic.MessageConn); ok {
			t.sessions = sessionDrops{
				unknownEvent: st.UnknownDropped,
				dgOverflow:   st.OverflowDropped, dgStale: st.StaleDropped,
				dgSequence: st.SequenceDropped, dgReceive: st.ReceiveDropped,
			}
		}
	}
	return t
}

// countConn wraps a connection's transport so that what it carries is
// counted (ServeConnAs wraps every connection).
func (s *Server) countConn(mc transport.MessageConn) *countingConn {
	return &countingConn{MessageConn: mc}
}

// countingConn counts a connection's messages and bytes each way. The
// reader and the writer each touch only their own pair, on cache lines of
// their own.
type countingConn struct {
	transport.MessageConn
	receivedBytes, receivedMessages atomic.Uint64
	_                               cpu.CacheLinePad
	sentBytes, sentMessages         atomic.Uint64
}

func (c *countingConn) counts() trafficCounts {
	return trafficCounts{
		sentBytes: c.sentBytes.Load(), receivedBytes: c.receivedBytes.Load(),
		sentMessages: c.sentMessages.Load(), receivedMessages: c.receivedMessages.Load(),
	}
}

func (c *countingConn) ReadMessage(ctx context.Context) ([]byte, error) {
	b, err := c.MessageConn.ReadMessage(ctx)
	if err == nil {
		c.receivedBytes.Add(uint64(len(b)))
		c.receivedMessages.Add(1)
	}
	return b, err
}

// ReadMessageOrBinary implements transport.BinaryConn as the wrapped conn
// does (or reads text); a binary form counts the bytes that came (its
// payload), not the text it stands for.
func (c *countingConn) ReadMessageOrBinary(ctx context.Context) ([]byte, bool, error) {
	b, binary, err := transport.ReadMessageOrBinary(ctx, c.MessageConn)
	if err == nil {
		c.receivedBytes.Add(uint64(len(b)))
		c.receivedMessages.Add(1)
	}
	return b, binary, err
}

// CarriesBinary implements transport.BinaryConn as the wrapped conn does.
func (c *countingConn) CarriesBinary() bool { return transport.CarriesBinary(c.MessageConn) }

// ReadLimit implements transport.BinaryConn as the wrapped conn does.
func (c *countingConn) ReadLimit() int { return transport.ReadLimit(c.MessageConn) }

// Violate implements transport.BinaryConn as the wrapped conn does.
func (c *countingConn) Violate(err error) error { return transport.Violate(c.MessageConn, err) }

// RecycleRead implements transport.ReadRecycler as the wrapped conn does.
func (c *countingConn) RecycleRead(b []byte) { transport.RecycleRead(c.MessageConn, b) }

// WriteReleases implements transport.Releaser as the wrapped conn does.
func (c *countingConn) WriteReleases() bool { return transport.WriteReleases(c.MessageConn) }

// WriteMessage counts the text written.
func (c *countingConn) WriteMessage(ctx context.Context, text []byte) error {
	err := c.MessageConn.WriteMessage(ctx, text)
	if err == nil {
		c.sentBytes.Add(uint64(len(text)))
		c.sentMessages.Add(1)
	}
	return err
}

// WriteBinary implements transport.BinaryConn: the wrapped conn writes
// payload (a binary form), counted as the bytes carried.
func (c *countingConn) WriteBinary(ctx context.Context, payload []byte) error {
	b, ok := c.MessageConn.(transport.BinaryConn)
	if !ok {
		return errors.New("host: the transport carries no binary forms")
	}
	err := b.WriteBinary(ctx, payload)
	if err == nil {
		c.sentBytes.Add(uint64(len(payload)))
		c.sentMessages.Add(1)
	}
	return err
}

// WriteFramed implements delivery.FramedWriter: the wrapped conn writes
// the binary form framed[delivery.FrameRoom:] from framed when it is a
// FramedWriter (transport-io), else with WriteBinary; counted as
// WriteBinary counts it.
func (c *countingConn) WriteFramed(ctx context.Context, framed []byte) error {
	fw, ok := c.MessageConn.(delivery.FramedWriter)
	if !ok {
		return c.WriteBinary(ctx, framed[delivery.FrameRoom:])
	}
	err := fw.WriteFramed(ctx, framed)
	if err == nil {
		c.sentBytes.Add(uint64(len(framed) - delivery.FrameRoom))
		c.sentMessages.Add(1)
	}
	return err
}

// Flush implements delivery.Flusher as the wrapped conn does.
func (c *countingConn) Flush() error {
	if f, ok := c.MessageConn.(delivery.Flusher); ok {
		return f.Flush()
	}
	return nil
}

// stats is one reading of the host's counters and gauges.
type stats struct {
	connections [len(transportKinds)]int // open, by transport
	accepted    [len(transportKinds)]uint64
	refused     [numRefusals]uint64
	disconnects [numDisconnectReasons]uint64
	// subscriptions counts the open connections' subscriptions by channel
	// kind (adapters.Traits.Label), [0] ordinary, [1] windowed.
	subscriptions map[string]*[2]int
	totals        connTotals // open and ended connections together
	overloaded    uint64
	resumes       [numResumeResults]uint64
	retained      int
}

// clients returns the open connections.
func (st *stats) clients() int {
	n := 0
	for _, c := range st.connections {
		n += c
	}
	return n
}

// stats reads the host's counters and gauges.
func (s *Server) stats() stats {
	st := stats{subscriptions: map[string]*[2]int{}}
	s.mu.Lock()
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
		st.connections[c.transport]++
	}
	st.totals = s.closed // with conns, in one lock: each connection is in one of the two
	s.mu.Unlock()
	var subs []*subscription
	for _, c := range conns {
		st.totals.add(c.totals())
		c.mu.Lock()
		for _, sub := range c.subs {
			subs = append(subs, sub)
		}
		c.mu.Unlock()
	}
	for _, sub := range subs { // outside c.mu: Traits may take a channel's lock
		label := sub.ch.Traits().Label
		if label == "" {
			label = "other"
		}
		n := st.subscriptions[label]
		if n == nil {
			n = new([2]int)
			st.subscriptions[label] = n
		}
		w := 0
		if sub.windowed() {
			w = 1
		}
		n[w]++
	}
	for i := range st.accepted {
		st.accepted[i] = s.counts.accepted[i].Load()
	}
	for i := range st.refused {
		st.refused[i] = s.counts.refused[i].Load()
	}
	for i := range st.disconnects {
		st.disconnects[i] = s.counts.disconnects[i].Load()
	}
	for i := range st.resumes {
		st.resumes[i] = s.counts.resumes[i].Load()
	}
	st.overloaded = s.counts.overloaded.Load()
	s.ret.mu.Lock()
	st.retained = len(s.ret.clients)
	s.ret.mu.Unlock()
	return st
}

// endReasonOf classifies the end of c, once serve has returned: the
// code the host closed it with (c.close), else how the client's side
// ended (readErr).
func endReasonOf(c *conn) disconnectReason {
	if c.handover.Load() {
		return discResumedElsewhere
	}
	switch c.closeCode {
	case transport.CloseGoingAway:
		return discServerShutdown
	case transport.CloseProtocolError, transport.CloseMessageTooBig:
		if c.closeErr != nil && c.closeErr.Error() == initTimeoutReason {
			return discInitTimeout
		}
		return discProtocolError
	case transport.ClosePeerTooSlow:
		return discWriteTimeout
	case transport.CloseVersionMismatch:
		return discVersionMismatch
	case transport.CloseInternalError:
		if c.writeLost.Load() {
			return discLost
		}
		return discInternalError
	}
	if p := c.readErr.Load(); p != nil && *p != nil {
		// As shouldRetain has it: a close from the client with 1000 or
		// 1001 is the client leaving; anything else under the reader
		// (no close, or another code) is a loss, whose state is kept.
		if _, violation := transport.Violation(*p); violation {
			return discProtocolError
		}
		switch transport.CloseStatus(*p) {
		case transport.CloseNormal, transport.CloseGoingAway:
			return discClientClose
		}
		return discLost
	}
	return discOther
}

// hostStats is the sidecar's own figures for the telemetry kind's
// sidecar.* metrics (adapters.Env.Host): the same counters as the
// Prometheus endpoint's.
func (s *Server) hostStats() adapters.HostStats {
	st := s.stats()
	self := adapters.HostStats{
		Clients:       st.clients(),
		BytesSent:     st.totals.traffic.sentBytes,
		BytesReceived: st.totals.traffic.receivedBytes,
		CreditWait:    st.totals.sched.CreditWait,
		Gaps:          st.totals.sched.GapsSent,
	}
	for _, k := range st.subscriptions {
		self.Subscriptions += k[0] + k[1]
	}
	return self
}
