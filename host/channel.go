package host

import (
	"encoding/json"
	"net/url"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/sidecar-dev/sidecar/delivery"
	"github.com/sidecar-dev/sidecar/journal"
	"github.com/sidecar-dev/sidecar/rpc"
)

// channel is an AHP channel. By default its actions live in the journal
// and windowed subscribers read them by cursor (logSource); a channel
// implements the optional interfaces below to do otherwise.
type channel interface {
	uri() string
	// lockedSnapshot runs fn with the channel's snapshot while the channel
	// lock is held, so no action of the channel is appended meanwhile.
	lockedSnapshot(fn func(rpc.Snapshot))
}

// sourceChannel provides its own windowed Source (TCP, telemetry) instead
// of the journal. The Source's first message must be channel/snapshot.
type sourceChannel interface {
	newSource(sub *subscription) delivery.Source
}

// windowedOnly channels refuse ordinary subscriptions (TCP).
type windowedOnly interface{ windowedOnly() }

// statelessChannel answers an ordinary subscribe with {} (no snapshot) and
// pushes its own notifications to ordinary subscribers (telemetry).
type statelessChannel interface{ stateless() }

// attachable channels track their subscriptions (terminal pacing, TCP).
// attach runs once the subscription is registered and its result queued;
// detach when it ends (unsubscribe, dispose, connection closed).
type attachable interface {
	attach(sub *subscription)
	detach(sub *subscription)
}

// ownedChannel channels belong to one connection (TCP: only the creating
// client and transport may use it); others get NotFound.
type ownedChannel interface{ ownedBy(c *conn) bool }

// unsubscribeReleaser channels free their resource when their owner
// unsubscribes without ever having subscribed (TCP, before the lease ends).
type unsubscribeReleaser interface{ releaseUnsubscribed(c *conn) }

// dataHandler channels receive client data messages other than
// dispatchAction (tcp/data, tcp/eof), counted and reassembled already;
// release must be called once the bytes are released.
type dataHandler interface {
	clientData(sub *subscription, h *rpc.Header, release func())
}

// controlHandler channels receive channel-defined control messages
// (tcp/reset), which are never counted.
type controlHandler interface {
	clientControl(sub *subscription, h *rpc.Header)
}

// snapshotNotification encodes channel/snapshot for a windowed subscriber.
func snapshotNotification(ch channel) (text []byte, fromSeq uint64) {
	ch.lockedSnapshot(func(s rpc.Snapshot) {
		text, _ = rpc.Notification(rpc.MethodChannelSnapshot, rpc.ChannelSnapshotParams{Channel: ch.uri(), Snapshot: s})
		fromSeq = s.FromSeq
	})
	return text, fromSeq
}

// logSource feeds a windowed subscription from the journal: first a
// channel/snapshot, then every action after its fromSeq, each text encoded
// once and shared by all subscribers. A subscriber whose cursor falls behind
// what the journal retains gets a fresh snapshot (recovery), so a slow
// viewer never holds anything up.
type logSource struct {
	ch      channel
	j       *journal.Journal
	cursor  atomic.Uint64
	snap    atomic.Bool // a snapshot is due
	resyncs atomic.Uint64
}

func newLogSource(ch channel, j *journal.Journal) *logSource {
	ls := &logSource{ch: ch, j: j}
	ls.snap.Store(true)
	return ls
}

// Next implements delivery.Source. Writer goroutine only.
func (ls *logSource) Next() []byte {
	if ls.snap.Load() {
		return ls.snapshot()
	}
	e, ok, err := ls.j.Next(ls.ch.uri(), ls.cursor.Load())
	if err == journal.ErrTruncated {
		ls.resyncs.Add(1)
		return ls.snapshot()
	}
	if !ok {
		return nil
	}
	ls.cursor.Store(e.Seq)
	return e.Text
}

func (ls *logSource) snapshot() []byte {
	text, seq := snapshotNotification(ls.ch)
	ls.cursor.Store(seq)
	ls.snap.Store(false)
	return text
}

// lagBelow reports whether what the subscriber has not pulled yet is
// under maxBytes (UTF-8 bytes of notification text). A pending snapshot
// counts as a lag.
func (ls *logSource) lagBelow(maxBytes int) bool {
	if ls.snap.Load() {
		return false
	}
	_, b := ls.j.Lag(ls.ch.uri(), ls.cursor.Load(), maxBytes)
	return b < maxBytes
}

// subscription is one client's subscription to one channel.
type subscription struct {
	c       *conn
	ch      channel
	channel string

	// Windowed: out/src send host→client, in receives client→host.
	out *delivery.Stream
	src *logSource
	in  *delivery.Inbound

	// Ordinary: actions are held until the subscribe result is queued,
	// then pushed to the connection's ordinary FIFO.
	mu     sync.Mutex
	active bool
	held   []journal.Entry
	gapped bool
}

func (sub *subscription) windowed() bool { return sub.out != nil }

// onEntry is the journal listener (under the journal lock).
func (sub *subscription) onEntry(_ string, e journal.Entry) {
	if sub.windowed() {
		sub.out.Wake()
		return
	}
	sub.mu.Lock()
	defer sub.mu.Unlock()
	if !sub.active {
		if len(sub.held) >= maxHeldActions {
			sub.gapped = true
			return
		}
		sub.held = append(sub.held, e)
		return
	}
	if err := sub.c.sched.PushOrdinary(sub.channel, e.Seq, e.Text); err != nil {
		go sub.c.fail(err)
	}
}

// activate moves held actions to the FIFO once the result is queued.
func (sub *subscription) activate() {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	sub.active = true
	for _, e := range sub.held {
		if err := sub.c.sched.PushOrdinary(sub.channel, e.Seq, e.Text); err != nil {
			go sub.c.fail(err)
			break
		}
	}
	sub.held = nil
}

// maxHeldActions bounds actions held between a subscribe's snapshot and its
// result being queued (microseconds in practice; the bound is for safety:
// past it the FIFO's gap mechanism reports the loss).
const maxHeldActions = 1024

// root is the ahp-root:// channel: the terminal catalogue.
type root struct {
	s  *Server
	mu sync.Mutex
	// terminals is the catalogue, kept here so that the root never takes a
	// terminal lock (terminals call update while holding theirs).
	terminals map[string]rpc.TerminalInfo
}

func newRoot(s *Server) *root { return &root{s: s, terminals: map[string]rpc.TerminalInfo{}} }

func (r *root) uri() string { return rpc.RootChannel }

func (r *root) listLocked() []rpc.TerminalInfo {
	list := make([]rpc.TerminalInfo, 0, len(r.terminals))
	for _, t := range r.terminals {
		list = append(list, t)
	}
	sort.Slice(list, func(i, j int) bool { return list[i].Resource < list[j].Resource })
	return list
}

func (r *root) lockedSnapshot(fn func(rpc.Snapshot)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	state, _ := rpc.Marshal(rpc.RootState{Agents: []json.RawMessage{}, Terminals: r.listLocked(), Ports: r.portsLocked()})
	fn(rpc.Snapshot{Resource: rpc.RootChannel, State: state, FromSeq: r.s.journal.Seq()})
}

// update sets (or with remove, deletes) a terminal's catalogue entry and
// dispatches root/terminalsChanged with the full list (ahp.md §4).
func (r *root) update(info rpc.TerminalInfo, remove bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if remove {
		delete(r.terminals, info.Resource)
	} else {
		r.terminals[info.Resource] = info
	}
	action := rpc.RootTerminalsAction{Type: rpc.ActionRootTerminals, Terminals: r.listLocked()}
	_, _ = r.s.journal.Append(rpc.RootChannel, hostAction(rpc.RootChannel, action))
}

// hostAction returns an encoder of a host-originated action envelope.
func hostAction(channel string, action any) func(seq uint64) ([]byte, error) {
	return func(seq uint64) ([]byte, error) {
		a, err := rpc.Marshal(action)
		if err != nil {
			return nil, err
		}
		return rpc.AppendActionEnvelope(nil, channel, a, seq), nil
	}
}

// appendDataHead appends the terminal/data action envelope carrying data,
// up to its serverSeq: with the seq and rpc.ActionEnvelopeEnd after it
// (journal.AppendSeq) it is the text hostAction would give for the
// action. The hot path: built by appending, without reflection,
// re-validation or allocation (dst has room after the first few).
func appendDataHead(dst []byte, channel string, data []byte) []byte {
	dst = rpc.AppendActionOpen(dst, channel)
	dst = append(dst, `{"type":"terminal/data","data":`...)
	dst = delivery.AppendJSONBytes(dst, data)
	dst = append(dst, '}')
	return append(dst, rpc.ActionSeqMember...)
}

// fileURI turns an absolute path into a file:// URI.
func fileURI(path string) string {
	return (&url.URL{Scheme: "file", Path: path}).String()
}
