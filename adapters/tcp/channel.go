package tcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/sidecar-dev/sidecar/adapters"
	"github.com/sidecar-dev/sidecar/audit"
	"github.com/sidecar-dev/sidecar/delivery"
	"github.com/sidecar-dev/sidecar/delivery/bytestream"
	"github.com/sidecar-dev/sidecar/internal/bufpool"
	"github.com/sidecar-dev/sidecar/rpc"
)

// TCP channel bounds.
const (
	// SubscribeLease is how long a created TCP connection waits for its
	// creator's windowed subscription; past it the socket is closed and the
	// URI freed (ahp.md §6b: bound the unsubscribed lifetime). Nothing is
	// read from the socket before the subscription.
	SubscribeLease = 10 * time.Second
	// MaxID bounds the id part of an ahp-tcp: URI, so that a tcp/data
	// envelope always leaves room for data within a 1024-byte frame.
	MaxID = 128
	// MaxHost bounds the host of createTcpConnection (a DNS name is at
	// most 253 characters).
	MaxHost = 253
	// ReadAhead bounds one socket read: up to this many bytes, cut into
	// tcp/data messages, and never more than the window's remaining
	// credit lets out (so one read is one system call for one or more
	// messages, and a client that stops crediting still stops the socket
	// after one window). 192 KiB is one message at the largest
	// maximumFrameBytes (512 KiB UTF-16 bytes: 256 KiB of base64 text).
	ReadAhead = 192 << 10
	// DrainTimeout bounds a graceful close after the client's tcp/eof:
	// the bytes it sent (at most its window) are written and the socket
	// half-closed, then what the destination still sends is read and
	// dropped until its end of stream; past the timeout the socket is
	// reset instead, so a destination never takes a cut stream for a
	// complete one.
	DrainTimeout = 10 * time.Second
	// Queued bounds the tcp/data read from the socket but not yet pulled
	// by the scheduler (UTF-16 bytes): two reads' worth, so the next read
	// overlaps the sending of the previous one instead of waiting for it.
	Queued = 2 * 2 * ReadAhead * 4 / 3
)

// TableConfig configures a Table.
type TableConfig struct {
	Dialer *Dialer
	// Quotas is the host's catalogue, where every connection (dialing,
	// open, parked; not draining) holds an entry under Quota
	// (tcp.max_total, tcp.max_per_principal, tcp.max_per_client,
	// tcp.max_per_connection).
	Quotas *adapters.Quotas
	Quota  *adapters.QuotaLimits
	// Limits is the most the host accepts of a windowed offer on a TCP
	// channel (the tcp block; UTF-16 bytes).
	Limits delivery.Limits
	// Budget bounds the windows of one client's TCP channels together
	// (tcp.window_bytes_per_client).
	Budget adapters.WindowBudget
	// Seq returns the journal's serverSeq, for the snapshot's fromSeq.
	Seq func() uint64
	Log hclog.Logger
	// YieldParked: when the quota refuses a new channel, the caller's
	// principal's parked channels (waiting for a reconnect) are
	// abandoned and the reservation tried again. For channels whose
	// work a new one continues anyway (file transfers resume from the
	// partial file), so that killed clients never hold the quota for
	// the whole reconnect grace.
	YieldParked bool
	// Audit, when set, records the audit events of the connections
	// Open dials and Adopt takes (adapters.Env.Record): "tcp.open" and
	// "tcp.close" with the destination (or the peer), the bytes each way
	// and the duration.
	Audit func(c adapters.Caller, action string, attrs map[string]any)
	// Label is the channels' adapters.Traits.Label; "tcp" when empty.
	// Another byte-stream kind that attaches its own endpoints (Attach)
	// names its own.
	Label string
}

// Endpoint is the far end of a byte-stream channel: a TCP socket
// (*net.TCPConn), or what another kind attaches (Table.Attach: a file).
// Read gives the bytes for the client (io.EOF: the stream's end, then
// tcp/eof); Write takes the client's; CloseWrite follows the client's
// tcp/eof once every byte before it was written; SetLinger(0) before
// Close says the stream was cut short (an RST for a socket), -1 that it
// ended gracefully. Read and Write run on different goroutines.
type Endpoint interface {
	io.Reader
	io.Writer
	CloseWrite() error
	SetLinger(sec int) error
	Close() error
}

// Table is the host's TCP channels: every open connection by URI, the
// dialer with the destination policy, and the limits.
type Table struct {
	cfg TableConfig
	wg  sync.WaitGroup

	mu       sync.Mutex
	conns    map[string]*Channel
	draining map[*Channel]struct{} // closed by their client, still draining
	shutdown bool
}

// NewTable returns an empty Table.
func NewTable(cfg TableConfig) *Table {
	return &Table{cfg: cfg, conns: map[string]*Channel{}, draining: map[*Channel]struct{}{}}
}

// Dialer returns the dialer (tests replace its Resolver).
func (tb *Table) Dialer() *Dialer { return tb.cfg.Dialer }

// Channel returns the open connection uri, or nil (also while dialing).
func (tb *Table) Channel(uri string) *Channel {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	if tc := tb.conns[uri]; tc != nil && tc.sock != nil {
		return tc
	}
	return nil
}

// freeLocked frees tc's URI, if it is still tc's, and its quota entry.
// Call with tb.mu held.
func (tb *Table) freeLocked(tc *Channel) {
	if tb.conns[tc.id] == tc {
		delete(tb.conns, tc.id)
		tc.res.Release()
	}
}

// Counts returns how many TCP connections the Table holds: dialing
// (reserved, not connected yet), open (including those parked for a
// reconnect), and draining (closed by their client, still writing out
// what it sent). For metrics.
func (tb *Table) Counts() (dialing, open, draining int) {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	for _, tc := range tb.conns {
		if tc.sock != nil {
			open++
		} else {
			dialing++
		}
	}
	return dialing, open, len(tb.draining)
}

// CloseConn closes every TCP connection created on conn (it has ended),
// except those parked for a reconnect (Park).
func (tb *Table) CloseConn(conn adapters.ConnID, reason string) {
	tb.mu.Lock()
	var mine []*Channel
	for _, tc := range tb.conns {
		if tc.OwnedBy(conn) {
			mine = append(mine, tc)
		}
	}
	tb.mu.Unlock()
	for _, tc := range mine {
		tc.close(reason)
	}
}

// Shutdown closes every connection, refuses new ones, and waits for
// their loops.
func (tb *Table) Shutdown() {
	tb.mu.Lock()
	tb.shutdown = true
	all := make([]*Channel, 0, len(tb.conns)+len(tb.draining))
	for _, tc := range tb.conns {
		all = append(all, tc)
	}
	for tc := range tb.draining {
		all = append(all, tc)
	}
	tb.mu.Unlock()
	for _, tc := range all {
		tc.shutdown()
	}
	tb.wg.Wait()
}

// CheckHost reports a createTcpConnection host that cannot be a DNS name
// or an IP address: longer than MaxHost, with white space (a typo), or a
// slash, '@', '?' or '#' (a URL); the host refuses it with -32602, and a
// client can refuse it before asking. The error reads after the word
// "host".
func CheckHost(host string) error {
	switch {
	case len(host) > MaxHost:
		return fmt.Errorf("must be at most %d bytes", MaxHost)
	case strings.ContainsAny(host, " \t\r\n"):
		return errors.New("must be a DNS name or an IP address, without white space")
	case strings.ContainsAny(host, "/@?#"):
		return errors.New("must be a DNS name or an IP address, not a URL")
	}
	return nil
}

// Open is createTcpConnection (ahp.md §6b): check the params and the
// limits, reserve the URI, resolve and dial under the policy, and start
// the connection's loops; its reader waits for the creator's windowed
// subscription. ctx is the creating connection's: a dial outlives
// neither it nor shutdown. dialErr is the dial's own error (nil for a
// failure before dialing), for the caller's log.
func (tb *Table) Open(ctx context.Context, caller adapters.Caller, params json.RawMessage) (_ *rpc.Error, dialErr error) {
	var p rpc.CreateTCPConnectionParams
	if e := rpc.DecodeParams(params, &p); e != nil {
		return e, nil
	}
	id, ok := strings.CutPrefix(p.Channel, rpc.TCPScheme+"/")
	if !ok || id == "" || len(id) > MaxID || strings.IndexFunc(id, func(r rune) bool { return r <= ' ' || r == 0x7f }) >= 0 {
		return rpc.Errorf(rpc.CodeInvalidParams, `invalid params: "channel" must be ahp-tcp:/<id> (id of 1-%d characters without spaces)`, MaxID), nil
	}
	host := p.Host
	if host == "" {
		return rpc.Missing("host"), nil
	}
	if err := CheckHost(host); err != nil {
		return rpc.Errorf(rpc.CodeInvalidParams, `invalid params: "host" %v`, err), nil
	}
	if p.Port == nil {
		return rpc.Missing("port"), nil
	}
	if *p.Port < 1 || *p.Port > 65535 {
		return rpc.Errorf(rpc.CodeInvalidParams, `invalid params: "port" must be between 1 and 65535`), nil
	}
	tc, e := tb.reserve(caller, p.Channel, rpc.TCPStream)
	if e != nil {
		return e, nil
	}
	if ctx == nil {
		ctx = context.Background()
	}
	sock, err := tb.cfg.Dialer.DialFor(ctx, caller.Identity, host, *p.Port)
	if err != nil {
		tb.mu.Lock()
		tb.freeLocked(tc)
		tb.mu.Unlock()
		code := int64(rpc.CodeTCPConnectionOpenFailed)
		var oe *OpenError
		if errors.As(err, &oe) && oe.Kind == KindDenied {
			code = rpc.CodePermissionDenied
			if tb.cfg.Audit != nil { // someone tried to reach what tcp.allow refuses
				tb.cfg.Audit(caller, audit.ActionTCPOpen, map[string]any{"channel": p.Channel, "server.address": host, "server.port": *p.Port, "outcome": "denied"})
			}
		}
		return rpc.Errorf(code, "%s", err.Error()), err
	}
	tc.setAudit(caller, map[string]any{"channel": p.Channel, "server.address": host, "server.port": *p.Port, "network.peer.address": sock.RemoteAddr().String()})
	if !tc.start(sock, ctx.Err() != nil) {
		return rpc.Errorf(rpc.CodeInternalError, "connection closed while dialing"), nil
	}
	tc.log.Debug("TCP connection opened", "host", host, "port", *p.Port, "remote", sock.RemoteAddr().String())
	return nil, nil
}

// Attach is Open for an endpoint another kind opened already (a file):
// uri is reserved for caller under the Table's quota and its loops
// start; the reader waits for caller's windowed subscription (within
// SubscribeLease), and the channel's messages are methods' (whose data
// and end of stream may be TCP's: the binary form needs tcp/data). On an
// error ep is closed.
func (tb *Table) Attach(caller adapters.Caller, uri string, methods rpc.StreamMethods, ep Endpoint) *rpc.Error {
	tc, e := tb.reserve(caller, uri, methods)
	if e != nil {
		_ = ep.Close()
		return e
	}
	if !tc.start(ep, false) {
		return rpc.Errorf(rpc.CodeInternalError, "server is shutting down")
	}
	return nil
}

// reserve checks the limits and reserves uri for caller: a Channel
// without its endpoint yet.
func (tb *Table) reserve(caller adapters.Caller, uri string, methods rpc.StreamMethods) (*Channel, *rpc.Error) {
	tc, e := tb.tryReserve(caller, uri, methods)
	if e != nil && e.Code == rpc.CodePermissionDenied && tb.cfg.YieldParked && tb.abandonParked(caller.Principal) > 0 {
		tc, e = tb.tryReserve(caller, uri, methods)
	}
	return tc, e
}

// abandonParked abandons principal's parked channels and returns how
// many (their quota entries are free on return).
func (tb *Table) abandonParked(principal string) int {
	tb.mu.Lock()
	var parked []*Channel
	for _, tc := range tb.conns {
		if tc.principal == principal && tc.Parked() {
			parked = append(parked, tc)
		}
	}
	tb.mu.Unlock()
	for _, tc := range parked {
		tc.Abandon("its quota entry is wanted by a new channel of the same principal")
	}
	return len(parked)
}

func (tb *Table) tryReserve(caller adapters.Caller, uri string, methods rpc.StreamMethods) (*Channel, *rpc.Error) {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	if tb.shutdown {
		return nil, rpc.Errorf(rpc.CodeInternalError, "server is shutting down")
	}
	if _, exists := tb.conns[uri]; exists {
		what := "TCP connection"
		if methods != rpc.TCPStream || !strings.HasPrefix(uri, rpc.TCPScheme) {
			what = "channel"
		}
		return nil, rpc.Errorf(rpc.CodeAlreadyExists, "%s already exists: %s", what, uri)
	}
	res, e := tb.cfg.Quotas.Reserve(tb.cfg.Quota, caller)
	if e != nil {
		return nil, e
	}
	tc := &Channel{
		tb: tb, id: uri, owner: caller.Conn, clientID: caller.ClientID, principal: caller.Principal, res: res,
		enc:      bytestream.NewEncoder(methods, uri),
		log:      tb.cfg.Log.With("channel", uri, "client", caller.ClientID),
		closed:   make(chan struct{}),
		halfDone: make(chan struct{}),
		readDone: make(chan struct{}),
		wake:     make(chan struct{}, 1),
		wqWake:   make(chan struct{}, 1),
	}
	tb.conns[uri] = tc
	return tc, nil
}

// start gives a reserved tc its endpoint and starts its loops, and the
// lease for its subscription; false (sock closed, tc freed) when the
// creating connection ended meanwhile (gone) or the host is shutting
// down.
func (tc *Channel) start(sock Endpoint, gone bool) bool {
	tb := tc.tb
	// The connection may have ended (or the host begun to shut down)
	// while we dialed: then nobody will subscribe.
	tc.mu.Lock()
	tb.mu.Lock()
	gone = gone || tc.isClosed || tb.shutdown
	if !gone {
		tc.sock = sock
		tb.wg.Add(2)
	}
	tb.mu.Unlock()
	if !gone {
		tc.lease = time.AfterFunc(SubscribeLease, func() {
			tc.mu.Lock()
			subscribed := tc.sub != nil
			tc.mu.Unlock()
			if !subscribed {
				tc.close("not subscribed within " + SubscribeLease.String())
			}
		})
	}
	tc.mu.Unlock()
	if gone {
		_ = sock.Close()
		tc.close("client connection closed while dialing")
		return false
	}
	go tc.readLoop()
	go tc.writeLoop()
	return true
}

// Adopt makes sock, a connection the host accepted rather than dialled
// (a reverse forward's listener: adapters/tunnels), the TCP channel uri
// of caller's connection, exactly as Open makes a dialled one: it holds
// an entry of the Table's quota, waits SubscribeLease for caller's
// windowed subscription, and resumes by offsets (Park, Reclaim) as any
// other. The refusals: uri is taken (AlreadyExists), a quota is reached
// (PermissionDenied, naming it): the caller then still owns sock; the
// host is shutting down (-32603): sock is closed. On success the Table
// owns it.
func (tb *Table) Adopt(caller adapters.Caller, uri string, sock *net.TCPConn) (*Channel, *rpc.Error) {
	tc, e := tb.reserve(caller, uri, rpc.TCPStream)
	if e != nil {
		return nil, e
	}
	tc.setAudit(caller, map[string]any{"channel": uri, "client.address": sock.RemoteAddr().String(), "server.address": sock.LocalAddr().String(), "reverse": true})
	if !tc.start(sock, false) {
		return nil, rpc.Errorf(rpc.CodeInternalError, "server is shutting down")
	}
	tc.log.Debug("accepted TCP connection adopted", "remote", sock.RemoteAddr().String())
	return tc, nil
}

// chanAudit is what a channel's audit events say: who opened it, when,
// and where to.
type chanAudit struct {
	caller adapters.Caller
	start  time.Time
	attrs  map[string]any
}

// setAudit records "tcp.open" for tc (when the Table audits) and keeps
// what its "tcp.close" will say.
func (tc *Channel) setAudit(caller adapters.Caller, attrs map[string]any) {
	if tc.tb.cfg.Audit == nil {
		return
	}
	tc.audit = &chanAudit{caller: caller, start: time.Now(), attrs: attrs}
	tc.tb.cfg.Audit(caller, audit.ActionTCPOpen, maps.Clone(attrs))
}

// Channel is one ahp-tcp:/<id> channel and its socket. It belongs to the
// connection that created it; only that connection's windowed
// subscription moves data.
//
// Socket to client: readLoop reads only when the subscription's stream
// has room (delivery.Stream.Room) beyond what is already read and queued,
// at most that much (and ReadAhead bytes), so a client that stops
// crediting stops the socket after one window; the Source hands the
// messages to the scheduler one by one. Client to socket: Receive queues
// decoded bytes (bounded by hostReceive's window) for writeLoop, which
// releases each message's credit once the socket took its bytes.
type Channel struct {
	tb        *Table
	id        string // the channel URI
	clientID  string
	principal string
	// res is the connection's entry in the host's quotas, held while
	// its URI is (dialing, open, parked), released once it is free.
	res *adapters.Reservation
	// audit, when set (before start), is what "tcp.close" says.
	audit *chanAudit
	enc   *bytestream.Encoder
	log   hclog.Logger
	sock  Endpoint // nil while dialing; set under tb.mu and tc.mu

	closeOnce sync.Once
	closed    chan struct{} // closed when the connection is closed or reset
	halfDone  chan struct{} // closed once the writer has half-closed the socket after tcp/eof
	readDone  chan struct{} // closed when the reader ends
	wake      chan struct{} // 1-slot: the reader may proceed (attached, slot taken)
	wqWake    chan struct{} // 1-slot: the write queue has items

	mu    sync.Mutex
	owner adapters.ConnID     // the creating connection, or the one that resumed it
	lease *time.Timer         // closes the connection if nobody subscribes
	sub   adapters.Subscriber // the creator's windowed subscription
	// parked: its connection was lost and the channel waits for a
	// reconnect (Park, Reclaim, Abandon): the socket stays open, nothing
	// is read from it, what was accepted is still written.
	parked bool
	// ret is what was sent to the client and not yet credited, for a
	// resume (bounded by the window: Retained).
	ret bytestream.Retained
	// Socket to client.
	slots     []slot                   // the next tcp/data messages, read but not yet pulled
	slotBytes delivery.UTF16Bytes      // their total size
	readOff   bytestream.DecodedOffset // bytes read from the socket
	eofRead   bool                     // the socket reached EOF: tcp/eof is due after slots
	eofSent   bool
	isClosed  bool
	draining  bool // closing after tcp/eof: the reader drops, the writer drains
	// Client to socket.
	wq      []write
	recvOff bytestream.DecodedOffset // bytes accepted from the client
	eofRecv bool                     // tcp/eof received: no more data
}

// write is one queued client message: bytes to write (or the
// half-close, eof) and the release that credits its size once done.
type write struct {
	data    []byte
	buf     []byte // data's buffer, back to bufs once written
	recycle func() // or, data in the message's own buffer: gives it back (adapters.Message.Keep)
	eof     bool
	release func()
}

// free gives back w's buffer: to bufs, or to the transport it was read
// from. Once only; w.data is not used afterwards.
func (w *write) free() {
	if w.recycle != nil {
		w.recycle()
		return
	}
	bufs.Put(w.buf)
}

// slot is one tcp/data message read ahead (or sent before a reconnect,
// to send again), in the form it is sent (text or binary: Stream.Binary),
// with its size, and the offset past its bytes.
type slot struct {
	m   delivery.Message
	end bytestream.DecodedOffset
	// resent: a message sent again after a resume, whose buffer never
	// goes back to the pool (Retained.Resend).
	resent bool
}

// bufs recycles the buffers readLoop reads the socket into and those
// client tcp/data is decoded into (one per message, from Receive until
// writeLoop has written it). At most 8 are kept (bufpool: bounded).
var bufs = bufpool.New(8, 16<<10, 1<<20)

// URI implements adapters.Channel.
func (tc *Channel) URI() string { return tc.id }

// what names the channel in log lines: "file" for a file channel
// (TableConfig.Label "file"), else "TCP connection".
func (tc *Channel) what() string {
	if tc.tb.cfg.Label == "file" {
		return "file"
	}
	return "TCP connection"
}

// Traits implements adapters.Channel: windowed only, with the tcp
// block's limits, within the client's window budget.
func (tc *Channel) Traits() adapters.Traits {
	label := tc.tb.cfg.Label
	if label == "" {
		label = "tcp"
	}
	return adapters.Traits{Delivery: adapters.WindowedOnly, Label: label, Limits: &tc.tb.cfg.Limits, Budget: &tc.tb.cfg.Budget}
}

// OwnedBy reports whether conn owns tc and tc is not parked.
func (tc *Channel) OwnedBy(conn adapters.ConnID) bool {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	return tc.owner == conn && !tc.parked
}

// Parked reports whether tc waits for a reconnect (Park).
func (tc *Channel) Parked() bool {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	return tc.parked
}

// Snapshot implements adapters.Channel: a TCP channel's state is empty.
func (tc *Channel) Snapshot(fn func(rpc.Snapshot)) {
	fn(rpc.Snapshot{Resource: tc.id, State: json.RawMessage(`{}`), FromSeq: tc.tb.cfg.Seq()})
}

// Recover implements adapters.Channel: a TCP channel resumes only
// through Park and Reclaim (by byte offsets), never by serverSeq.
func (tc *Channel) Recover(uint64) adapters.Recovery { return adapters.RecoverNone }

// Resume implements adapters.Channel: the source of a channel Reclaim
// took over: the messages to send again, then the socket's bytes; no
// snapshot.
func (tc *Channel) Resume(sub adapters.Subscriber, _ uint64) delivery.Source {
	return &source{tc: tc, sub: sub}
}

// Park implements adapters.Resumable: sub's connection was lost and its
// client may reconnect. The socket stays open; nothing more is read from
// it (its reader waits for a subscription), what the client sent and the
// host accepted is still written, and what was sent to the client and
// not credited stays retained. false when tc cannot be kept (sub is not
// its subscription, or it is closing): the caller ends sub as usual.
func (tc *Channel) Park(sub adapters.Subscriber) bool {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	if tc.sub != sub || sub == nil || tc.isClosed || tc.draining || tc.sock == nil {
		return false
	}
	if st := sub.Stream(); st != nil {
		_, consumed, _ := st.Window()
		tc.ret.Credit(consumed)
	}
	tc.sub = nil
	tc.parked = true
	tc.log.Debug(tc.what()+" parked for a reconnect", "retained", tc.ret.Size(), "read", tc.readOff, "received", tc.recvOff)
	return true
}

// Check implements adapters.Resumable: what Reclaim would return for
// peer, without taking tc: the host's offsets (nothing the client sends
// reaches tc while it is parked, so they stay), or why not (not kept, or
// offsets that do not match what was sent).
func (tc *Channel) Check(peer rpc.StreamOffsets) (rpc.StreamOffsets, error) {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	if !tc.parked || tc.isClosed {
		return rpc.StreamOffsets{}, errors.New("not kept")
	}
	if err := tc.ret.Check(bytestream.DecodedOffset(peer.Received), peer.EOF); err != nil {
		return rpc.StreamOffsets{}, err
	}
	return rpc.StreamOffsets{Received: uint64(tc.recvOff), EOF: tc.eofRecv}, nil
}

// Reclaim implements adapters.Resumable: conn takes a parked tc over for
// a reconnect whose client has received peer of the host's direction.
// It returns what the host has received of the client's (every byte of
// which is, or will be, written to the socket). The retained messages
// from peer.Received on go out again first, before what was read and not
// yet sent; Resume's source sends them once subscribed. An error (not
// parked, or offsets that do not match what was sent) resets the socket.
func (tc *Channel) Reclaim(conn adapters.ConnID, peer rpc.StreamOffsets) (rpc.StreamOffsets, error) {
	tc.mu.Lock()
	if !tc.parked || tc.isClosed {
		tc.mu.Unlock()
		return rpc.StreamOffsets{}, errors.New("not kept")
	}
	again, err := tc.ret.Resend(bytestream.DecodedOffset(peer.Received), peer.EOF)
	if err != nil {
		tc.mu.Unlock()
		tc.abort("resume: "+err.Error(), false)
		return rpc.StreamOffsets{}, err
	}
	slots := make([]slot, 0, len(again)+len(tc.slots))
	var total delivery.UTF16Bytes
	for _, m := range again {
		if m.EOF {
			tc.eofSent = false // NextSized sends it again after the data
			continue
		}
		slots = append(slots, slot{m: m.Msg, end: m.End, resent: true})
		total += m.Msg.Size
	}
	tc.slots = append(slots, tc.slots...)
	tc.slotBytes += total
	tc.owner = conn
	tc.parked = false
	tc.res.Move(conn)
	ours := rpc.StreamOffsets{Received: uint64(tc.recvOff), EOF: tc.eofRecv}
	tc.mu.Unlock()
	tc.log.Debug(tc.what()+" resumed", "resend", len(again), "resend_bytes", total, "from", peer.Received)
	return ours, nil
}

// Abandon implements adapters.Resumable: a parked tc that was not
// resumed (the grace ended, the client did not ask for it) is reset: its
// destination must not take a cut stream for a complete one.
func (tc *Channel) Abandon(reason string) {
	tc.mu.Lock()
	parked := tc.parked
	tc.mu.Unlock()
	if parked {
		tc.abort(reason, false)
	}
}

// Source implements adapters.Channel: channel/snapshot {} first, then the
// socket's bytes and tcp/eof.
func (tc *Channel) Source(sub adapters.Subscriber) delivery.Source {
	text, _ := adapters.SnapshotNotification(tc)
	return &source{tc: tc, sub: sub, snap: text}
}

// Subscribe implements adapters.Channel: the creator's subscription
// starts the socket; anybody else's is answered with tcp/reset (only the
// creating client and transport may use a TCP channel).
func (tc *Channel) Subscribe(sub adapters.Subscriber) {
	if !tc.OwnedBy(sub.Conn()) || sub.Stream() == nil {
		tc.log.Warn("subscription from another connection refused", "client", sub.ClientID())
		sub.PushControl(tc.enc.Reset())
		return
	}
	tc.mu.Lock()
	if tc.sub == nil && !tc.isClosed {
		tc.sub = sub
	}
	lease := tc.lease
	tc.mu.Unlock()
	if lease != nil {
		lease.Stop()
	}
	signal(tc.wake)
	// A resumed stream may hold messages to send again already; its
	// first pulls came before it was tc's.
	sub.Stream().Wake()
}

// Release implements adapters.Channel: unsubscribe before any subscribe
// releases the socket at once (ahp.md §6b).
func (tc *Channel) Release(conn adapters.ConnID) {
	if tc.OwnedBy(conn) {
		tc.close("unsubscribed")
	}
}

// Unsubscribe implements adapters.Channel: unsubscribe (or the
// connection's end) closes the socket.
func (tc *Channel) Unsubscribe(sub adapters.Subscriber) {
	tc.mu.Lock()
	mine := tc.sub == sub
	tc.mu.Unlock()
	if mine {
		reason := "unsubscribed"
		if sub.Closing() {
			reason = "client connection closed"
		}
		tc.close(reason)
	}
}

// Receive implements adapters.Channel: tcp/data and tcp/eof from the
// creator's subscription, in order, to the writer.
func (tc *Channel) Receive(m adapters.Message) {
	release := m.Release
	tc.mu.Lock()
	if m.Sub == nil || m.Sub != tc.sub || tc.isClosed {
		tc.mu.Unlock()
		release()
		return
	}
	tc.mu.Unlock()
	methods := tc.enc.Methods()
	switch m.Header.Method {
	case methods.Data:
		var (
			p    bytestream.DataParams
			data []byte
			err  error
			w    = write{release: release}
		)
		if b := m.Header.Binary; b != nil && m.Keep != nil {
			// Queued in the buffer the message was read into: an upload's
			// bytes are not copied between the transport and the socket.
			off := bytestream.DecodedOffset(b.Offset)
			p, data, w.recycle = bytestream.DataParams{Offset: &off}, b.Data, m.Keep()
		} else {
			p, data, err = bytestream.AppendMessageData(bufs.Get(16<<10), m.Header.Params, m.Header.Binary)
			w.buf = data[:0] // the buffer, grown if it had to
		}
		if err != nil {
			w.free()
			release()
			tc.abort(err.Error(), true)
			return
		}
		tc.mu.Lock()
		if tc.eofRecv {
			tc.mu.Unlock()
			w.free()
			release()
			tc.abort("protocol error: tcp/data after tcp/eof", true)
			return
		}
		data, err = bytestream.Trim(p.Offset, data, tc.recvOff)
		if err != nil {
			tc.mu.Unlock()
			w.free()
			release()
			tc.abort(err.Error(), true)
			return
		}
		if len(data) == 0 { // a resend of bytes already taken
			tc.mu.Unlock()
			w.free()
			release()
			return
		}
		tc.recvOff += bytestream.DecodedOffset(len(data))
		w.data = data
		tc.wq = append(tc.wq, w)
		tc.mu.Unlock()
		signal(tc.wqWake)
	case methods.EOF:
		p, err := bytestream.ParseEOF(m.Header.Params)
		tc.mu.Lock()
		switch {
		case err != nil:
		case tc.eofRecv:
			err = errors.New("protocol error: a second tcp/eof")
		case p.Offset != nil && *p.Offset != tc.recvOff:
			err = errors.New("protocol error: tcp/eof offset does not match the bytes received")
		}
		if err != nil {
			tc.mu.Unlock()
			release()
			tc.abort(err.Error(), true)
			return
		}
		tc.eofRecv = true
		tc.wq = append(tc.wq, write{eof: true, release: release})
		tc.mu.Unlock()
		signal(tc.wqWake)
	default:
		release()
	}
}

// Control implements adapters.Channel: tcp/reset aborts at once.
func (tc *Channel) Control(sub adapters.Subscriber, h *rpc.Header) {
	tc.mu.Lock()
	mine := sub != nil && sub == tc.sub
	tc.mu.Unlock()
	if mine && h.Method == tc.enc.Methods().Reset {
		tc.abort("reset by the client", false)
	}
}

// Queued returns the UTF-16 bytes of tcp/data read from the socket and
// not yet pulled by the scheduler (at most about Queued).
func (tc *Channel) Queued() delivery.UTF16Bytes {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	return tc.slotBytes
}

// readLoop reads the socket while the subscription's stream has room for
// more than what is already read and queued (and the queue is below
// Queued): the bytes read ahead are always within the credit.
func (tc *Channel) readLoop() {
	defer tc.tb.wg.Done()
	defer close(tc.readDone)
	for {
		st, room, ok := tc.waitReadable()
		if !ok {
			return
		}
		if st == nil { // draining: what the destination sends goes nowhere
			buf := bufs.Get(16 << 10)[:16<<10]
			_, err := tc.sock.Read(buf)
			bufs.Put(buf)
			if err != nil {
				return
			}
			continue
		}
		frame := st.FrameBytes()
		binary := st.Binary() && tc.enc.Binary()
		tc.mu.Lock()
		off := tc.readOff
		tc.mu.Unlock()
		per := tc.enc.MaxPayload(off, frame)
		if per <= 0 {
			tc.abort("maximumFrameBytes too small for tcp/data", true)
			return
		}
		n := ReadSize(per, delivery.UTF16Bytes(2*tc.enc.DataLen(off, per)), room)
		var (
			msgs  []slot
			total delivery.UTF16Bytes
			nr    int
			err   error
		)
		if binary && n <= per {
			// One message's worth (a bulk transfer's usual read once the
			// window has grown): read in place into the buffer of the
			// message that carries the bytes, so they are never copied
			// between the socket and the transport.
			var pl bytestream.Payload
			pl, err = tc.enc.ReadPayload(tc.sock, n, true)
			if nr = pl.Len(); nr > 0 {
				m := pl.Message(off)
				msgs = []slot{{m: m, end: off + bytestream.DecodedOffset(nr)}}
				total = m.Size
			}
		} else {
			// The buffer is held only while reading: a connection whose
			// window is full keeps none.
			buf := bufs.Get(n)[:n]
			nr, err = tc.sock.Read(buf)
			for p, o := buf[:max(nr, 0)], off; len(p) > 0; {
				k := min(len(p), tc.enc.MaxPayload(o, frame))
				// The binary form where the connection carries it: the
				// stream bytes as they are, no base64 built to be decoded
				// again by the transport.
				m := tc.enc.Data(o, p[:k], binary)
				msgs = append(msgs, slot{m: m, end: o + bytestream.DecodedOffset(k)})
				total += m.Size
				o += bytestream.DecodedOffset(k)
				p = p[k:]
			}
			bufs.Put(buf)
		}
		if nr > 0 {
			tc.mu.Lock()
			if tc.isClosed {
				tc.mu.Unlock()
				return
			}
			tc.slots = append(tc.slots, msgs...)
			tc.slotBytes += total
			tc.readOff += bytestream.DecodedOffset(nr)
			tc.mu.Unlock()
			tc.wakeStream()
		}
		if errors.Is(err, io.EOF) {
			tc.mu.Lock()
			tc.eofRead = true
			tc.mu.Unlock()
			tc.wakeStream()
			return
		}
		if err != nil {
			tc.abort("socket read failed: "+err.Error(), true)
			return
		}
	}
}

// wakeStream wakes the current subscription's stream, if any: a read
// that began before a reconnect ends after it, under a new stream (a
// parked channel has none: its resumed stream pulls when it starts).
func (tc *Channel) wakeStream() {
	tc.mu.Lock()
	sub := tc.sub
	tc.mu.Unlock()
	if sub != nil {
		sub.Stream().Wake()
	}
}

// ReadSize is how many bytes one socket read may take: whole messages of
// per bytes (each at most size UTF-16 bytes) while the stream's room lets
// them start, at least one, at most ReadAhead bytes.
func ReadSize(per int, size, room delivery.UTF16Bytes) int {
	msgs := 1
	if room > size {
		msgs = int((room + size - 1) / size) // the last may start below the window
	}
	return max(per, min(msgs*per, ReadAhead/per*per))
}

// waitReadable blocks until the reader may read, and returns the stream
// and the room it may fill (delivery.Stream.WaitRoom: room after the path
// cap beyond the messages read and not yet pulled, which stay under
// Queued); false once closed.
func (tc *Channel) waitReadable() (*delivery.Stream, delivery.UTF16Bytes, bool) {
	held := func() delivery.UTF16Bytes {
		tc.mu.Lock()
		defer tc.mu.Unlock()
		return tc.slotBytes
	}
	for {
		tc.mu.Lock()
		sub, closed, draining := tc.sub, tc.isClosed, tc.draining
		tc.mu.Unlock()
		switch {
		case closed:
			return nil, 0, false
		case draining:
			return nil, 0, true
		case sub != nil:
			st := sub.Stream()
			room, removed := st.WaitRoom(held, Queued, tc.wake, tc.closed)
			if room > 0 {
				return st, room, true
			}
			if !removed {
				continue // woken (a new subscription, draining) or closed: look again
			}
		}
		select { // no subscription (yet, or parked), or its stream removed
		case <-tc.wake:
		case <-tc.closed:
			return nil, 0, false
		}
	}
}

// writeLoop writes client bytes to the socket in order, one writer per
// connection, and credits each message once the socket took it. The data
// messages queued together go out in one writev.
func (tc *Channel) writeLoop() {
	defer tc.tb.wg.Done()
	var batch []write
	var bv net.Buffers
	for {
		select {
		case <-tc.wqWake:
		case <-tc.closed:
			return
		}
		for {
			tc.mu.Lock()
			if len(tc.wq) == 0 || tc.isClosed {
				tc.mu.Unlock()
				break
			}
			n := 0
			for n < len(tc.wq) && !tc.wq[n].eof {
				n++
			}
			if n == 0 { // the half-close, after everything before it
				w := tc.wq[0]
				tc.wq[0] = write{}
				tc.wq = tc.wq[1:]
				tc.mu.Unlock()
				err := tc.sock.CloseWrite()
				w.release()
				if err != nil {
					tc.abort("half-close failed: "+err.Error(), true)
					return
				}
				close(tc.halfDone)
				return
			}
			batch = append(batch[:0], tc.wq[:n]...)
			clear(tc.wq[:n])
			tc.wq = tc.wq[n:]
			tc.mu.Unlock()
			bv = bv[:0]
			for _, w := range batch {
				bv = append(bv, w.data)
			}
			all := bv // WriteTo consumes bv
			_, err := all.WriteTo(tc.sock)
			clear(bv[:cap(bv)])
			for i := range batch {
				batch[i].release()
				batch[i].free()
				batch[i] = write{}
			}
			if err != nil {
				tc.abort("socket write failed: "+err.Error(), true)
				return
			}
		}
	}
}

// close closes the connection (unsubscribe, the client's connection
// ended, the lease expired, shutdown) and frees its URI: gracefully once
// the client ended its direction with tcp/eof, else with an RST, so the
// destination never takes a stream cut short (the client gone mid-upload)
// for a complete one.
func (tc *Channel) close(reason string) {
	tc.mu.Lock()
	ended, already := tc.eofRecv, tc.draining || tc.isClosed
	if ended && !already && tc.sock != nil {
		tc.draining = true
		tc.slots, tc.slotBytes = nil, 0 // nobody will pull them
	}
	tc.mu.Unlock()
	switch {
	case already:
	case !ended || tc.sock == nil:
		tc.end(reason, true, false)
	default:
		// The URI is free at once; the socket drains behind it.
		tb := tc.tb
		tb.mu.Lock()
		tb.freeLocked(tc)
		tb.draining[tc] = struct{}{}
		tb.mu.Unlock()
		signal(tc.wake) // the reader turns to dropping
		tb.wg.Add(1)
		go tc.drain(reason)
	}
}

// shutdown closes the connection at once: with a FIN when the client's
// bytes are all written and half-closed already, else with an RST (a
// drain does not hold the host's shutdown up).
func (tc *Channel) shutdown() {
	select {
	case <-tc.halfDone:
		tc.end("server shutting down", false, false)
	default:
		tc.end("server shutting down", true, false)
	}
}

// drain finishes a graceful close: once the writer has written what the
// client sent and half-closed the socket, and the destination has ended
// its side (read and dropped meanwhile), the socket is closed with a FIN
// and nothing lost; a destination that is not done within DrainTimeout
// is reset. Closing with unread bytes would send an RST, which makes the
// destination's kernel discard what its program has not read yet.
func (tc *Channel) drain(reason string) {
	defer tc.tb.wg.Done()
	timer := time.NewTimer(DrainTimeout)
	defer timer.Stop()
	for _, done := range []chan struct{}{tc.halfDone, tc.readDone} {
		select {
		case <-done:
		case <-tc.closed:
			return // reset meanwhile
		case <-timer.C:
			tc.end(reason+": not drained within "+DrainTimeout.String(), true, false)
			return
		}
	}
	tc.end(reason, false, false)
}

// abort resets the connection at once: the socket is closed with an RST
// (SO_LINGER 0), queued bytes are dropped, and with tell the client gets
// tcp/reset.
func (tc *Channel) abort(reason string, tell bool) { tc.end(reason, true, tell) }

func (tc *Channel) end(reason string, reset, tell bool) {
	tc.mu.Lock()
	if tc.isClosed {
		tc.mu.Unlock()
		return
	}
	tc.isClosed = true
	sub := tc.sub
	wq := tc.wq
	lease := tc.lease
	sent, received := tc.readOff, tc.recvOff
	tc.wq, tc.slots = nil, nil
	tc.ret.Drop()
	tc.mu.Unlock()
	tc.closeOnce.Do(func() { close(tc.closed) })
	if lease != nil {
		lease.Stop()
	}
	for _, w := range wq {
		w.release()
	}
	tb := tc.tb
	tb.mu.Lock()
	tb.freeLocked(tc)
	delete(tb.draining, tc)
	sock := tc.sock
	tb.mu.Unlock()
	if sock != nil {
		if reset {
			_ = sock.SetLinger(0)
		} else {
			// Disarm the RST of a dying daemon (Dial): bytes still
			// queued go out, then a FIN.
			_ = sock.SetLinger(-1)
		}
		_ = sock.Close()
	}
	if reset { // routine (clients and destinations reset all the time): debug
		tc.log.Debug(tc.what()+" reset", "reason", reason)
	} else {
		tc.log.Debug(tc.what()+" closed", "reason", reason)
	}
	if a := tc.audit; a != nil {
		attrs := maps.Clone(a.attrs)
		// Bytes from the destination to the client (read), and from the
		// client to the destination (accepted for writing).
		attrs["sent.bytes"], attrs["received.bytes"] = uint64(sent), uint64(received)
		attrs["duration"] = time.Since(a.start)
		attrs["reason"] = reason
		attrs["reset"] = reset
		tc.tb.cfg.Audit(a.caller, audit.ActionTCPClose, attrs)
	}
	if tell && sub != nil {
		sub.PushControl(tc.enc.Reset())
	}
	if sub != nil {
		sub.Stream().Wake()
	}
}

// source is the delivery.Source of a TCP subscription.
type source struct {
	tc   *Channel
	sub  adapters.Subscriber
	snap []byte // channel/snapshot, sent first
}

// Next implements delivery.Source (writer goroutine; never blocks): the
// snapshot, then the tcp/data read ahead, then tcp/eof.
func (src *source) Next() delivery.Message {
	if src.snap != nil {
		t := src.snap
		src.snap = nil
		return delivery.Message{Text: t}
	}
	tc := src.tc
	tc.mu.Lock()
	defer tc.mu.Unlock()
	if tc.sub != src.sub || tc.isClosed {
		return delivery.Message{}
	}
	if len(tc.slots) > 0 || tc.eofRead && !tc.eofSent {
		// What was sent and not yet credited is retained for a resume;
		// the credit seen so far releases the rest.
		sent, consumed, _ := src.sub.Stream().Window()
		tc.ret.Credit(consumed)
		if len(tc.slots) > 0 {
			t := tc.slots[0]
			tc.slots[0] = slot{}
			tc.slots = tc.slots[1:]
			tc.slotBytes -= t.m.Size
			signal(tc.wake)
			tc.ret.Sent(t.m, sent, t.end, false, !t.resent)
			return t.m
		}
		tc.eofSent = true
		eof := delivery.Message{Text: tc.enc.EOF(tc.readOff)}
		eof.Size = delivery.Measure(eof.Text)
		tc.ret.Sent(eof, sent, tc.readOff, true, false)
		return eof
	}
	return delivery.Message{}
}

// signal is a non-blocking send on a 1-slot channel.
func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

var _ adapters.Channel = (*Channel)(nil)

// ReadOffset returns the bytes read from the socket so far.
func (tc *Channel) ReadOffset() bytestream.DecodedOffset {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	return tc.readOff
}
