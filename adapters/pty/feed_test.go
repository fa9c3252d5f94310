package pty

import (
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// playFeed feeds steps to f the way a Terminal does (decoded text in
// PTY-read-sized pieces, resizes in between).
func playFeed(f *Feed, steps []vtStep) {
	var dec OutputDecoder
	for _, st := range steps {
		if st.cols > 0 {
			f.Resize(st.cols, st.rows)
			continue
		}
		b := []byte(st.out)
		for len(b) > 0 {
			n := min(len(b), ReadChunk-17)
			f.Write(dec.FeedView(b[:n]).Text)
			b = b[n:]
		}
	}
	f.Write(dec.FlushView().Text)
}

// sameHistory fails t where b's history differs from a's.
func sameHistory(t *testing.T, a, b *Screen) {
	t.Helper()
	if got, want := string(b.History().AppendTo(nil)), string(a.History().AppendTo(nil)); got != want {
		t.Errorf("history differs: %d lines (%d bytes), want %d lines (%d bytes)", b.History().Lines(), len(got), a.History().Lines(), len(want))
	}
}

// waitCaughtUp waits until f's goroutine has fed the emulator all the
// output written, without a rebuild pending.
func waitCaughtUp(t *testing.T, f *Feed) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		f.mu.Lock()
		done := f.fed == f.written && !f.behind && len(f.ops) == 0
		f.mu.Unlock()
		if done {
			return
		}
		select {
		case <-f.caught:
		case <-deadline:
			t.Fatal("the emulator did not catch up in 10s")
		}
	}
}

// TestFeedExact: every stream of the golden test fed through a Feed
// (its goroutine running, the resizes in order with the output) gives
// the same screens and history as the emulator fed directly: while the
// emulator keeps up (these streams are within FeedWork; each is written
// at once, as one burst, so the rate bound is lifted here), the
// snapshot is exact.
func TestFeedExact(t *testing.T) {
	streams := syntheticStreams()
	for name, st := range recordedStreams(t) {
		streams[name] = st
	}
	for name, steps := range streams {
		t.Run(name, func(t *testing.T) {
			want, f := playedAndFeed(t, steps)
			f.maxRate = f.maxWork
			f.Start()
			playFeed(f, steps)
			f.Screen(func(got *Screen) {
				sameScreens(t, want, got)
				sameHistory(t, want, got)
			})
			if n := f.Rebuilds(); n != 0 {
				t.Errorf("%d rebuilds, want 0", n)
			}
		})
	}
}

// TestFeedKeepsUp: output far past FeedWork in all, written at a pace
// the emulator keeps up with (each piece taken before the next), is
// emulated exactly: the history is the direct emulation's.
func TestFeedKeepsUp(t *testing.T) {
	want := NewScreen(80, 24, 1<<20)
	defer want.Close()
	f := NewFeed(NewScreen(80, 24, 1<<20), 80, 24, nil)
	f.maxWork, f.maxRate = 4096, 1<<30
	f.Start()
	defer f.Close()
	for i := range 2000 {
		line := fmt.Appendf(nil, "\x1b[3%dmline %d\x1b[m %s\r\n", i%8, i, strings.Repeat("x", i%70))
		want.Write(line)
		f.Write(line)
		waitCaughtUp(t, f)
	}
	f.Screen(func(got *Screen) {
		sameScreens(t, want, got)
		sameHistory(t, want, got)
	})
	if n := f.Rebuilds(); n != 0 {
		t.Errorf("%d rebuilds, want 0", n)
	}
}

// TestFeedWriteDoesNotWait: Write returns while the emulator is busy
// (held here by a snapshot's fn): the PTY reader never waits for it,
// and the ring it fills stays within its bound.
func TestFeedWriteDoesNotWait(t *testing.T) {
	f := NewFeed(NewScreen(80, 24, 1<<20), 80, 24, nil)
	f.maxWork = 8192
	f.Start()
	defer f.Close()
	wrote := make(chan struct{})
	f.Screen(func(*Screen) {
		go func() {
			defer close(wrote)
			chunk := []byte(strings.Repeat("y", ReadChunk))
			for range 1000 { // 4 MB
				f.Write(chunk)
			}
		}()
		select {
		case <-wrote:
		case <-time.After(10 * time.Second):
			t.Fatal("Write waited for the emulator")
		}
	})
	f.mu.Lock()
	ring, behind := len(f.ring), f.behind
	f.mu.Unlock()
	if ring > f.maxWork || !behind {
		t.Errorf("ring %d bytes (bound %d), behind %v: want within the bound and behind", ring, f.maxWork, behind)
	}
}

// TestFeedRebuildKeepsFullScreen: a full-screen program (alternate
// screen, modes, a title drawn once) floods a counter far past the
// bound while nothing feeds the emulator: the backlog is dropped, and
// the snapshot's rebuild gives exactly the screen of the whole stream:
// the title and modes from before, the newest counter.
func TestFeedRebuildKeepsFullScreen(t *testing.T) {
	var b strings.Builder
	b.WriteString("$ ./fullscreen\r\n\x1b[?1049h\x1b[?1h\x1b=\x1b[?2004h\x1b[?1000h\x1b[?1006h\x1b[?25l\x1b[H\x1b[2J\x1b[5;10H\x1b[1;4;38;5;208mTITLE\x1b[m")
	for i := range 20000 {
		fmt.Fprintf(&b, "\x1b[20;1H\x1b[32mcounter %06d\x1b[m", i)
	}
	steps := []vtStep{{out: b.String()}}
	want, f := playedAndFeed(t, steps)
	f.maxWork = 16 << 10
	// The program's start is taken while the emulator keeps up; the
	// rest floods past the bound.
	head, rest := b.String()[:200], b.String()[200:]
	f.Write([]byte(head))
	f.CatchUp()
	playFeed(f, []vtStep{{out: rest}})
	if !f.Behind() {
		t.Fatal("not behind after a flood past the bound")
	}
	f.Screen(func(got *Screen) {
		sameScreens(t, want, got)
	})
	if n := f.Rebuilds(); n != 1 {
		t.Errorf("%d rebuilds, want 1", n)
	}
}

// TestFeedRebuildLines: lines flooding past the bound while the
// emulator is behind: the goroutine rebuilds on its own once the output
// has been calm for feedCalm (no snapshot asked), the screen is the
// newest lines exactly, and the history holds the lines from before the
// flood, then the flood's first lines (the head of the dropped output,
// fed as it is), then the newest that scrolled off, each whole: what
// was dropped between is lost, nothing is garbled. It runs in a synctest
// bubble: the rebuild comes exactly feedCalm after the flood.
func TestFeedRebuildLines(t *testing.T) {
	synctest.Test(t, testFeedRebuildLines)
}

func testFeedRebuildLines(t *testing.T) {
	var b strings.Builder
	for i := range 5000 {
		fmt.Fprintf(&b, "line %05d %s\r\n", i, strings.Repeat("-", i%50))
	}
	b.WriteString("$ ")
	want, f := playedAndFeed(t, []vtStep{{out: b.String()}})
	f.maxWork = 32 << 10
	f.Start()
	f.Write([]byte("before 1\r\nbefore 2\r\n"))
	synctest.Wait()
	if !caughtUp(f) {
		t.Fatal("the goroutine did not feed the output at once")
	}
	// The emulator busy: the flood falls behind, and the goroutine
	// reads the output's work only once the flood is all written.
	f.emu.Lock()
	playFeed(f, []vtStep{{out: b.String()}})
	behind := f.Behind()
	f.emu.Unlock()
	if !behind {
		t.Fatal("not behind after a flood past the bound")
	}
	time.Sleep(feedCalm - time.Nanosecond)
	synctest.Wait()
	if caughtUp(f) || f.Rebuilds() != 0 {
		t.Fatalf("rebuilt (%d) before the output was calm for feedCalm", f.Rebuilds())
	}
	time.Sleep(time.Nanosecond)
	synctest.Wait()
	if !caughtUp(f) {
		t.Fatal("not caught up once the output was calm for feedCalm")
	}
	if n := f.Rebuilds(); n != 1 {
		t.Errorf("%d rebuilds, want 1", n)
	}
	f.Screen(func(got *Screen) {
		// The screen: the last 23 lines and the prompt, exactly.
		for y := range 24 {
			if g, w := rowText(vtScreen(got.Emulator(), 0), y), rowText(vtScreen(want.Emulator(), 0), y); g != w {
				t.Errorf("row %d %q, want %q", y, g, w)
			}
		}
		hist := strings.Split(strings.TrimSuffix(string(got.History().AppendTo(nil)), "\r\n"), "\r\n")
		if len(hist) < 100 || !strings.HasPrefix(hist[0], "before 1") {
			t.Fatalf("history of %d lines from %q: want the lines before the flood, then many", len(hist), hist[0])
		}
		last, gaps := -1, 0
		for _, l := range hist[1:] {
			if strings.HasPrefix(l, "before 2") {
				continue
			}
			var n int
			var dashes string
			if _, err := fmt.Sscanf(strings.ReplaceAll(l, "\x1b[m", ""), "line %d %s", &n, &dashes); err != nil && !strings.HasPrefix(l, fmt.Sprintf("line %05d", n)) {
				t.Fatalf("history line %q is not a whole line of the output", l)
			}
			if want := fmt.Sprintf("line %05d %s", n, strings.Repeat("-", n%50)); strings.TrimRight(l, " ") != strings.TrimRight(want, " ") {
				t.Fatalf("history line %q, want %q", l, want)
			}
			if last < 0 && n != 0 {
				t.Fatalf("the flood's first line in the history is line %d, want its head from line 0", n)
			}
			if last >= 0 && n != last+1 {
				if gaps++; gaps > 1 || n < last {
					t.Fatalf("history line %d after %d: want one gap, after the head", n, last)
				}
			}
			last = n
		}
		if gaps != 1 {
			t.Errorf("%d gaps in the history, want 1 (the dropped output)", gaps)
		}
		if last != 5000-24 {
			t.Errorf("the history ends with line %d, want %d", last, 5000-24)
		}
	})
}

// TestFeedOpsBound: resizes with no output between are bounded: past
// maxFeedOps the emulator is behind and the ops are squashed, and a
// rebuild applies the newest size.
func TestFeedOpsBound(t *testing.T) {
	f := NewFeed(NewScreen(80, 24, 1<<20), 80, 24, nil)
	defer f.Close()
	f.Write([]byte("hello"))
	for i := range 10 * maxFeedOps {
		f.Resize(40+i%40, 10+i%10)
		f.mu.Lock()
		n := len(f.ops)
		f.mu.Unlock()
		if n > maxFeedOps {
			t.Fatalf("%d ops waiting, bound %d", n, maxFeedOps)
		}
	}
	f.ClearHistory()
	f.Resize(100, 30)
	f.Screen(func(s *Screen) {
		if e := s.Emulator(); e.Width() != 100 || e.Height() != 30 {
			t.Errorf("size %dx%d after the rebuild, want 100x30", e.Width(), e.Height())
		}
		if got := rowText(vtScreen(s.Emulator(), 0), 0); !strings.HasPrefix(got, "hello") {
			t.Errorf("row 0 %q, want hello", got)
		}
	})
}

// TestFeedRateFallsBehind: output faster than FeedRate is a flood: more
// work than maxRate within one feedWindow (100 ms) and the emulator
// falls behind at once, its backlog kept while within FeedWork, and a
// snapshot feeds that backlog: exact, no rebuild. The window is counted
// from its first write: exactly feedWindow later a new one begins. It
// runs in a synctest bubble, so that the writes fall in the windows the
// test says however slow the machine.
func TestFeedRateFallsBehind(t *testing.T) {
	synctest.Test(t, testFeedRateFallsBehind)
}

func testFeedRateFallsBehind(t *testing.T) {
	f := NewFeed(NewScreen(80, 24, 1<<20), 80, 24, nil)
	f.maxRate = 5000
	defer f.Close()
	f.Write([]byte(strings.Repeat("a", 900))) // 900 bytes, 11 wraps: 2220 of work
	if f.Behind() {
		t.Fatal("behind within the rate")
	}
	time.Sleep(feedWindow - time.Nanosecond)
	f.Write([]byte(strings.Repeat("b", 2000))) // 5000 of work: 7220 in the window
	if !f.Behind() {
		t.Fatal("not behind past the rate")
	}
	// The backlog is within FeedWork: a snapshot feeds it, exact.
	want := NewScreen(80, 24, 1<<20)
	defer want.Close()
	want.Write([]byte(strings.Repeat("a", 900) + strings.Repeat("b", 2000)))
	f.Screen(func(got *Screen) {
		sameScreens(t, want, got)
		sameHistory(t, want, got)
	})
	if f.Behind() || f.Rebuilds() != 0 {
		t.Errorf("behind %v, %d rebuilds after the snapshot: want caught up, exactly", f.Behind(), f.Rebuilds())
	}
	// feedWindow after the first write: a new window, in which the rate
	// is exactly full (5000) and one byte more is a flood.
	time.Sleep(time.Nanosecond)
	f.Write([]byte(strings.Repeat("c", 2000)))
	if f.Behind() {
		t.Fatal("behind at exactly the rate in a new window")
	}
	f.Write([]byte("d"))
	if !f.Behind() {
		t.Fatal("not behind one byte past the rate")
	}
}

// TestFeedBurstExact: a burst faster than FeedRate but within FeedWork
// (a `cat` of a small file) has the emulator leave it while it comes;
// once the output has been calm for feedCalm the goroutine feeds it on
// its own (no snapshot asked), and the screen and history are exact.
// It runs in a synctest bubble: the catch-up comes exactly then.
func TestFeedBurstExact(t *testing.T) {
	synctest.Test(t, testFeedBurstExact)
}

func testFeedBurstExact(t *testing.T) {
	steps := syntheticStreams()["history then a prompt"]
	want, f := playedAndFeed(t, steps)
	f.maxRate = 1000
	f.Start()
	// The goroutine waits for the emulator's lock until the burst is
	// all written, so it measures the calm from the burst's end.
	f.emu.Lock()
	playFeed(f, steps)
	f.emu.Unlock()
	if !f.Behind() {
		t.Fatal("not behind after a burst past the rate")
	}
	time.Sleep(feedCalm - time.Nanosecond)
	synctest.Wait()
	if caughtUp(f) {
		t.Fatal("caught up before the output was calm for feedCalm")
	}
	time.Sleep(time.Nanosecond)
	synctest.Wait()
	if !caughtUp(f) {
		t.Fatal("not caught up once the output was calm for feedCalm")
	}
	f.Screen(func(got *Screen) {
		sameScreens(t, want, got)
		sameHistory(t, want, got)
	})
	if n := f.Rebuilds(); n != 0 {
		t.Errorf("%d rebuilds, want 0", n)
	}
}

// TestFeedCalm: the goroutine feeds a burst once the output has been
// calm for feedCalm, that is less than a quarter of FeedRate's pace came
// in it, else it waits a feedCalm more. An emulator that falls behind
// again within maxFeedCalm of catching up waits twice as long as the
// time before, up to maxFeedCalm (4 s); after maxFeedCalm without
// falling behind, feedCalm again. Seconds of waits that only a synctest
// bubble makes practical to test exactly.
func TestFeedCalm(t *testing.T) {
	synctest.Test(t, testFeedCalm)
}

func testFeedCalm(t *testing.T) {
	f := NewFeed(NewScreen(80, 24, 1<<20), 80, 24, nil)
	f.maxRate = 1000 // calm: under 250 of work per feedWindow
	defer f.Close()
	f.Start()
	burst := []byte(strings.Repeat("x", 2000)) // 5000 of work
	// caughtUpAfter checks that the emulator is behind until exactly
	// wait from now, and caught up then.
	caughtUpAfter := func(what string, wait time.Duration) {
		t.Helper()
		time.Sleep(wait - time.Nanosecond)
		synctest.Wait()
		if caughtUp(f) {
			t.Fatalf("%s: caught up before %v", what, wait)
		}
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		if !caughtUp(f) {
			t.Fatalf("%s: not caught up after %v", what, wait)
		}
	}
	// One write each: the goroutine, woken by it, reads the output's
	// work after it.
	f.Write(burst)
	if !f.Behind() {
		t.Fatal("not behind after a burst past the rate")
	}
	caughtUpAfter("first burst", feedCalm)
	// maxFeedCalm later (the wait is feedCalm again), a burst and more
	// output while the goroutine waits for calm (5000 of work, more than
	// a quarter of the rate over feedCalm: 625): one feedCalm more.
	time.Sleep(maxFeedCalm)
	f.Write(burst)
	time.Sleep(feedCalm / 2)
	f.Write(burst)
	caughtUpAfter("output during the wait", feedCalm/2+feedCalm)
	// Behind again at once, every time: twice as long each time, up to
	// maxFeedCalm.
	for _, wait := range []time.Duration{2 * feedCalm, 4 * feedCalm, 8 * feedCalm, maxFeedCalm, maxFeedCalm} {
		f.Write(burst)
		caughtUpAfter(fmt.Sprint("behind again, waiting ", wait), wait)
	}
	// maxFeedCalm without falling behind: feedCalm again.
	time.Sleep(maxFeedCalm)
	f.Write(burst)
	caughtUpAfter("behind after a calm maxFeedCalm", feedCalm)
}

// caughtUp reports whether f's emulator has all the output written,
// neither behind nor with a rebuild pending.
func caughtUp(f *Feed) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.fed == f.written && !f.behind && !f.lost && len(f.ops) == 0
}

// TestFeedRebuildKeepsState: a full-screen program's burst (alternate
// screen, a header line, a scroll region, modes) floods its region far
// past the bound, changing modes, attributes and the cursor style in
// the middle of the flood: after the rebuild, the screen is exactly the
// one of the whole stream (the header and region from the dropped
// output's head, fed as it is; the modes, attributes and cursor style
// from what the rest of it set). And a scroll region set in the middle
// of a flood on the primary screen is kept, with the modes.
func TestFeedRebuildKeepsState(t *testing.T) {
	var tui strings.Builder
	tui.WriteString("\x1b[?1049h\x1b[H\x1b[2J\x1b[7m HEADER \x1b[m\x1b[2;24r\x1b[?2004h\x1b[?1h\x1b=\x1b[24;1H")
	for i := range 6000 {
		if i == 3000 {
			tui.WriteString("\x1b[?1000h\x1b[?1006h\x1b[?2004l\x1b[33m\x1b[4 q\x1b(0")
		}
		fmt.Fprintf(&tui, "log %05d %s\r\n", i, strings.Repeat("=", i%40))
	}
	tui.WriteString("end")
	var region strings.Builder
	for i := range 6000 {
		if i == 3000 {
			region.WriteString("\x1b[5;20r\x1b[?25l\x1b[?1h\x1b[20;1H\x1b[1;32m")
		}
		fmt.Fprintf(&region, "line %05d %s\r\n", i, strings.Repeat("-", i%50))
	}
	region.WriteString("$ ")
	for name, tc := range map[string]struct {
		out   string
		exact bool
	}{
		"full-screen program": {tui.String(), true},
		"region mid-flood":    {region.String(), false},
	} {
		t.Run(name, func(t *testing.T) {
			steps := []vtStep{{out: "$ ./prog\r\n"}, {out: tc.out}}
			want, f := playedAndFeed(t, steps)
			f.maxWork = 16 << 10
			f.Write([]byte(steps[0].out))
			f.CatchUp()
			playFeed(f, steps[1:])
			if !f.Behind() {
				t.Fatal("not behind after a flood past the bound")
			}
			f.Screen(func(got *Screen) {
				if n := f.Rebuilds(); n != 1 {
					t.Errorf("%d rebuilds, want 1", n)
				}
				if tc.exact {
					sameState(t, want, got)
					return
				}
				// The rows outside the region hold what the dropped
				// output drew there; the rest is exact.
				ew, eg := want.Emulator(), got.Emulator()
				if rw, rg := vtScreen(ew, 0).ScrollRegion(), vtScreen(eg, 0).ScrollRegion(); rw != rg {
					t.Errorf("scroll region %v, want %v", rg, rw)
				}
				for y := 4; y < 20; y++ {
					if g, w := rowText(vtScreen(eg, 0), y), rowText(vtScreen(ew, 0), y); g != w {
						t.Errorf("row %d %q, want %q", y, g, w)
					}
				}
				if eg.CursorHidden() != ew.CursorHidden() || eg.CursorPosition() != ew.CursorPosition() {
					t.Errorf("cursor at %v hidden %v, want at %v hidden %v", eg.CursorPosition(), eg.CursorHidden(), ew.CursorPosition(), ew.CursorHidden())
				}
				mw, mg := emuModes(t, ew), emuModes(t, eg)
				for _, m := range redrawModes {
					if mw.IsSet(m.mode) != mg.IsSet(m.mode) {
						t.Errorf("mode %d set %v, want %v", m.mode.Mode(), mg.IsSet(m.mode), mw.IsSet(m.mode))
					}
				}
				if pw, pg := vtScreen(ew, 0).Cursor().Pen, vtScreen(eg, 0).Cursor().Pen; !pw.Equal(&pg) {
					t.Errorf("pen %+v, want %+v", pg, pw)
				}
				if c, w := vtScreen(eg, 0).CellAt(0, 18), vtScreen(ew, 0).CellAt(0, 18); !c.Equal(w) {
					t.Errorf("cell (0,18) %+v, want %+v", c, w)
				}
			})
		})
	}
}

// TestFeedStateSplit: the state the dropped output set is read the same
// whatever pieces it comes in (a sequence cut between two writes), and
// what it keeps stays within its bounds however long the output.
func TestFeedStateSplit(t *testing.T) {
	out := []byte("text\x1b[?1049h\x1b[2;20r\x1b[?1000;1006h\x1b[4h\x1b=\x1b(0\x1b)B\x1b[5 q\x1b]0;title 1234\x07" +
		"\x1b[1m\x1b[38;5;200mx\x1b[m\x1b[4:3m\x1b[?1049l\x1b[3;10r\x1b[?1000l\x1b[99999999r\x1b[?2004h")
	var whole feedState
	whole.scan(out)
	want := string(whole.appendSGR(whole.appendReplay(nil)))
	if want != "\x1b[?1049h\x1b[2;20r\x1b[?1049l\x1b[65535r\x1b[?1000l\x1b[?1006h\x1b[4h\x1b=\x1b[?2004h\x1b(0\x1b)B\x1b[5 q\x1b[m\x1b[4:3m" {
		t.Errorf("replay %q", want)
	}
	for cut := 1; cut < len(out); cut++ {
		var st feedState
		st.scan(out[:cut])
		st.scan(out[cut:])
		if got := string(st.appendSGR(st.appendReplay(nil))); got != want {
			t.Fatalf("cut at %d: replay %q, want %q", cut, got, want)
		}
	}
	var st feedState
	for i := range 10000 {
		st.scan(fmt.Appendf(nil, "\x1b[?%dh\x1b[%d;%dr\x1b[?1049%c\x1b[%dm\x1b[%d;1m", 2000+i, i, i+5, "hl"[i%2], 30+i%8, i))
	}
	if st.nmodes > maxTrackedModes || st.nscreens > maxTrackedScreens || len(st.sgr) > maxTrackedSGR || cap(st.partial) > maxTrackedSeq {
		t.Errorf("state over its bounds: %d modes, %d screens, %d SGR bytes, %d partial", st.nmodes, st.nscreens, len(st.sgr), cap(st.partial))
	}
	st.reset()
	st.scan([]byte("\x1b[?2004h\x1b[31m\x1bc\x1b[?1h"))
	if got := string(st.appendSGR(st.appendReplay(nil))); got != "\x1bc\x1b[?1h" {
		t.Errorf("after RIS: replay %q", got)
	}
}

// playedAndFeed returns a direct 80x24 Screen that played steps (what a
// Feed must reproduce) and a Feed over another, not started (the caller
// sets its bounds first); both are closed at t's cleanup.
func playedAndFeed(t *testing.T, steps []vtStep) (*Screen, *Feed) {
	t.Helper()
	want := NewScreen(80, 24, 1<<20)
	t.Cleanup(want.Close)
	play(want, steps)
	f := NewFeed(NewScreen(80, 24, 1<<20), 80, 24, nil)
	t.Cleanup(f.Close)
	return want, f
}
