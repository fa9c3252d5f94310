package pty

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"testing"
	"time"

	uv "github.com/charmbracelet/ultraviolet"
	"github.com/charmbracelet/x/ansi"
	"github.com/charmbracelet/x/vt"
)

var update = flag.Bool("update", false, "record the VT streams under testdata/vt again (needs vim, less, top)")

// vtStep is one step of a VT stream: output, or a resize.
type vtStep struct {
	out        string
	cols, rows int // a resize when cols > 0
}

// synthetic streams: what each exercises is in its name.
func syntheticStreams() map[string][]vtStep {
	var counter strings.Builder
	counter.WriteString("$ ./fullscreen\r\n\x1b[?1049h\x1b[H\x1b[2J\x1b[5;10H\x1b[1;4;38;5;208mTITLE\x1b[m")
	for i := range 3000 {
		fmt.Fprintf(&counter, "\x1b[20;1Hcounter %06d", i)
	}
	var history strings.Builder
	for i := range 300 {
		fmt.Fprintf(&history, "\x1b[3%dmline %d\x1b[m \x1b[1mbold\x1b[22m %s\r\n", i%8, i, strings.Repeat("x", i%90))
	}
	history.WriteString("$ ")
	return map[string][]vtStep{
		"colours and attributes": {{out: "plain \x1b[1mbold\x1b[m \x1b[2mfaint\x1b[m \x1b[3mitalic\x1b[m \x1b[4munder\x1b[m \x1b[4:3mcurly\x1b[m \x1b[5mblink\x1b[m \x1b[7mreverse\x1b[m \x1b[9mstrike\x1b[m\r\n" +
			"\x1b[31mred \x1b[42mon green\x1b[m \x1b[38;5;123m256\x1b[48;2;10;20;30m truecolour bg \x1b[m\r\n" +
			"\x1b[44m  blue blanks  \x1b[m|\x1b[K\r\n\x1b[41m\x1b[Kred to the end of the line\x1b[m\r\n" +
			"\x1b]8;;https://example.com\x1b\\a link\x1b]8;;\x1b\\ after\r\n$ "}},
		"wide characters": {{out: "日本語のテキスト and 한국어\r\nemoji 👍🏽 and 🇫🇷 flags, e\u0301 combining\r\n" +
			strings.Repeat("字", 45) + "\r\n\x1b[3;79H字x\r\n$ "}},
		"alternate screen counter":    {{out: counter.String()}},
		"history then a prompt":       {{out: history.String()}},
		"modes and a hidden cursor":   {{out: "\x1b[?1h\x1b=\x1b[?2004h\x1b[?1000h\x1b[?1006h\x1b[?25l\x1b[4 q\x1b[?1049h\x1b[2;3Hin the alt screen\x1b[1;31m"}},
		"scroll region (a pager)":     {{out: "\x1b[?1049h\x1b[1;22r\x1b[23;1H\x1b[7mstatus line\x1b[m\x1b[22;1H" + strings.Repeat("scrolled\r\n", 40) + "last"}},
		"alternate screen left again": {{out: "before\r\n\x1b[?1049hinside\x1b[?1049lafter\r\n$ "}},
		"resize in the middle": {
			{out: history.String() + "\x1b[31mwide line " + strings.Repeat("=", 70) + "\x1b[m\r\n"},
			{cols: 120, rows: 30},
			{out: "after the resize " + strings.Repeat("-", 100) + "\r\n$ "},
			{cols: 60, rows: 20},
			{out: "\x1b[?1049h\x1b[10;10Hsmaller\x1b[20;60HZ"},
		},
	}
}

// recordings are real programs recorded in an 80×24 PTY (-update).
var recordings = map[string]struct {
	argv []string
	keys []string // typed one by one, 300 ms apart, after 500 ms
}{
	"vim":   {argv: []string{"vim", "-u", "NONE", "-N", "-i", "NONE", "-n", "testdata/vt/text.txt"}, keys: []string{"30j", ":syntax on\r", ":set number\r", "Oinserted 日本語 line\x1b", "5k"}},
	"less":  {argv: []string{"less", "testdata/vt/text.txt"}, keys: []string{" ", "j"}},
	"top":   {argv: []string{"top", "-n", "1"}},
	"shell": {argv: []string{"sh", "-c", "ls -l --color=always testdata/vt; printf '\\033[32mgreen\\033[m done\\n'"}},
}

func recordedStreams(t *testing.T) map[string][]vtStep {
	t.Helper()
	out := map[string][]vtStep{}
	for name, r := range recordings {
		path := filepath.Join("testdata", "vt", name+".vt")
		if *update {
			record(t, path, r.argv, r.keys)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (record with -update)", err)
		}
		out["recorded "+name] = []vtStep{{out: string(b)}}
	}
	return out
}

// record runs argv in an 80×24 PTY, types keys, and writes its output
// to path.
func record(t *testing.T, path string, argv, keys []string) {
	t.Helper()
	if _, err := exec.LookPath(argv[0]); err != nil {
		t.Skipf("cannot record %s: %v", path, err)
	}
	p, err := Start(Options{Argv: argv, Cols: 80, Rows: 24, Dir: mustWd(t), Env: map[string]string{"LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = io.Copy(&buf, p)
	}()
	time.Sleep(500 * time.Millisecond)
	for _, k := range keys {
		_, _ = p.Write([]byte(k))
		time.Sleep(300 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond)
	_ = p.Kill(time.Second)
	<-done
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

func mustWd(t *testing.T) string {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return wd
}

// play feeds steps to a Screen the way a Terminal does (decoded text).
func play(s *Screen, steps []vtStep) {
	var dec OutputDecoder
	for _, st := range steps {
		if st.cols > 0 {
			s.Resize(st.cols, st.rows)
			continue
		}
		b := []byte(st.out)
		for len(b) > 0 { // in PTY-read-sized pieces, split anywhere
			n := min(len(b), ReadChunk-17)
			s.Write(dec.FeedView(b[:n]).Text)
			b = b[n:]
		}
	}
	s.Write(dec.FlushView().Text)
}

// TestRedrawGolden: for each stream, the snapshot content (history, then
// the screen redraw) written into a second emulator of the same size
// gives the same cells, cursor, alternate screen, modes and history as
// the first.
func TestRedrawGolden(t *testing.T) {
	streams := syntheticStreams()
	for name, st := range recordedStreams(t) {
		streams[name] = st
	}
	for name, steps := range streams {
		t.Run(name, func(t *testing.T) {
			a := NewScreen(80, 24, 1<<20)
			defer a.Close()
			play(a, steps)
			e := a.Emulator()
			b := NewScreen(e.Width(), e.Height(), 1<<20)
			defer b.Close()
			content := a.Redraw(nil, true)
			b.Write(content)
			sameState(t, a, b)
			resized := false
			for _, st := range steps {
				resized = resized || st.cols > 0
			}
			if resized {
				// History lines as wide as the terminal was before a
				// resize wrap when written again at the new width:
				// the screen must match, the history cannot.
				return
			}
			if got, want := string(b.History().AppendTo(nil)), string(a.History().AppendTo(nil)); got != want {
				t.Errorf("history differs: %d lines (%d bytes) after the redraw, %d lines (%d bytes) before", b.History().Lines(), len(got), a.History().Lines(), len(want))
			}
			// The redraw of the redraw is the same text.
			if again := b.Redraw(nil, true); !bytes.Equal(again, content) {
				t.Errorf("redraw not stable:\n%q\n%q", content, again)
			}
		})
	}
}

// sameScreens fails t where b's screens differ from a's.
func sameScreens(t *testing.T, a, b *Screen) {
	t.Helper()
	ea, eb := a.Emulator(), b.Emulator()
	if ea.Width() != eb.Width() || ea.Height() != eb.Height() {
		t.Fatalf("size %dx%d, want %dx%d", eb.Width(), eb.Height(), ea.Width(), ea.Height())
	}
	if ea.IsAltScreen() != eb.IsAltScreen() {
		t.Fatalf("alternate screen %v, want %v", eb.IsAltScreen(), ea.IsAltScreen())
	}
	if pa, pb := ea.CursorPosition(), eb.CursorPosition(); pa != pb {
		t.Errorf("cursor at %v, want %v", pb, pa)
	}
	if ea.CursorHidden() != eb.CursorHidden() {
		t.Errorf("cursor hidden %v, want %v", eb.CursorHidden(), ea.CursorHidden())
	}
	sa, ba := ea.CursorStyle()
	sb, bb := eb.CursorStyle()
	if sa != sb || ba != bb {
		t.Errorf("cursor style %v/%v, want %v/%v", sb, bb, sa, ba)
	}
	modeSet := func(s *Screen, m ansi.Mode, def bool) bool {
		set, ok := s.modes[m]
		return set || !ok && def
	}
	for _, m := range redrawModes {
		if sa, sb := modeSet(a, m.mode, m.def), modeSet(b, m.mode, m.def); sa != sb {
			t.Errorf("mode %d: %v, want %v", m.mode.Mode(), sb, sa)
		}
	}
	screens := []int{b2i(ea.IsAltScreen())}
	if ea.IsAltScreen() {
		screens = append(screens, 0)
	}
	for _, i := range screens {
		sa, sb := vtScreen(ea, i), vtScreen(eb, i)
		if ra, rb := sa.ScrollRegion(), sb.ScrollRegion(); ra != rb {
			t.Errorf("screen %d: scroll region %v, want %v", i, rb, ra)
		}
		if pa, pb := sa.Cursor().Pen, sb.Cursor().Pen; !pa.Equal(&pb) && i == b2i(ea.IsAltScreen()) {
			t.Errorf("screen %d: pen %+v, want %+v", i, pb, pa)
		}
		bad := 0
		for y := range ea.Height() {
			for x := range ea.Width() {
				ca, cb := sa.CellAt(x, y), sb.CellAt(x, y)
				if !sameCell(ca, cb) {
					if bad++; bad <= 5 {
						t.Errorf("screen %d cell (%d,%d) = %+v, want %+v\nrow %q\nwant %q", i, x, y, cb, ca, rowText(sb, y), rowText(sa, y))
					}
				}
			}
		}
		if bad > 5 {
			t.Errorf("screen %d: %d cells differ", i, bad)
		}
	}
}

func sameCell(a, b *uv.Cell) bool {
	blank := func(c *uv.Cell) bool { return c == nil || c.IsZero() || c.Equal(&uv.EmptyCell) }
	if blank(a) || blank(b) {
		return blank(a) == blank(b)
	}
	return a.Equal(b)
}

func rowText(s *vt.Screen, y int) string {
	var b strings.Builder
	for x := range s.Width() {
		if c := s.CellAt(x, y); c != nil {
			b.WriteString(c.Content)
		}
	}
	return b.String()
}

// TestVTLayout: the emulator's screens are where vtScreen looks (the
// layout of the vt version in go.mod): the primary screen under an
// active alternate one is the one the program drew, and the alternate
// screen keeps no scrollback.
func TestVTLayout(t *testing.T) {
	if !vtLayout.ok {
		t.Fatal("vt.Emulator has no scrs [2]vt.Screen field: the vt version changed, see vtLayout")
	}
	s := NewScreen(20, 5, 1<<10)
	defer s.Close()
	s.Write([]byte("primary\x1b[?1049halt"))
	if got := rowText(vtScreen(s.Emulator(), 0), 0); !strings.HasPrefix(got, "primary") {
		t.Errorf("primary row 0 %q", got)
	}
	if got := rowText(vtScreen(s.Emulator(), 1), 0); !strings.HasPrefix(got, "alt") {
		t.Errorf("alternate row 0 %q", got)
	}
	s.Write([]byte(strings.Repeat("scroll\r\n", 100)))
	if sb := vtScreen(s.Emulator(), 1).Scrollback(); sb != nil {
		t.Errorf("alternate screen keeps a scrollback of %d lines", sb.Len())
	}
}

// FuzzScreen feeds arbitrary output to a terminal's emulator path
// (OutputDecoder, then Screen, with a resize when the first byte says
// so) and writes its redraw into a second emulator: nothing panics, the
// history stays within its bound and the emulator keeps no lines
// between writes. The same output also goes through a Feed whose bound
// is small, so that it falls behind and is rebuilt from arbitrary
// heads, tails and states of the dropped output: nothing panics and its
// ring, head and state stay within their bounds.
//
// An execution costs milliseconds whatever its input (each of its three
// emulators allocates a 4 MiB buffer), and the fuzzer minimizes every
// input it finds interesting, candidate by candidate, up to a minute
// each: from seeds of 3-4 KiB (the recordings) it spent nearly all its
// time minimizing, a few hundred execs in 30 s. So its seeds are at most
// maxFuzzScreenSeed bytes (the long streams cut in pieces) and it checks
// the first maxFuzzScreenInput bytes of an input. The long streams are
// checked whole by TestScreenCheckLongStreams.
func FuzzScreen(f *testing.F) {
	for _, in := range screenCheckInputs(f) {
		// Pieces of a long stream, so that the seeds still cover what
		// it does; a few, as the long synthetic streams repeat.
		for i := 0; i < len(in) && i < 16*maxFuzzScreenSeed; i += maxFuzzScreenSeed {
			f.Add(in[i:min(i+maxFuzzScreenSeed, len(in))])
		}
	}
	// Each emulator's 4 MiB is garbage at the end of an execution: with
	// the default GOGC the heap is collected and its pages returned and
	// faulted in again every execution or two, which costs more than the
	// check itself.
	defer debug.SetGCPercent(debug.SetGCPercent(400))
	f.Fuzz(func(t *testing.T, data []byte) {
		checkScreen(t, data[:min(len(data), maxFuzzScreenInput)])
	})
}

const (
	// maxFuzzScreenSeed bounds FuzzScreen's seeds: over 97 bytes, so
	// that a seed is fed in more than one write and resizes.
	maxFuzzScreenSeed = 256
	// maxFuzzScreenInput bounds what FuzzScreen checks of an input (a
	// longer one's tail is cut at once by the minimizer).
	maxFuzzScreenInput = 512
)

// screenCheckInputs returns the outputs FuzzScreen starts from and
// TestScreenCheckLongStreams checks whole: every synthetic stream's
// output, the recordings, and sequences that found bugs.
func screenCheckInputs(tb testing.TB) [][]byte {
	var ins [][]byte
	streams := syntheticStreams()
	for _, name := range slices.Sorted(maps.Keys(streams)) {
		for _, st := range streams[name] {
			if st.out != "" {
				ins = append(ins, []byte(st.out))
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(recordings)) {
		b, err := os.ReadFile(filepath.Join("testdata", "vt", name+".vt"))
		if err != nil {
			tb.Fatal(err)
		}
		ins = append(ins, b)
	}
	return append(ins,
		[]byte("\x1b[?1049h\x1b[5;10Htitle\x1b[?2004h\x1b[?1000;1006h\x1b[3;20r\x1b[?6h\x1b[2;2Hx"),
		[]byte("\x1b[999S\x1b[2J\x1b[3J\x1bc\x1b[6n\x1b[c\x1b]11;?\x07\x1b[?2048h"),
		[]byte("ab\x1b[4294967297C\x1b[99999999b\x1b[38;5;300;53m\x1b[41m\x1b[2J\x1b7\x1b[?1047h\x1b[4h0123456789012345678901"),
	)
}

// TestScreenCheckLongStreams runs FuzzScreen's check on each of its
// starting outputs whole, the long ones too (a synthetic stream of
// 60 KB, the recordings of a few KiB).
func TestScreenCheckLongStreams(t *testing.T) {
	for _, in := range screenCheckInputs(t) {
		checkScreen(t, in)
	}
}

// checkScreen is FuzzScreen's check of one output.
func checkScreen(t *testing.T, data []byte) {
	const hist = 2048
	s := NewScreen(20, 6, hist)
	defer s.Close()
	feed := NewFeed(NewScreen(20, 6, hist), 20, 6, nil)
	feed.maxWork = 300
	defer feed.Close()
	var dec OutputDecoder
	for i := 0; i < len(data); i += 97 {
		text := dec.FeedView(data[i:min(i+97, len(data))]).Text
		s.Write(text)
		feed.Write(text)
		if i == 97 && len(data) > 0 && data[0]%5 == 0 {
			s.Resize(int(data[0]%40)+1, int(data[len(data)-1]%30)+1)
			feed.Resize(int(data[0]%40)+1, int(data[len(data)-1]%30)+1)
		}
		if i%(97*3) == 0 {
			feed.Screen(func(*Screen) {})
		}
		feed.mu.Lock()
		if len(feed.ring) > feed.maxWork || len(feed.ops) > maxFeedOps || len(feed.head) > feed.maxWork/8 || feed.headWork > feed.maxWork/8 {
			t.Fatalf("feed ring %d bytes, %d ops, head %d bytes (%d of work): over the bounds", len(feed.ring), len(feed.ops), len(feed.head), feed.headWork)
		}
		if st := &feed.track; st.nmodes > maxTrackedModes || st.nscreens > maxTrackedScreens || len(st.sgr) > maxTrackedSGR || len(st.partial) > maxTrackedSeq {
			t.Fatalf("dropped output's state over its bounds: %d modes, %d screens, %d SGR bytes, %d partial", st.nmodes, st.nscreens, len(st.sgr), len(st.partial))
		}
		feed.mu.Unlock()
		if n := s.Emulator().ScrollbackLen(); n != 0 {
			t.Fatalf("the emulator keeps %d scrolled-off lines after a write", n)
		}
	}
	s.Write(dec.FlushView().Text)
	if s.History().Len() > hist {
		t.Fatalf("history of %d bytes, bound %d", s.History().Len(), hist)
	}
	e := s.Emulator()
	b := NewScreen(e.Width(), e.Height(), hist)
	defer b.Close()
	b.Write(s.Redraw(nil, true))
}

// TestHistoryBound: the history keeps the newest whole lines within its
// bound and drops a line longer than the bound.
func TestHistoryBound(t *testing.T) {
	h := NewHistory(20)
	for _, l := range []string{"aaaa", "bbbb", "cccc", "dddd"} {
		h.Push([]byte(l))
	}
	if got := string(h.AppendTo(nil)); got != "bbbb\r\ncccc\r\ndddd\r\n" || h.Len() != 18 || h.Lines() != 3 {
		t.Errorf("history %q (%d bytes, %d lines)", got, h.Len(), h.Lines())
	}
	h.Push([]byte(strings.Repeat("x", 19)))
	if h.Lines() != 3 {
		t.Errorf("a line over the bound was kept")
	}
	for i := range 1000 {
		h.Push([]byte(fmt.Sprint(i)))
	}
	if got := string(h.AppendTo(nil)); got != "996\r\n997\r\n998\r\n999\r\n" || cap(h.buf) > 64 {
		t.Errorf("history %q, buffer capacity %d", got, cap(h.buf))
	}
	h.Clear()
	if h.Len() != 0 || h.Lines() != 0 {
		t.Errorf("not cleared")
	}
}

// TestEmulatorFaultRecovered: vt v0.1.0 panics on a delete-line inside a
// scroll region taller than the screen (a program drawing for the size
// it had before a shrink). Write reports it, the screen as drawn so far
// survives on a new emulator, and output goes on.
func TestEmulatorFaultRecovered(t *testing.T) {
	s := NewScreen(20, 6, 100)
	defer s.Close()
	if err := s.Write([]byte("kept\x1b[1;24r\x1b[3;1H\x1b[5M")); err == nil {
		t.Log("no fault: vt may have fixed it (TestEmulatorFaultRecovered can go)")
	}
	if err := s.Write([]byte("\x1b[2;1Hafter")); err != nil {
		t.Fatal(err)
	}
	if got := rowText(vtScreen(s.Emulator(), 0), 0); !strings.HasPrefix(got, "kept") {
		t.Errorf("row 0 %q after the fault, want kept", got)
	}
	if got := rowText(vtScreen(s.Emulator(), 0), 1); !strings.HasPrefix(got, "after") {
		t.Errorf("row 1 %q, want after", got)
	}
}
