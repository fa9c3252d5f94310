package adapters

import (
	"sync"
	"sync/atomic"

	"github.com/sidecar-dev/sidecar/delivery"
	"github.com/sidecar-dev/sidecar/journal"
)

// LogSource feeds a windowed subscription of a Journaled channel from the
// journal (DESIGN.md §5): first a channel/snapshot, then every action after
// its fromSeq, each text encoded once and shared by all subscribers. A
// subscriber whose cursor falls behind what the journal retains gets a
// fresh snapshot (recovery), so a slow viewer never holds anything up.
//
// It wakes its stream itself (delivery.Attacher): a journal listener from
// Attach to Detach, and the shared snapshot it waits for once built, so
// that nothing else is on the output path between the journal and the
// scheduler. Next runs on the connection's writer goroutine; the other
// methods are safe from any goroutine.
type LogSource struct {
	ch      Channel
	j       *journal.Journal
	cursor  atomic.Uint64
	snap    atomic.Bool // a snapshot is due
	resyncs atomic.Uint64
	// snaps, if set, builds the snapshots off the writer and shares
	// them (Shared); wait is the build this source waits for (writer's).
	snaps *Snapshots
	wait  uint64
	// view, if set, is the subscriber's view of a Viewed channel
	// (Viewed): each snapshot and action passes through it.
	view View
	// client is the subscriber's clientId (For): another client's
	// rejection echo (journal.Entry.To) is skipped.
	client string
	// wake wakes the stream the source feeds, from Attach on: when the
	// journal has a new action of the channel or a shared snapshot it
	// waited for was built.
	wake atomic.Pointer[func()]

	// pulled (1-slot) is signalled each time Next finds nothing more:
	// the subscriber has pulled everything the journal holds.
	pulled   chan struct{}
	stopOnce sync.Once
	stopped  chan struct{}
}

// NewLogSource returns the Source of one windowed subscription to ch,
// whose actions are in j.
func NewLogSource(ch Channel, j *journal.Journal) *LogSource {
	ls := NewLogSourceAt(ch, j, 0)
	ls.snap.Store(true)
	return ls
}

// NewLogSourceAt returns the Source of a windowed subscription to ch that
// resumes after lastSeq (replay recovery): no snapshot first, every
// action after lastSeq; one the journal no longer holds makes it send a
// fresh snapshot (resync) instead.
func NewLogSourceAt(ch Channel, j *journal.Journal, lastSeq uint64) *LogSource {
	ls := &LogSource{ch: ch, j: j, pulled: make(chan struct{}, 1), stopped: make(chan struct{})}
	ls.cursor.Store(lastSeq)
	return ls
}

// Shared makes the source take its snapshots from snaps (built off the
// writer goroutine, shared with the channel's other subscribers) instead
// of building each on the writer: while one is built Next returns nil,
// and snaps' onReady wakes the stream. Call it before the source is
// used; it returns ls.
func (ls *LogSource) Shared(snaps *Snapshots) *LogSource {
	ls.snaps = snaps
	return ls
}

// Viewed makes the source send the channel as v sees it (v nil: as it
// is): its snapshots are built for it alone (not Shared) and each action
// passes through v. Call it before the source is used; it returns ls.
func (ls *LogSource) Viewed(v View) *LogSource {
	ls.view = v
	return ls
}

// For makes the source the subscription of client (its clientId): the
// journal's entries for another client only (journal.Entry.To: the echo
// of an action the host rejected) are skipped. Call it before the source
// is used; it returns ls.
func (ls *LogSource) For(client string) *LogSource {
	ls.client = client
	return ls
}

// Attach implements delivery.Attacher: from now on each action appended
// to the channel wakes st (a journal listener, under the journal's lock:
// Wake never blocks), and so does a shared snapshot built for it.
func (ls *LogSource) Attach(st *delivery.Stream) {
	ls.setWake(st.Wake)
	ls.j.Listen(ls.ch.URI(), ls, func(string, journal.Entry) { st.Wake() }, nil)
}

// setWake makes wake the source's way to wake its stream, and calls it
// once now: a shared snapshot's build may have ended before it was known.
func (ls *LogSource) setWake(wake func()) {
	ls.wake.Store(&wake)
	wake()
}

// Detach implements delivery.Attacher: the journal no longer wakes the
// stream, and the source's waits end (Stop).
func (ls *LogSource) Detach() {
	ls.j.Unlisten(ls.ch.URI(), ls)
	ls.Stop()
}

func (ls *LogSource) wakeUp() {
	if w := ls.wake.Load(); w != nil {
		(*w)()
	}
}

// RecoverLog is Channel.Recover for a journaled channel: replay while
// the journal still holds every action after lastSeq, else a snapshot.
func RecoverLog(ch Channel, j *journal.Journal, lastSeq uint64) Recovery {
	if _, _, err := j.Next(ch.URI(), lastSeq); err == nil {
		return RecoverReplay
	}
	return RecoverSnapshot
}

// ResumeLog is Channel.Resume for a journaled channel: the journal after
// lastSeq while it reaches back that far (replay), else from a fresh
// snapshot.
func ResumeLog(ch Channel, j *journal.Journal, lastSeq uint64) *LogSource {
	if RecoverLog(ch, j, lastSeq) == RecoverReplay {
		return NewLogSourceAt(ch, j, lastSeq)
	}
	return NewLogSource(ch, j)
}

// Next implements delivery.Source.
func (ls *LogSource) Next() delivery.Message {
	if ls.snap.Load() {
		return delivery.Message{Text: ls.snapshot()}
	}
	e, ok, err := ls.j.Next(ls.ch.URI(), ls.cursor.Load())
	for ok && !e.For(ls.client) { // another client's rejection echo
		ls.cursor.Store(e.Seq)
		e, ok, err = ls.j.Next(ls.ch.URI(), e.Seq)
	}
	if err == journal.ErrTruncated {
		ls.resyncs.Add(1)
		ls.snap.Store(true)
		return delivery.Message{Text: ls.snapshot()}
	}
	if !ok {
		select {
		case ls.pulled <- struct{}{}:
		default:
		}
		return delivery.Message{}
	}
	ls.cursor.Store(e.Seq)
	if ls.view != nil {
		return delivery.Message{Text: ls.view.Action(e.Text)}
	}
	return delivery.Message{Text: e.Text}
}

func (ls *LogSource) snapshot() []byte {
	var text []byte
	var seq uint64
	if ls.snaps == nil || ls.view != nil {
		text, seq = SnapshotNotificationView(ls.ch, ls.view)
	} else {
		var ok bool
		if text, seq, ok = ls.snaps.take(ls, &ls.wait); !ok {
			return nil // the build wakes the stream (Attach)
		}
	}
	ls.cursor.Store(seq)
	ls.snap.Store(false)
	return text
}

// LagBelow reports whether what the subscriber has not pulled yet is
// under maxBytes (UTF-8 bytes of notification text). A pending snapshot
// counts as a lag.
func (ls *LogSource) LagBelow(maxBytes int) bool {
	if ls.snap.Load() {
		return false
	}
	_, b := ls.j.Lag(ls.ch.URI(), ls.cursor.Load(), maxBytes)
	return b < maxBytes
}

// Held returns what the subscriber has not pulled yet, as the producer's
// hold for delivery.Stream.WaitRoom: twice its UTF-8 bytes (an upper
// bound of their UTF-16 size), counted up to limit UTF-8 bytes; a pending
// snapshot counts as limit.
func (ls *LogSource) Held(limit int) delivery.UTF16Bytes {
	if ls.snap.Load() {
		return delivery.UTF16Bytes(2 * limit)
	}
	_, b := ls.j.Lag(ls.ch.URI(), ls.cursor.Load(), limit)
	return delivery.UTF16Bytes(2 * b)
}

// Resyncs counts the snapshots sent because the cursor fell behind.
func (ls *LogSource) Resyncs() uint64 { return ls.resyncs.Load() }

// Stop ends the source's waits (WaitPulled): its subscription ended.
func (ls *LogSource) Stop() { ls.stopOnce.Do(func() { close(ls.stopped) }) }

// WaitPulled blocks until the subscriber has pulled every action the
// journal holds for the channel, the source is stopped, or done is
// closed; it reports whether everything was pulled. An event, not a
// poll: Next signals each time it finds nothing more.
func (ls *LogSource) WaitPulled(done <-chan struct{}) bool {
	for !ls.LagBelow(1) {
		select {
		case <-ls.pulled:
		case <-ls.stopped:
			return false
		case <-done:
			return false
		}
	}
	return true
}
