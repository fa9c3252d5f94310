package pty

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sidecar-dev/sidecar/internal/tmuxtest"
)

// TestRedrawTmux checks the redraw against a terminal emulator
// independent of vt: tmux. For each stream, one tmux pane of the
// Screen's size is given the stream, another a fresh one the Screen's
// redraw (after a background colour left on it), then each the same
// probe (what a program writes next after a reattach); their captures
// (cells with attributes, cursor, modes) must be equal. Not checked
// here: erased cells' background (capture-pane does not show it for
// cells tmux cleared, TestRedrawBackgroundErase does), and parameters
// over 65535 (tmux ignores a sequence with one over 2^31-1 where xterm
// clamps it: TestParamsClamped).
func TestRedrawTmux(t *testing.T) {
	tm := tmuxtest.Start(t, nil)
	dir := tm.Dir
	const fields = "cursor #{cursor_x},#{cursor_y} visible #{cursor_flag} alternate #{alternate_on} " +
		"insert #{insert_flag} cursor-keys #{keypad_cursor_flag} keypad #{keypad_flag} " +
		"mouse #{mouse_any_flag}#{mouse_button_flag}#{mouse_standard_flag} sgr-mouse #{mouse_sgr_flag} " +
		"bracketed-paste #{bracketed_paste} wrap #{wrap_flag} origin #{origin_flag} region #{scroll_region_upper}-#{scroll_region_lower}"
	screen := func(name string) string { return tm.Capture(name, fields) }
	// pane starts a cols×rows pane that shows file's bytes as they are.
	pane := func(name, file string) {
		tm.Must("new-session", "-d", "-s", name, "-x", "20", "-y", "5", "--", "sh", "-c", "stty raw -echo -onlcr; cat '"+file+"'; exec sleep 600")
	}
	n := 0
	for name, tc := range map[string]struct{ out, probe string }{
		"pending wrap":             {"$ 0123456789abcdefgh", "Wrap"},
		"pending wrap, attributes": {"\x1b[2;1H\x1b[1;41mred to the end!!\x1b[44mlink", "\x1b[mW"},
		"saved cursor":             {"\x1b[3;5H\x1b[1;31m\x1b7\x1b[m\x1b[1;1Hhello", "\x1b8R"},
		"saved cursor, history":    {strings.Repeat("line\r\n", 10) + "\x1b[2;3H\x1b[4m\x1b7\x1b[24m\x1b[5;1H$ ", "\x1b8R"},
		"saved cursor, alternate":  {"\x1b[?1049h\x1b[2;2Hx\x1b[7m\x1b7\x1b[m\x1b[4;4Hy", "\x1b8R"},
		"primary's, 1049":          {"\x1b[2;2Hab\x1b[?1049h\x1b[4;4Hy", "\x1b[?1049lP"},
		"overline":                 {"\x1b[53mover\x1b[55m not \x1b[1;53mboth\x1b[22m\x1b[4m ul\x1b[24m\x1b[0;53m", "x\x1b[55my"},
		"reset":                    {"\x1b[4h\x1b[?2004h\x1b[?1h\x1b[?1000h\x1b[31mbefore\x1bcafter", "x"},
		"modes":                    {"\x1b[?1h\x1b=\x1b[?2004h\x1b[?1000h\x1b[?1006h\x1b[?25l\x1b[2;4r\x1b[3;1Hin region", "\r\n\r\n\r\nscrolled"},
	} {
		t.Run(name, func(t *testing.T) {
			s := NewScreen(20, 5, 1<<16)
			defer s.Close()
			if err := s.Write([]byte(tc.out)); err != nil {
				t.Fatal(err)
			}
			n++
			orig, redraw := filepath.Join(dir, "o"+string(rune('a'+n))), filepath.Join(dir, "r"+string(rune('a'+n)))
			if err := os.WriteFile(orig, []byte(tc.out+tc.probe), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(redraw, append(append([]byte("\x1b[45m"), s.Redraw(nil, true)...), tc.probe...), 0o644); err != nil {
				t.Fatal(err)
			}
			a, b := "o"+string(rune('a'+n)), "r"+string(rune('a'+n))
			pane(a, orig)
			pane(b, redraw)
			deadline := time.Now().Add(10 * time.Second)
			for {
				sa, sb := screen(a), screen(b)
				if sa == sb {
					return
				}
				if time.Now().After(deadline) {
					t.Fatalf("tmux shows the redraw differently:\nstream %q\n%s\nredraw %q\n%s", tc.out+tc.probe, sa, s.Redraw(nil, true), sb)
				}
				time.Sleep(20 * time.Millisecond) // tmux has no event to wait on: poll its screens
			}
		})
	}
}
