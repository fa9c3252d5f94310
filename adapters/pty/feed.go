package pty

import (
	"bytes"
	"sync"
	"time"

	"github.com/charmbracelet/x/ansi"
)

// Feed bounds.
const (
	// FeedWork bounds the emulator's work not done yet: the output a
	// terminal's Feed holds for its Screen (bytes of decoded output) and
	// the work it stands for, estimated by feedWork in bytes of plain
	// text. vt v0.1.0 takes about 80 ns a byte of text and about 9 µs a
	// line scrolled on an 80×24 screen (it moves every cell), so the
	// bound is some 30 to 60 ms of the emulator's time
	// (BenchmarkFeedRebuild): what a snapshot taken while it is behind
	// waits at most (FeedWork is also the Feed's ring of raw output,
	// 256 KiB).
	FeedWork = 256 << 10
	// FeedRate bounds the work the emulator is given in one feedWindow:
	// output faster than that (some 250 KB/s of text wrapping at 80
	// columns, 5000 lines a second scrolling an 80×24 screen, 640 KB/s
	// of a full-screen program's redraws) is a flood, and the emulator
	// falls behind at once instead of taking a core from the rest of
	// the terminal's path (on a loaded machine it would keep up with
	// part of a flood at the expense of the flood itself).
	FeedRate   = FeedWork / 4
	feedWindow = 100 * time.Millisecond
	// feedCalm is how often an emulator behind looks at the output
	// again; once less than a quarter of FeedRate's pace came in one
	// feedCalm (the flood ended or slowed to well within what the
	// emulator keeps up with), it is rebuilt from the newest output.
	// Waiting costs nothing that shows: the output meanwhile is in the
	// ring, and a snapshot rebuilds at once. An emulator that falls
	// behind again within maxFeedCalm of a rebuild (a flood that paused,
	// or a process that was not scheduled for a while) waits twice as
	// long next time, up to maxFeedCalm: a long flood costs a rebuild
	// every 4 s at most.
	feedCalm    = 250 * time.Millisecond
	maxFeedCalm = 4 * time.Second
	// maxFeedOps bounds the resizes and clears waiting for the emulator
	// between outputs; past it the backlog is lost (a rebuild).
	maxFeedOps = 64
)

// Feed runs a terminal's Screen off the PTY reader's path (issue 18).
// The reader hands each output to Write, which copies it into a ring and
// never waits for the emulator; a goroutine (Start) feeds the Screen from
// the ring, in order with the resizes and clears (Resize, ClearHistory).
// While the emulator keeps up, its screen is exact. When the output
// comes faster than FeedRate (a flood: vt emulates 0.3 to 13 MB/s where
// a PTY floods at 20 MB/s), the Feed is behind: the goroutine leaves the
// backlog until the output calms down (feedCalm), then feeds it, exact
// still. When the backlog passes FeedWork of work, it is dropped (lost)
// and the Screen is rebuilt from the newest output:
//
//   - the screen keeps what it had when the backlog began: its cells, the
//     alternate screen, modes (cursor keys, keypad, mouse, bracketed
//     paste), scroll region, cursor and attributes, and its history;
//   - the head of the dropped output (FeedWork/8 of work) is fed to it
//     as it is: the setup a burst begins with (a screen cleared, a
//     header line drawn, a scroll region set) is exact;
//   - a CAN (which ends any sequence the head ended in), the resizes
//     and clears that came since (the newest size), then what the rest
//     of the dropped output set (feedState: modes, alternate screen
//     switches, scroll regions, character sets, cursor style,
//     attributes, a RIS), the cursor put back where the head left it;
//   - then the newest output within FeedWork of work, from the start
//     of a line (else from a cursor position, else a sequence): the
//     lines that output scrolls off go to the history after the older
//     ones; the output dropped between is lost, and so are the cells it
//     alone drew.
//
// Lines a flood scrolls off are thus kept only from its first and last
// stretches (800 to 2000 lines of an 80×24 terminal, by their length); a
// program redrawing its screen ends with its screen exact.
//
// Screen (a snapshot) first brings the emulator to the newest output,
// behind or not: the backlog or a rebuild, at most FeedWork and a head
// of work. The reader path is one copy and a count of line feeds; while
// the backlog is lost, also a scan of the escape sequences of the bytes
// the copy overwrites (about 1 ns a byte of the densest SGR output,
// nothing but a search for ESC in text: BenchmarkFeedWrite). Feed is safe for
// concurrent use; Write, Resize and ClearHistory never wait for the
// emulator.
type Feed struct {
	// maxWork and maxRate are FeedWork and FeedRate (others in tests).
	maxWork, maxRate int
	onFault          func(error, int)

	// mu guards what follows, up to emu; it is held only to copy.
	mu   sync.Mutex
	ring []byte // output [written-len(ring), written); grows to maxWork
	// written counts the bytes ever written, fed those taken for the
	// emulator: [fed, written) is the backlog, pending its work.
	written, fed int64
	pending      int
	// workIn counts the work ever written, for the calm test; window
	// is the work written since windowStart, for FeedRate.
	workIn      int64
	window      int
	windowStart time.Time
	// behind: the output passed maxRate or the backlog maxWork; the
	// goroutine leaves the backlog until the output calms. lost: the
	// backlog passed maxWork and was dropped; the emulator is rebuilt
	// from the newest output.
	behind, lost bool
	ops          []feedOp
	// head is the first part of the output a loss dropped, fed as it is
	// before the newest output (maxWork/8 of work, headWork so far,
	// headDone when full: a burst's setup, a screen cleared, a header
	// drawn, a scroll region set); track is what the rest of the
	// dropped output set (modes, scroll regions, attributes...),
	// scanned up to scanAt: the dropped output still in the ring when
	// the rebuild comes, before that the bytes each write overwrites
	// (Write's only extra work while lost).
	head     []byte
	headWork int
	headDone bool
	track    feedState
	scanAt   int64
	// cols, rows is the size of the newest resize, for feedWork.
	cols, rows int
	// rebuilds counts the rebuilds (for tests); resumed is when the
	// emulator last caught up after being behind; calm is the wait for
	// calm output before the next.
	rebuilds int
	resumed  time.Time
	calm     time.Duration
	wake     chan struct{} // 1-slot
	// caught (1-slot) is signalled whenever the emulator has all the
	// output written so far (for tests to wait on).
	caught   chan struct{}
	stop     chan struct{}
	done     chan struct{}
	started  bool
	stopOnce sync.Once

	// emu guards screen and piece; held while the emulator works,
	// never by Write.
	emu    sync.Mutex
	screen *Screen
	piece  []byte
}

// feedOp is a resize (cols > 0) or a clear of the history, at a
// position of the output.
type feedOp struct {
	at         int64
	cols, rows int
	clear      bool
}

// NewFeed returns the Feed of screen, a cols×rows terminal's emulator.
// onFault, if not nil, is told of each emulator panic (Screen.Write's
// error) with the count so far; it runs on the feeding goroutine, or a
// Screen or Close caller's, and must not call into the Feed.
func NewFeed(screen *Screen, cols, rows int, onFault func(err error, faults int)) *Feed {
	return &Feed{
		maxWork: FeedWork, maxRate: FeedRate, onFault: onFault, screen: screen,
		cols: cols, rows: rows, calm: feedCalm,
		wake: make(chan struct{}, 1), caught: make(chan struct{}, 1),
		stop: make(chan struct{}), done: make(chan struct{}),
	}
}

// feedWork estimates the emulator's work for output p on a cols×rows
// screen, in bytes of plain text: its bytes, and for each line feed, and
// each wrap a line of p's length would take, a scroll of the screen (one
// costs about cols×rows/16 bytes of text: vt moves every cell).
func feedWork(p []byte, cols, rows int) int {
	cols, rows = emulatedSize(cols, rows)
	lines := bytes.Count(p, []byte{'\n'}) + len(p)/cols
	return len(p) + lines*max(cols*rows/16, 1)
}

// Write takes output (the decoded text the clients get) for the
// emulator; it copies p and returns without waiting for the emulator.
func (f *Feed) Write(p []byte) {
	if len(p) == 0 {
		return
	}
	f.mu.Lock()
	w := feedWork(p, f.cols, f.rows)
	if f.pending+w > f.maxWork && !f.lost {
		f.loseLocked() // before p goes in: the backlog is whole in the ring
	}
	f.put(p)
	f.workIn += int64(w)
	f.pending += w
	if now := time.Now(); now.Sub(f.windowStart) >= feedWindow {
		f.windowStart, f.window = now, 0
	}
	f.window += w
	if !f.behind && f.window > f.maxRate {
		f.fallBehindLocked()
	}
	f.mu.Unlock()
	f.signal()
}

// loseLocked drops the backlog: the emulator will be rebuilt from the
// newest output (its ops stay, applied first). It is behind too.
func (f *Feed) loseLocked() {
	f.lost = true
	f.scanAt = max(f.fed, f.oldest())
	f.head, f.headWork, f.headDone = f.head[:0], 0, false
	f.track.reset()
	f.growHead()
	f.fed, f.pending = f.written, 0
	if !f.behind {
		f.fallBehindLocked()
	}
}

// growHead moves the dropped output after the head (from scanAt) into
// it while it is within headWork of work (maxWork/8), cut before a
// character when full.
func (f *Feed) growHead() {
	limit := f.maxWork / 8 // headWork
	for !f.headDone && f.scanAt < f.written {
		n := len(f.head)
		f.head = f.copyOut(f.head, f.scanAt, min(f.written, f.scanAt+int64(limit-n)))
		add := f.head[n:]
		k := len(add)
		for k > 0 && f.headWork+feedWork(add[:k], f.cols, f.rows) > limit {
			k /= 2
		}
		if k < len(add) {
			for k > 0 && add[k]&0xC0 == 0x80 {
				k--
			}
			f.headDone = true
		}
		f.head = f.head[:n+k]
		f.headWork += feedWork(add[:k], f.cols, f.rows)
		f.scanAt += int64(k)
		if len(f.head) >= limit {
			f.headDone = true
		}
	}
}

// fallBehindLocked stops the goroutine's feeding until the output calms.
func (f *Feed) fallBehindLocked() {
	if !f.resumed.IsZero() && time.Since(f.resumed) < maxFeedCalm {
		f.calm = min(2*f.calm, maxFeedCalm)
	} else {
		f.calm = feedCalm
	}
	f.behind = true
}

// put appends p to the ring: linear while it fits, then wrapping at
// maxWork bytes.
func (f *Feed) put(p []byte) {
	if len(p) >= f.maxWork {
		// Only the newest maxWork bytes can be kept (not with
		// ReadChunk-sized output).
		if !f.lost {
			f.loseLocked()
		}
		f.headDone = true
		f.scanTo(f.written)
		skip := p[:len(p)-f.maxWork]
		f.track.scan(skip)
		f.written += int64(len(skip))
		f.scanAt = f.written
		p = p[len(skip):]
	}
	if f.lost {
		// The bytes p overwrites, read first.
		f.growHead()
		f.scanTo(f.written + int64(len(p)) - int64(f.maxWork))
		defer f.growHead()
	}
	if int64(len(f.ring)) == f.written && len(f.ring)+len(p) <= f.maxWork {
		if need := len(f.ring) + len(p); need > cap(f.ring) {
			grown := make([]byte, len(f.ring), min(max(2*cap(f.ring), need, 4096), f.maxWork))
			copy(grown, f.ring)
			f.ring = grown
		}
		f.ring = append(f.ring, p...)
		f.written += int64(len(p))
		return
	}
	if len(f.ring) < f.maxWork {
		full := make([]byte, f.maxWork)
		copy(full, f.ring) // linear so far: position x at x
		f.ring = full
	}
	for len(p) > 0 {
		n := copy(f.ring[f.written%int64(f.maxWork):], p)
		p = p[n:]
		f.written += int64(n)
	}
}

// scanTo has track read the dropped output up to to (what is still in
// the ring of it).
func (f *Feed) scanTo(to int64) {
	from := max(f.scanAt, f.oldest())
	if to <= from {
		return
	}
	if len(f.ring) < f.maxWork || int64(len(f.ring)) == f.written {
		f.track.scan(f.ring[from:to])
	} else {
		size := int64(f.maxWork)
		for at := from; at < to; {
			i := at % size
			n := min(to-at, size-i)
			f.track.scan(f.ring[i : i+n])
			at += n
		}
	}
	f.scanAt = to
}

// copyOut appends the ring's bytes [from, to) to dst; they must still be
// in the ring.
func (f *Feed) copyOut(dst []byte, from, to int64) []byte {
	if len(f.ring) < f.maxWork || int64(len(f.ring)) == f.written {
		return append(dst, f.ring[from:to]...)
	}
	size := int64(f.maxWork)
	for from < to {
		i := from % size
		n := min(to-from, size-i)
		dst = append(dst, f.ring[i:i+n]...)
		from += n
	}
	return dst
}

// oldest returns the position of the oldest byte the ring holds.
func (f *Feed) oldest() int64 { return f.written - int64(len(f.ring)) }

// Resize records a resize of the terminal at this point of its output.
func (f *Feed) Resize(cols, rows int) {
	f.addOp(feedOp{cols: cols, rows: rows})
}

// ClearHistory records a terminal/cleared at this point of the output:
// the history is dropped, the screen stays.
func (f *Feed) ClearHistory() { f.addOp(feedOp{clear: true}) }

func (f *Feed) addOp(op feedOp) {
	f.mu.Lock()
	if op.cols > 0 {
		f.cols, f.rows = op.cols, op.rows
	}
	op.at = f.written
	if len(f.ops) >= maxFeedOps && !f.lost {
		f.loseLocked()
	}
	if len(f.ops) >= maxFeedOps {
		// Behind: the ops are applied together before the rebuild's
		// output, so they can be squashed into one clear and one
		// resize.
		f.ops = squashOps(f.ops)
	}
	f.ops = append(f.ops, op)
	f.mu.Unlock()
	f.signal()
}

// squashOps returns ops as at most a clear and a resize (the newest).
func squashOps(ops []feedOp) []feedOp {
	var clear bool
	var size *feedOp
	for i := range ops {
		clear = clear || ops[i].clear
		if ops[i].cols > 0 {
			size = &ops[i]
		}
	}
	out := ops[:0]
	if clear {
		out = append(out, feedOp{clear: true})
	}
	if size != nil {
		out = append(out, *size)
	}
	return out
}

func (f *Feed) signal() {
	select {
	case f.wake <- struct{}{}:
	default:
	}
}

// Start starts the goroutine that feeds the emulator; Close ends it.
func (f *Feed) Start() {
	f.mu.Lock()
	f.started = true
	f.mu.Unlock()
	go f.run()
}

func (f *Feed) run() {
	defer close(f.done)
	timer := time.NewTimer(feedCalm)
	timer.Stop()
	for {
		select {
		case <-f.wake:
		case <-f.stop:
			return
		}
		for !f.catchUp(false) {
			// Behind: wait until the output calms down, then rebuild.
			for {
				f.mu.Lock()
				w0, wait := f.workIn, f.calm
				f.mu.Unlock()
				timer.Reset(wait)
				select {
				case <-timer.C:
				case <-f.stop:
					timer.Stop()
					return
				}
				f.mu.Lock()
				quiet := f.workIn-w0 < int64(f.maxRate/4)*int64(wait)/int64(feedWindow)
				f.mu.Unlock()
				if quiet {
					break
				}
			}
			f.catchUpTo(f.mark()) // bounded: a flood back meanwhile is left again
		}
	}
}

// catchUp feeds the emulator the backlog, a ReadChunk at a time (the
// emulator's lock is taken for each, so a snapshot waits for one at
// most), with the ops at their places. Behind, it rebuilds the emulator
// when rebuild is set, else it returns false. It returns true once the
// emulator has all the output written.
func (f *Feed) catchUp(rebuild bool) bool {
	for {
		f.emu.Lock()
		ok, more := f.stepLocked(rebuild)
		f.emu.Unlock()
		if !ok || !more {
			return ok
		}
	}
}

// stepLocked does one step of catchUp under emu: more is true when
// something was done (there may be more to do).
func (f *Feed) stepLocked(rebuild bool) (ok, more bool) {
	f.mu.Lock()
	if f.behind {
		if !rebuild {
			f.mu.Unlock()
			return false, false
		}
		f.behind, f.resumed = false, time.Now()
	}
	if f.lost {
		ops := append([]feedOp(nil), squashOps(f.ops)...) // f.ops's array is reused
		f.ops = f.ops[:0]
		from := f.tailLocked()
		f.scanTo(from)
		// The dropped output's head (it follows what the emulator
		// has), then CAN (which ends any sequence the head ends in),
		// the ops, what the rest of the dropped output set, and the
		// newest output; a tail that starts a line starts it at the
		// first column.
		f.piece = append(f.piece[:0], f.head...)
		head := len(f.piece)
		f.piece = append(f.piece, '\x18')
		if !f.track.empty() {
			f.piece = f.track.appendSGR(f.track.appendReplay(f.piece))
		}
		replay := len(f.piece)
		if from > f.oldest() && f.copyOut(nil, from-1, from)[0] == '\n' {
			f.piece = append(f.piece, '\r')
		}
		f.piece = f.copyOut(f.piece, from, f.written)
		f.fed, f.pending, f.lost = f.written, 0, false
		f.head = f.head[:0]
		if cap(f.head) > 2*ReadChunk {
			f.head = nil
		}
		f.track.reset()
		f.rebuilds++
		f.mu.Unlock()
		f.writeChunks(f.piece[:head])
		f.writeLocked(f.piece[head : head+1]) // CAN
		for _, op := range ops {
			f.applyLocked(op)
		}
		if replay > head+1 {
			// The state set, the cursor left where the head put it (a
			// scroll region set homes it).
			cur := f.screen.Emulator().CursorPosition()
			f.writeLocked(f.piece[head+1 : replay])
			origin := f.screen.modes[ansi.ModeOrigin]
			var at []byte
			if origin {
				at = append(at, "\x1b[?6l"...)
			}
			at = appendCUP(at, cur.X, cur.Y)
			if origin {
				at = append(at, "\x1b[?6h"...)
			}
			f.writeLocked(at)
		}
		f.writeChunks(f.piece[replay:])
		f.trimPiece()
		return true, true
	}
	if len(f.ops) > 0 && f.ops[0].at <= f.fed {
		op := f.ops[0]
		f.ops = f.ops[:copy(f.ops, f.ops[1:])]
		f.mu.Unlock()
		f.applyLocked(op)
		return true, true
	}
	to := min(f.written, f.fed+ReadChunk)
	if len(f.ops) > 0 {
		to = min(to, f.ops[0].at)
	}
	if to <= f.fed {
		f.mu.Unlock()
		select {
		case f.caught <- struct{}{}:
		default:
		}
		return true, false
	}
	f.piece = f.copyOut(f.piece[:0], f.fed, to)
	f.fed = to
	f.pending = max(f.pending-feedWork(f.piece, f.cols, f.rows), 0)
	if f.fed == f.written {
		f.pending = 0
	}
	f.mu.Unlock()
	f.writeLocked(f.piece)
	f.trimPiece()
	return true, true
}

// tailLocked returns where a rebuild starts: the newest output within
// maxWork of work (feedWork), from the start of a line (after a line
// feed) when there is one in it, else from the first cursor position
// (CUP) or sequence after the cut.
func (f *Feed) tailLocked() int64 {
	from := f.oldest()
	tail := f.copyOut(nil, from, f.written) // at most maxWork bytes
	start, work := len(tail), 0
	for start > 0 {
		nl := bytes.LastIndexByte(tail[:start-1], '\n') // the line ending at start-1
		if nl < 0 && from > 0 {
			break // the ring's first line is cut: not a start
		}
		w := feedWork(tail[nl+1:start], f.cols, f.rows)
		if work+w > f.maxWork {
			break
		}
		work += w
		start = nl + 1
	}
	if start == len(tail) && len(tail) > 0 {
		// One line longer than the bound (a flood without line feeds):
		// its newest part whose wraps fit the bound.
		_, rows := emulatedSize(f.cols, f.rows)
		start = anchor(tail, len(tail)-min(len(tail), f.maxWork*16/(16+rows)))
	}
	return from + int64(start)
}

// anchor returns the first place at or after i in p where output can
// start on an emulator that was elsewhere: a cursor position (CSI row;col
// H, the way a full-screen program redraws), else a sequence (ESC), else
// a character (not a UTF-8 continuation byte).
func anchor(p []byte, i int) int {
	esc := -1
	for j := i; j < len(p); j++ {
		k := bytes.IndexByte(p[j:], '\x1b')
		if k < 0 {
			break
		}
		j += k
		if esc < 0 {
			esc = j
		}
		m := j + 1
		if m < len(p) && p[m] == '[' {
			m++
			for m < len(p) && (p[m] >= '0' && p[m] <= '9' || p[m] == ';') {
				m++
			}
			if m < len(p) && (p[m] == 'H' || p[m] == 'f') {
				return j
			}
		}
	}
	if esc >= 0 {
		return esc
	}
	for i < len(p) && p[i]&0xC0 == 0x80 {
		i++
	}
	return i
}

func (f *Feed) trimPiece() {
	if cap(f.piece) > 2*ReadChunk {
		f.piece = nil
	}
}

// writeChunks feeds p to the emulator a ReadChunk at a time.
func (f *Feed) writeChunks(p []byte) {
	for len(p) > 0 {
		n := min(len(p), ReadChunk)
		f.writeLocked(p[:n])
		p = p[n:]
	}
}

func (f *Feed) writeLocked(p []byte) {
	if err := f.screen.Write(p); err != nil && f.onFault != nil {
		f.onFault(err, f.screen.Faults())
	}
}

func (f *Feed) applyLocked(op feedOp) {
	if op.clear {
		f.screen.ClearHistory()
		return
	}
	if err := f.screen.Resize(op.cols, op.rows); err != nil && f.onFault != nil {
		f.onFault(err, f.screen.Faults())
	}
}

// Screen brings the emulator to the output written so far (rebuilding
// it when its backlog was lost) and calls fn with it, the Feed's lock
// held: fn must not call into the Feed. A caller that holds back the
// output (the terminal's lock) gets the screen of exactly the output so
// far; output written meanwhile by others may be in it too.
func (f *Feed) Screen(fn func(*Screen)) {
	f.catchUpTo(f.mark())
	f.emu.Lock()
	defer f.emu.Unlock()
	for target := f.mark(); !f.doneLocked(target); {
		if _, more := f.stepLocked(true); !more {
			break
		}
	}
	fn(f.screen)
}

// CatchUp brings the emulator to the output written so far, rebuilding
// it when its backlog was lost; it holds the emulator's lock one
// ReadChunk at a time. It is bounded: output written meanwhile is not
// chased (a flood nobody paces would never let it end).
func (f *Feed) CatchUp() { f.catchUpTo(f.mark()) }

// mark returns the position of the output written so far.
func (f *Feed) mark() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.written
}

// doneLocked reports, under emu, whether the emulator has the output up
// to target and the ops before it.
func (f *Feed) doneLocked(target int64) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return !f.lost && f.fed >= target && (len(f.ops) == 0 || f.ops[0].at > target)
}

// catchUpTo feeds the emulator until it has the output up to target.
func (f *Feed) catchUpTo(target int64) {
	for {
		f.emu.Lock()
		done := f.doneLocked(target)
		if !done {
			_, more := f.stepLocked(true)
			done = !more
		}
		f.emu.Unlock()
		if done {
			return
		}
	}
}

// Behind reports whether the emulator is behind: the goroutine leaves
// the output (a flood) until it calms, or a snapshot asks.
func (f *Feed) Behind() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.behind
}

// Rebuilds returns how many times the emulator was rebuilt from the
// newest output (its backlog lost).
func (f *Feed) Rebuilds() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.rebuilds
}

// Close ends the feeding goroutine (if started) and closes the Screen:
// output not emulated yet is left out (a terminal disposed of). The
// Screen can still be redrawn; later output is ignored. Close is
// idempotent.
func (f *Feed) Close() {
	f.stopOnce.Do(func() {
		close(f.stop)
		f.mu.Lock()
		started := f.started
		f.mu.Unlock()
		if started {
			<-f.done
		}
		f.emu.Lock()
		f.screen.Close()
		f.emu.Unlock()
	})
}
