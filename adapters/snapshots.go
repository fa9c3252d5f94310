package adapters

import (
	"sync"
	"time"

	"github.com/sidecar-dev/sidecar/journal"
)

// A shared snapshot is given to a subscriber that did not wait for it
// while it is younger than MaxSnapshotAge and the actions after its
// serverSeq come to less than MaxSnapshotReplay bytes of notification
// text: the subscriber replays those. Past either a new one is built (a
// fresher snapshot is smaller to send than much output, and a quiet
// channel's old snapshot would have a new subscriber replay all its
// journal).
const (
	MaxSnapshotAge    = 250 * time.Millisecond
	MaxSnapshotReplay = 64 << 10
)

// Snapshots builds a journaled channel's channel/snapshot notifications
// for its windowed subscribers off their connections' writer goroutines,
// and shares each one among them (issue 18). A terminal's snapshot runs
// its VT emulator up to the newest output, which during a flood is tens
// of milliseconds of work; built on a writer (LogSource.Next) it held up
// everything else that connection sends, and fifty viewers falling
// behind the same flood each built one, one after the other, on the
// emulator's lock.
//
// A snapshot taken at serverSeq S stays good for any subscriber while the
// journal still holds every action of the channel after S: the snapshot
// and those actions give the same state as a fresher snapshot (seed 002,
// snapshot then replay). So one build serves every subscriber that needs
// one shortly after (MaxSnapshotAge, MaxSnapshotReplay); a subscriber that waited for a
// build gets that build even when the journal moved past it meanwhile
// (it resyncs again later), so a flood that outruns the builds never
// starves it.
//
// At most one build runs at a time, and one starts no sooner than the
// previous one's duration after it ended: the builds take at most half
// of a core whatever the subscribers do. Snapshots is safe for
// concurrent use.
type Snapshots struct {
	ch      Channel
	j       *journal.Journal
	onReady func()

	mu sync.Mutex
	// text is the newest build, taken at seq; gen counts the builds
	// ended, building tells one runs (or waits to start).
	text     []byte
	seq      uint64
	built    time.Time
	gen      uint64
	building bool
	// waiters are the sources waiting for the build under way, woken
	// when it ends (at most one entry per subscriber).
	waiters map[*LogSource]struct{}
	// earliest is when the next build may start.
	earliest time.Time
	closed   bool
	wg       sync.WaitGroup
}

// NewSnapshots returns the shared snapshots of ch, whose actions are in j.
// Each build wakes the sources that wait for it (their streams: LogSource.Attach);
// onReady, if not nil, is called after that (on the building goroutine,
// with no lock held).
func NewSnapshots(ch Channel, j *journal.Journal, onReady func()) *Snapshots {
	return &Snapshots{ch: ch, j: j, onReady: onReady}
}

// take returns a snapshot notification for the subscriber whose source is
// ls, and its serverSeq. wait is the subscriber's own: the build it waits
// for (zero if none). It returns ok false, with wait set, when there is
// none to take yet: a build is started (or runs already), and ls is woken
// when it ends. A closed Snapshots builds synchronously (a channel going away:
// no goroutine is left behind).
func (s *Snapshots) take(ls *LogSource, wait *uint64) (text []byte, seq uint64, ok bool) {
	s.mu.Lock()
	if s.text != nil && (*wait != 0 && s.gen >= *wait || s.fresh()) {
		text, seq = s.text, s.seq
		s.mu.Unlock()
		*wait = 0
		return text, seq, true
	}
	if s.closed {
		s.mu.Unlock()
		text, seq = SnapshotNotification(s.ch)
		*wait = 0
		return text, seq, true
	}
	*wait = s.gen + 1
	if s.waiters == nil {
		s.waiters = map[*LogSource]struct{}{}
	}
	s.waiters[ls] = struct{}{}
	if !s.building {
		s.building = true
		delay := time.Until(s.earliest)
		s.wg.Add(1)
		go s.build(delay)
	}
	s.mu.Unlock()
	return nil, 0, false
}

// fresh reports whether the newest build is younger than MaxSnapshotAge
// and the journal still holds every action of the channel after it, less
// than MaxSnapshotReplay bytes of them.
func (s *Snapshots) fresh() bool {
	if time.Since(s.built) >= MaxSnapshotAge {
		return false
	}
	if _, _, err := s.j.Next(s.ch.URI(), s.seq); err != nil {
		return false
	}
	_, b := s.j.Lag(s.ch.URI(), s.seq, MaxSnapshotReplay)
	return b < MaxSnapshotReplay
}

func (s *Snapshots) build(delay time.Duration) {
	defer s.wg.Done()
	if delay > 0 {
		t := time.NewTimer(delay)
		<-t.C
	}
	start := time.Now()
	text, seq := SnapshotNotification(s.ch)
	took := time.Since(start)
	s.mu.Lock()
	s.text, s.seq, s.built = text, seq, time.Now()
	s.gen++
	s.building = false
	s.earliest = time.Now().Add(took)
	waiters := s.waiters
	s.waiters = nil
	s.mu.Unlock()
	for ls := range waiters {
		ls.wakeUp()
	}
	if s.onReady != nil {
		s.onReady()
	}
}

// Close waits for a build under way; later snapshots are built by the
// subscriber that needs one, at once.
func (s *Snapshots) Close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.wg.Wait()
}
