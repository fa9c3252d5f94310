// Package adapters holds the registry's contracts: the channel kind (a
// Kind: kind.go, created once per host from a Factory, with the shared
// Quotas of quota.go), the one interface the host (host/) calls on every
// channel (Channel, this file), and what a channel sees of a subscription.
// Each kind lives in its own package and owns its loops: adapters/pty the
// terminal channel (ahp-terminal:), adapters/tcp the TCP channel
// (ahp-tcp:), adapters/telemetry the metrics and logs channels
// (ahp-otlp:). The root catalogue (ahp-root://) is the host's own.
//
// The rules every channel follows (DESIGN.md §4-§6, seed 000):
//
//   - Pacing. A producer asks its subscription's delivery.Stream whether a
//     data message may start and how much credit is left (Stream.Room,
//     Stream.CanStart, Stream.Fits), and stops reading its source (the
//     PTY, the socket, the sampler) while it may not; it waits on
//     Stream.Changed. Nothing outside delivery adds window counters up.
//   - Release. Inbound data (Message) carries Release, called exactly once
//     when the channel has released the message's bytes (written to the
//     PTY or the socket, or dropped); the host sends channel/credit then.
//   - Recovery. Resume says what a subscription can resume from after a
//     reconnect: a replay of the journal, a fresh snapshot, or live data,
//     and gives the Source that does it.
//
// Call order for one subscription: Source or Resume (windowed only,
// before its stream exists), then Subscribe once the subscription is registered and
// its subscribe result queued, any number of Receive and Control, then
// Unsubscribe exactly once (unsubscribe, a new subscribe replacing it,
// dispose, the connection's end). After Unsubscribe the channel pushes
// nothing more for it.
package adapters

import (
	"encoding/json"

	"github.com/sidecar-dev/sidecar/auth"
	"github.com/sidecar-dev/sidecar/delivery"
	"github.com/sidecar-dev/sidecar/rpc"
)

// Channel is one AHP channel as the host sees it. Implementations are safe
// for concurrent use: Receive and Control run on the connection's reader
// goroutine, Source's Next on its writer, the rest on request handlers.
type Channel interface {
	// URI is the channel's URI, exactly as subscribed.
	URI() string
	// Traits says how the host subscribes to the channel.
	Traits() Traits
	// Snapshot runs fn with the channel's snapshot while no action of the
	// channel can be appended, so that a subscription registered inside
	// fn misses none and sees none twice (fromSeq is the journal's seq).
	Snapshot(fn func(rpc.Snapshot))
	// Source returns the delivery.Source of a windowed subscription; its
	// first message is channel/snapshot (seed 000 "Subscribe").
	Source(sub Subscriber) delivery.Source
	// Subscribe starts sub: once registered, its result queued.
	Subscribe(sub Subscriber)
	// Unsubscribe ends sub; nothing is pushed for it afterwards.
	Unsubscribe(sub Subscriber)
	// Receive takes one client data message for the channel, counted and
	// reassembled already (seed 000): dispatchAction, tcp/data, tcp/eof.
	Receive(m Message)
	// Control takes a channel-defined control message (tcp/reset),
	// never counted. sub is the sender's subscription, nil if none.
	Control(sub Subscriber, h *rpc.Header)
	// Release frees what the channel holds for conn when conn
	// unsubscribes without a subscription (a TCP connection created but
	// never subscribed, ahp.md §6b); most channels hold nothing.
	Release(conn ConnID)
	// Recover is the recovery hook of reconnect (seed 000
	// "Reconnection", DESIGN.md §6), asked without side effects: how a
	// windowed subscription whose client applied the channel's actions up
	// to lastSeq (its lastAppliedServerSeq) can resume: RecoverReplay,
	// RecoverSnapshot, RecoverLive, or RecoverNone (not resumable: the
	// subscription is reported missing).
	Recover(lastSeq uint64) Recovery
	// Resume returns the Source of such a subscription kept on a new
	// connection, called in place of Source once the reconnect result is
	// queued: after lastSeq for a replay (a journal that no longer reaches
	// back by then makes it send channel/snapshot first), only new data
	// for live. Not called when Recover said RecoverNone.
	Resume(sub Subscriber, lastSeq uint64) delivery.Source
}

// Resumable is implemented by a channel whose windowed subscription, and
// the resource behind it, outlive a lost connection until a reconnect or
// the end of the grace (a TCP channel and its socket: DESIGN.md §6,
// "TCP = replay by byte offsets"). The host calls Park when the
// connection is lost and its client's state is kept, then exactly one of
// Reclaim (a reconnect asks for the channel; then Resume gives its source
// once the result is queued) or Abandon.
type Resumable interface {
	// Park detaches sub, whose connection was lost, and keeps the
	// channel for a reconnect; false when it cannot (the caller ends sub
	// as usual).
	Park(sub Subscriber) bool
	// Check reports what Reclaim would return for the client's offsets
	// peer (those of the reconnect's window item), without taking the
	// channel: the host's offsets for the result item, or why it cannot
	// be resumed (not kept any more, or offsets that do not match what
	// was sent: the caller resets it and reports it missing).
	Check(peer rpc.StreamOffsets) (rpc.StreamOffsets, error)
	// Reclaim gives a parked channel to conn, with the client's offsets
	// (checked already), once the reconnect's result is queued (a result
	// that never goes out leaves the channel parked for the client's
	// retry); then Resume gives its source. It returns the host's
	// offsets; an error means the channel ended meanwhile (it was reset:
	// its subscription gets the reset).
	Reclaim(conn ConnID, peer rpc.StreamOffsets) (rpc.StreamOffsets, error)
	// Abandon resets a parked channel that was not resumed.
	Abandon(reason string)
}

// Traits are a channel's fixed properties.
type Traits struct {
	Delivery Delivery
	// Label is the channel's kind in the host's sidecar_subscriptions
	// metric: a short bounded name ("terminal", "tcp", "metrics").
	Label string
	// Limits, when not nil, is the most the host accepts of a windowed
	// offer on this channel (UTF-16 bytes), instead of its delivery block.
	Limits *delivery.Limits
	// Budget, when not nil, bounds the windows of one client's windowed
	// subscriptions to the channels that share it (TCP channels:
	// tcp.window_bytes_per_client).
	Budget *WindowBudget
}

// WindowBudget bounds the windowBytes of one client's subscriptions to
// the channels that share it, all together: a subscribe or a reconnect
// that would grow them beyond Total gets what is left, but never less
// than the window the subscription has already, nor less than its first
// window (at most First): a connection keeps what it was given, and only
// growth is refused.
type WindowBudget struct {
	Total delivery.UTF16Bytes // 0: no bound
	First delivery.UTF16Bytes
}

// Delivery is how a channel's subscriptions get their messages.
type Delivery int

const (
	// Journaled channels keep their actions in the journal: an ordinary
	// subscription gets the snapshot, then every action in serverSeq
	// order through the connection's ordinary queue; a windowed one
	// reads the journal through its Source (a LogSource).
	Journaled Delivery = iota
	// Stateless channels have no snapshot: an ordinary subscribe is
	// answered {} and the channel pushes its notifications itself
	// (Subscriber.Push); a windowed one gets channel/snapshot {} first.
	Stateless
	// WindowedOnly channels refuse ordinary subscriptions.
	WindowedOnly
)

// Recovery is what a subscription resumes from after a reconnect.
type Recovery int

const (
	// RecoverNone: the subscription cannot be resumed (it is reported in
	// reconnect's missing, and the client subscribes again).
	RecoverNone Recovery = iota
	// RecoverReplay: the journal still holds every action after the
	// client's last one; they are sent again, in order.
	RecoverReplay
	// RecoverSnapshot: the journal no longer reaches back; a fresh
	// channel/snapshot is the first data message.
	RecoverSnapshot
	// RecoverLive: only current data matters (telemetry); nothing old is
	// replayed.
	RecoverLive
)

var recoveryNames = [...]string{RecoverNone: "none", RecoverReplay: "replay", RecoverSnapshot: "snapshot", RecoverLive: "live"}

func (r Recovery) String() string {
	if r >= 0 && int(r) < len(recoveryNames) {
		return recoveryNames[r]
	}
	return "unknown"
}

// ConnID identifies one client connection (one transport session); zero
// is no connection.
type ConnID uint64

// Subscriber is what a channel sees of one subscription. The host's
// subscription registry (host/subscription.go) implements it.
type Subscriber interface {
	// ClientID is the subscribing client's clientId.
	ClientID() string
	// Conn is the subscribing connection.
	Conn() ConnID
	// Identity is who authenticated the subscribing connection, and
	// their role.
	Identity() auth.Identity
	// Stream is a windowed subscription's sending side, from Subscribe
	// on; nil for an ordinary one.
	Stream() *delivery.Stream
	// CanPush reports whether Push would queue now: the subscription is
	// ordinary, active, and fewer than headroom messages wait in its
	// connection's ordinary queue.
	CanPush(headroom int) bool
	// Push queues text (a notification of the channel) for an ordinary
	// subscription when CanPush(headroom); it reports whether it did.
	Push(text []byte, headroom int) bool
	// PushControl queues a control message of the channel (tcp/reset):
	// never counted, never waiting for credit.
	PushControl(text []byte)
	// Closing reports whether the subscription's connection is ending.
	Closing() bool
}

// Message is one client data message for a channel.
type Message struct {
	// Sub is the sender's subscription to the channel, nil if it has none
	// (dispatchAction needs no subscription).
	Sub Subscriber
	// ClientID, Principal and Conn name the sender; Identity is who
	// authenticated its connection (Caller.Identity), whose role decides
	// which actions it may dispatch.
	ClientID  string
	Principal string
	Identity  auth.Identity
	Conn      ConnID
	// Capabilities is the sender's ClientCapabilities (Caller's).
	Capabilities json.RawMessage
	// Header is the message, parsed (rpc.ParseHeader).
	Header *rpc.Header
	// Release must be called exactly once, when the message's bytes are
	// released (credit then flows back, seed 000).
	Release func()
	// Keep, when not nil, hands the buffer the message was read into (the
	// backing store of Header.Binary.Data) to the channel, so that it can
	// queue the bytes without copying them: once Receive has called Keep,
	// the host no longer reuses the buffer, and the channel calls the
	// returned function at most once, when nothing refers to the bytes any
	// more (the buffer then goes back to the transport; not calling it
	// costs only an allocation). Call it only from Receive. The host
	// offers it only for a binary data message whose buffer's capacity is
	// at most twice its length, so what a channel holds this way is at most
	// twice the bytes its receive window lets in.
	Keep func() (recycle func())
}

// Base gives a channel the contract's methods that most kinds do not
// need, as no-ops: embed it and override what the kind does.
type Base struct{}

// Control ignores control messages.
func (Base) Control(Subscriber, *rpc.Header) {}

// Release holds nothing.
func (Base) Release(ConnID) {}

// Receive releases the message at once: the kind takes no client data.
func (Base) Receive(m Message) { m.Release() }

// SnapshotNotification encodes channel/snapshot of ch for a windowed
// subscriber, and the serverSeq its snapshot was taken at.
func SnapshotNotification(ch Channel) (text []byte, fromSeq uint64) {
	return SnapshotNotificationView(ch, nil)
}

// SnapshotNotificationView is SnapshotNotification with the state as v
// sees it (v nil: as it is).
func SnapshotNotificationView(ch Channel, v View) (text []byte, fromSeq uint64) {
	ch.Snapshot(func(s rpc.Snapshot) {
		if v != nil {
			s.State = v.State(s.State)
		}
		text, _ = rpc.Notification(rpc.MethodChannelSnapshot, rpc.ChannelSnapshotParams{Channel: ch.URI(), Snapshot: s})
		fromSeq = s.FromSeq
	})
	return text, fromSeq
}

// HostAction returns an encoder of a host-originated action envelope for
// journal.Append.
func HostAction(channel string, action any) func(seq uint64) ([]byte, error) {
	return func(seq uint64) ([]byte, error) {
		a, err := rpc.Marshal(action)
		if err != nil {
			return nil, err
		}
		return rpc.AppendActionEnvelope(nil, channel, a, seq), nil
	}
}

// Viewed is implemented by a Journaled channel whose state and actions
// depend on who looks: the root catalogue lists a terminal only to those
// who may attach to it (docs/protocol.md "Roles and sharing"). The journal
// keeps one encoding for every subscriber; the host passes each snapshot
// state and action of the channel it sends to a subscriber (subscribe and
// reconnect results, ordinary actions, channel/page, a windowed
// subscription's LogSource) through that subscriber's View.
type Viewed interface {
	// View returns id's view of the channel, nil when id sees it as it is.
	View(id auth.Identity) View
}

// View rewrites a Viewed channel's state and actions for one subscriber.
// Its methods are called under the channel's and the journal's locks:
// they must not call back into either.
type View interface {
	// State returns a snapshot's state (rpc.Snapshot.State: the channel's
	// state JSON) as the subscriber sees it.
	State(state json.RawMessage) json.RawMessage
	// Action returns an action notification (a journal entry's text:
	// the JSON-RPC "action" notification, UTF-8) as the subscriber sees
	// it: text itself when it is unchanged. It never modifies text (the
	// journal's, shared by every subscriber).
	Action(text []byte) []byte
}

// ViewOf returns ch's view for id: nil when ch is not Viewed or id sees
// it as it is.
func ViewOf(ch Channel, id auth.Identity) View {
	if v, ok := ch.(Viewed); ok {
		return v.View(id)
	}
	return nil
}
