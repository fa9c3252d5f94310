package pty

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
)

// fullScreen is output that fills a cols×rows screen with coloured text
// on every cell (the worst ordinary case for a redraw: eight attribute
// changes a row), after which history lines scrolled off.
func fullScreen(cols, rows, history int) []byte {
	var b strings.Builder
	for y := range rows + history {
		if y > 0 {
			b.WriteString("\r\n")
		}
		seg := cols / 8
		for i := range 8 {
			fmt.Fprintf(&b, "\x1b[%d;%dm%s", 30+i, 40+(i+y)%8, strings.Repeat(string(rune('a'+(i+y)%26)), seg))
		}
		b.WriteString("\x1b[m")
	}
	return []byte(b.String())
}

// BenchmarkRedraw builds a snapshot's screen redraw of a full 80×24 and
// 200×60 screen, and reports its bytes.
func BenchmarkRedraw(b *testing.B) {
	for _, sz := range [][2]int{{80, 24}, {200, 60}} {
		b.Run(fmt.Sprintf("%dx%d", sz[0], sz[1]), func(b *testing.B) {
			s := NewScreen(sz[0], sz[1], 1<<20)
			defer s.Close()
			s.Write(fullScreen(sz[0], sz[1], 0))
			var buf []byte
			b.ReportAllocs()
			for b.Loop() {
				buf = s.Redraw(buf[:0], false)
			}
			b.ReportMetric(float64(len(buf)), "snapshot-bytes")
		})
	}
}

// BenchmarkScreenWrite feeds the emulator ReadChunk-sized pieces of
// coloured full-width lines that scroll into the history (a flood of
// ls --color output), and reports MB/s.
func BenchmarkScreenWrite(b *testing.B) {
	s := NewScreen(80, 24, 1<<20)
	defer s.Close()
	out := fullScreen(80, 24, 200)
	b.SetBytes(int64(len(out)))
	b.ReportAllocs()
	for b.Loop() {
		for i := 0; i < len(out); i += ReadChunk {
			s.Write(out[i:min(i+ReadChunk, len(out))])
		}
	}
}

// BenchmarkScreenMemory reports the heap one terminal's emulator holds
// (its Feed: the Screen, and the ring of output not yet emulated, full
// once 256 KiB went through), empty and with its screens and a 1 MiB
// history full.
func BenchmarkScreenMemory(b *testing.B) {
	for _, sz := range [][2]int{{80, 24}, {200, 60}} {
		for _, full := range []bool{false, true} {
			b.Run(fmt.Sprintf("%dx%d/full=%v", sz[0], sz[1], full), func(b *testing.B) {
				const n = 20
				var out []byte
				if full {
					out = fullScreen(sz[0], sz[1], 12000)
				}
				var ms0, ms1 runtime.MemStats
				for b.Loop() {
					runtime.GC()
					runtime.ReadMemStats(&ms0)
					screens := make([]*Feed, n)
					for i := range screens {
						screens[i] = NewFeed(NewScreen(sz[0], sz[1], 1<<20), sz[0], sz[1], nil)
						for j := 0; j < len(out); j += ReadChunk {
							screens[i].Write(out[j:min(j+ReadChunk, len(out))])
							screens[i].CatchUp()
						}
					}
					runtime.GC()
					runtime.ReadMemStats(&ms1)
					for _, s := range screens {
						s.Close()
					}
				}
				b.ReportMetric(float64(ms1.HeapAlloc-ms0.HeapAlloc)/n, "heap-B/terminal")
			})
		}
	}
}

// BenchmarkFeedWrite is the emulator's cost on the PTY reader's path:
// Feed.Write of ReadChunk-sized output while the emulator is behind (a
// flood), a copy into the ring and a count of line feeds, and once the
// backlog is lost (past the first FeedWork) a scan of the escape
// sequences the copy overwrites (the output here has an SGR every 13
// bytes: the worst ordinary case); it reports MB/s and allocations
// (none).
func BenchmarkFeedWrite(b *testing.B) {
	f := NewFeed(NewScreen(80, 24, 1<<20), 80, 24, nil)
	defer f.Close()
	out := fullScreen(80, 24, 200)[:ReadChunk]
	b.SetBytes(int64(len(out)))
	b.ReportAllocs()
	for b.Loop() {
		f.Write(out)
	}
}

// BenchmarkFeedRebuild is what a snapshot taken during a flood waits
// for (and what the emulator spends once after a flood): a rebuild from
// the newest output, FeedWork of work, of `yes` lines (a scroll every 2
// bytes) and of text without line feeds (wrapping), at 80×24 and
// 200×60.
func BenchmarkFeedRebuild(b *testing.B) {
	for _, sz := range [][2]int{{80, 24}, {200, 60}} {
		for _, kind := range []string{"yes", "wrap"} {
			b.Run(fmt.Sprintf("%dx%d/%s", sz[0], sz[1], kind), func(b *testing.B) {
				out := []byte(strings.Repeat("y\r\n", 2*FeedWork/3))
				if kind == "wrap" {
					out = []byte(strings.Repeat("y", 2*FeedWork))
				}
				f := NewFeed(NewScreen(sz[0], sz[1], 1<<20), sz[0], sz[1], nil)
				defer f.Close()
				b.ReportAllocs()
				for b.Loop() {
					b.StopTimer()
					for i := 0; i < len(out); i += ReadChunk {
						f.Write(out[i:min(i+ReadChunk, len(out))])
					}
					if !f.Behind() {
						b.Fatal("not behind")
					}
					b.StartTimer()
					f.CatchUp()
				}
			})
		}
	}
}
