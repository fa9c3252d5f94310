// Package journal holds the host's global serverSeq and a bounded log of
// encoded action envelopes per channel, read by cursor.
//
// Every action the host applies gets the next serverSeq (one counter across
// all channels, ahp.md §2) and its notification text, encoded once, is kept
// in its channel's log. Windowed subscribers read the log by cursor at their
// own pace (seed 000); ordinary subscribers get each entry pushed, in
// serverSeq order, through the listener called under the journal lock.
// Logs are bounded in bytes per channel and in age; a reader whose cursor
// fell behind what is retained learns so (ErrTruncated) and recovers with a
// snapshot. No network I/O happens here.
package journal

import (
	"errors"
	"strconv"
	"sync"
	"time"
)

// Limits bound what the journal keeps.
type Limits struct {
	// ChannelMaxBytes bounds the encoded text kept per channel, in UTF-8
	// bytes. The newest entry is always kept, even if larger.
	ChannelMaxBytes int
	// MaxAge drops entries older than this on append; 0 keeps them until
	// the byte bound drops them.
	MaxAge time.Duration
}

// DefaultLimits: 1 MiB of envelopes per channel (about 4 screens of a busy
// terminal at 256 KiB windows), kept up to 10 minutes for reconnect replay.
var DefaultLimits = Limits{ChannelMaxBytes: 1 << 20, MaxAge: 10 * time.Minute}

// ErrTruncated means the entries after the cursor are no longer retained.
var ErrTruncated = errors.New("journal: entries after cursor are no longer retained")

// Entry is one logged action.
type Entry struct {
	Seq  uint64
	Text []byte // the complete notification text, shared: never modify
	// To is the one clientId the entry is for (AppendTo: the echo of an
	// action the host rejected goes to the client that dispatched it);
	// empty, every subscriber of the channel. Readers skip an entry for
	// another client (For).
	To string
	at time.Time
}

// For reports whether the entry is one client's to receive: every entry
// but another client's rejection echo (To).
func (e Entry) For(client string) bool { return e.To == "" || e.To == client }

// Listener receives every entry appended to a channel, under the journal
// lock and in serverSeq order. It must not block or call back into the
// journal.
type Listener func(channel string, e Entry)

// Journal is safe for concurrent use.
type Journal struct {
	mu        sync.Mutex
	seq       uint64
	limits    Limits
	logs      map[string]*channelLog
	listeners map[string]map[any]Listener
}

type channelLog struct {
	entries []Entry // ring in slice form: entries[head:]
	head    int
	bytes   int
	// floor is the highest seq dropped from this log (0 if none): a cursor
	// below it cannot be served.
	floor uint64
}

// New returns an empty journal. Ages are measured on the system clock
// (tests fake it with testing/synctest).
func New(l Limits) *Journal {
	if l.ChannelMaxBytes <= 0 {
		l.ChannelMaxBytes = DefaultLimits.ChannelMaxBytes
	}
	return &Journal{limits: l, logs: map[string]*channelLog{}, listeners: map[string]map[any]Listener{}}
}

// Seq returns the current serverSeq (the seq of the last appended action).
func (j *Journal) Seq() uint64 {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.seq
}

// Append assigns the next serverSeq, encodes the entry with encode(seq),
// keeps it in channel's log and hands it to the channel's listeners. If
// encode fails nothing is assigned and the error is returned.
func (j *Journal) Append(channel string, encode func(seq uint64) ([]byte, error)) (Entry, error) {
	return j.AppendTo(channel, "", encode)
}

// AppendTo is Append for an entry only the client to receives (Entry.To;
// "" is every subscriber): it takes a serverSeq of the channel like any
// other, and the channel's other subscribers skip it.
func (j *Journal) AppendTo(channel, to string, encode func(seq uint64) ([]byte, error)) (Entry, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	text, err := encode(j.seq + 1)
	if err != nil {
		return Entry{}, err
	}
	return j.appendLocked(channel, to, text), nil
}

// AppendSeq is Append for a text that ends with its serverSeq, as an
// action envelope does: the entry's text is head, then the assigned seq in
// decimal, then tail (rpc.AppendActionOpen ... rpc.ActionSeqMember as
// head, rpc.ActionEnvelopeEnd as tail). The text is one allocation of
// exactly its size, and head is copied: the caller keeps head's buffer and
// may reuse it once AppendSeq returns. The encoding (escaping the action)
// is done by the caller, outside the journal lock.
func (j *Journal) AppendSeq(channel string, head []byte, tail string) Entry {
	j.mu.Lock()
	defer j.mu.Unlock()
	var digits [20]byte // the most a uint64 takes
	seq := strconv.AppendUint(digits[:0], j.seq+1, 10)
	text := make([]byte, 0, len(head)+len(seq)+len(tail))
	text = append(text, head...)
	text = append(text, seq...)
	text = append(text, tail...)
	return j.appendLocked(channel, "", text)
}

// appendLocked logs text as the entry with the next seq.
func (j *Journal) appendLocked(channel, to string, text []byte) Entry {
	j.seq++
	e := Entry{Seq: j.seq, Text: text, To: to, at: time.Now()}
	l := j.logs[channel]
	if l == nil {
		l = &channelLog{}
		j.logs[channel] = l
	}
	l.entries = append(l.entries, e)
	l.bytes += len(text)
	j.trim(l, e.at)
	for _, fn := range j.listeners[channel] {
		fn(channel, e)
	}
	return e
}

func (j *Journal) trim(l *channelLog, now time.Time) {
	for len(l.entries)-l.head > 1 {
		old := l.entries[l.head]
		tooBig := l.bytes > j.limits.ChannelMaxBytes
		tooOld := j.limits.MaxAge > 0 && now.Sub(old.at) > j.limits.MaxAge
		if !tooBig && !tooOld {
			break
		}
		l.bytes -= len(old.Text)
		l.floor = old.Seq
		l.entries[l.head] = Entry{}
		l.head++
	}
	// Compact once half the slice is dead, so memory stays O(retained).
	if l.head > 0 && l.head*2 >= len(l.entries) {
		n := copy(l.entries, l.entries[l.head:])
		clear(l.entries[n:])
		l.entries = l.entries[:n]
		l.head = 0
	}
}

// Read returns up to max entries of channel with Seq > after, oldest first,
// and ErrTruncated if some entries after the cursor were dropped. The
// returned entries share their Text with the journal.
func (j *Journal) Read(channel string, after uint64, max int) ([]Entry, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	live, err := j.afterLocked(channel, after)
	if err != nil || len(live) == 0 {
		return nil, err
	}
	if max > 0 && len(live) > max {
		live = live[:max]
	}
	return append([]Entry(nil), live...), nil
}

// Page is Read bounded also in bytes, with the channel's head: up to
// maxEntries entries of channel with Seq > after whose Text adds up to at
// most maxBytes (UTF-8; the first entry is returned whatever its size),
// oldest first, and the seq of channel's newest entry (0 if none).
// err is ErrTruncated when some entries after the cursor were dropped.
func (j *Journal) Page(channel string, after uint64, maxEntries, maxBytes int) (entries []Entry, head uint64, err error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if l := j.logs[channel]; l != nil && len(l.entries) > l.head {
		head = l.entries[len(l.entries)-1].Seq
	}
	live, err := j.afterLocked(channel, after)
	if err != nil {
		return nil, head, err
	}
	n, bytes := 0, 0
	for n < len(live) && (maxEntries <= 0 || n < maxEntries) {
		bytes += len(live[n].Text)
		if n > 0 && bytes > maxBytes {
			break
		}
		n++
	}
	return append([]Entry(nil), live[:n]...), head, nil
}

// afterLocked returns the retained entries of channel with Seq > after (a
// view of the log: copy what outlives the lock), or ErrTruncated.
func (j *Journal) afterLocked(channel string, after uint64) ([]Entry, error) {
	l := j.logs[channel]
	if l == nil {
		return nil, nil
	}
	if after < l.floor {
		return nil, ErrTruncated
	}
	live := l.entries[l.head:]
	// Entries are in seq order: binary search for the first > after.
	lo, hi := 0, len(live)
	for lo < hi {
		m := (lo + hi) / 2
		if live[m].Seq <= after {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return live[lo:], nil
}

// Next returns the first entry of channel with Seq > after. ok is false when
// there is none yet; err is ErrTruncated when it was dropped. It does not
// allocate (a windowed subscriber calls it for every message).
func (j *Journal) Next(channel string, after uint64) (e Entry, ok bool, err error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	live, err := j.afterLocked(channel, after)
	if err != nil || len(live) == 0 {
		return Entry{}, false, err
	}
	return live[0], true, nil
}

// Head returns the seq of channel's newest entry (0 if none).
func (j *Journal) Head(channel string) uint64 {
	j.mu.Lock()
	defer j.mu.Unlock()
	l := j.logs[channel]
	if l == nil || len(l.entries) == l.head {
		return 0
	}
	return l.entries[len(l.entries)-1].Seq
}

// Lag returns how many entries of channel, and how many bytes of text, lie
// after the cursor (what a reader at after has not read yet). It stops
// counting at maxBytes.
func (j *Journal) Lag(channel string, after uint64, maxBytes int) (entries, bytes int) {
	j.mu.Lock()
	defer j.mu.Unlock()
	l := j.logs[channel]
	if l == nil {
		return 0, 0
	}
	for i := len(l.entries) - 1; i >= l.head && l.entries[i].Seq > after; i-- {
		entries++
		bytes += len(l.entries[i].Text)
		if bytes >= maxBytes {
			break
		}
	}
	return entries, bytes
}

// Bytes returns the bytes retained for channel.
func (j *Journal) Bytes(channel string) int {
	j.mu.Lock()
	defer j.mu.Unlock()
	if l := j.logs[channel]; l != nil {
		return l.bytes
	}
	return 0
}

// Listen registers fn for channel under key (any comparable value, e.g.
// the subscriber) and calls atomically with it snap(), so that the caller
// can take a snapshot at the current seq and be sure to receive every later
// entry exactly once. It returns the seq at registration.
func (j *Journal) Listen(channel string, key any, fn Listener, snap func(seq uint64)) uint64 {
	j.mu.Lock()
	defer j.mu.Unlock()
	m := j.listeners[channel]
	if m == nil {
		m = map[any]Listener{}
		j.listeners[channel] = m
	}
	m[key] = fn
	if snap != nil {
		snap(j.seq)
	}
	return j.seq
}

// Listeners returns how many listeners channel has.
func (j *Journal) Listeners(channel string) int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return len(j.listeners[channel])
}

// Unlisten removes the listener registered under key.
func (j *Journal) Unlisten(channel string, key any) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if m := j.listeners[channel]; m != nil {
		delete(m, key)
		if len(m) == 0 {
			delete(j.listeners, channel)
		}
	}
}

// Drop forgets channel's log (the channel was disposed). Its listeners stay
// until removed.
func (j *Journal) Drop(channel string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	delete(j.logs, channel)
}

// Locked runs fn while holding the journal lock, so that state read in fn is
// consistent with Seq (fn receives it). fn must not call the journal.
func (j *Journal) Locked(fn func(seq uint64)) {
	j.mu.Lock()
	defer j.mu.Unlock()
	fn(j.seq)
}
