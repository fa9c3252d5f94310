package tests

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sidecar-dev/sidecar/internal/tmuxtest"
)

// tmuxServer is a private tmux server (internal/tmuxtest): an
// independent terminal emulator the sidecar's client runs in, whose
// screen capture-pane reads back.
type tmuxServer struct {
	*tmuxtest.Server
	t *testing.T
}

// tmuxFields is what a screen comparison reads of a pane besides its
// cells: cursor, alternate screen, the modes tmux reports.
const tmuxFields = "cursor #{cursor_x},#{cursor_y} visible #{cursor_flag} alternate #{alternate_on} " +
	"insert #{insert_flag} cursor-keys #{keypad_cursor_flag} keypad #{keypad_flag} " +
	"mouse #{mouse_any_flag}#{mouse_button_flag}#{mouse_standard_flag} sgr-mouse #{mouse_sgr_flag} " +
	"wrap #{wrap_flag} origin #{origin_flag} region #{scroll_region_upper}-#{scroll_region_lower}"

// startTmux starts a tmux server for t (its commands without the test's
// SIDECAR_* settings), or skips t where tmux is missing (under CI=true it
// fails instead).
func startTmux(t *testing.T) *tmuxServer {
	t.Helper()
	return &tmuxServer{Server: tmuxtest.Start(t, cleanEnv()), t: t}
}

// session starts session name, an 80×24 terminal running the sidecar
// binary with args; the pane stays once it exits (its last screen can be
// read).
func (ts *tmuxServer) session(name string, args ...string) {
	ts.t.Helper()
	ts.Must(append([]string{"new-session", "-d", "-s", name, "-x", "80", "-y", "24", "--", sidecarBin}, args...)...)
	ts.Must("set-option", "-t", name, "remain-on-exit", "on")
}

// screen returns the pane's capture (tmuxtest.Server.Capture): cells with
// attributes, then cursor and modes (tmuxFields).
func (ts *tmuxServer) screen(name string) string {
	ts.t.Helper()
	return ts.Capture(name, tmuxFields)
}

// waitScreen waits (bounded by waitTimeout) until match holds for the
// pane's screen, and returns it.
func (ts *tmuxServer) waitScreen(name, what string, match func(string) bool) string {
	ts.t.Helper()
	deadline := time.Now().Add(waitTimeout)
	var s string
	for {
		s = ts.screen(name)
		if match(s) {
			return s
		}
		if time.Now().After(deadline) {
			ts.t.Fatalf("tmux pane %s: no %s within %v; screen:\n%s", name, what, waitTimeout, s)
		}
		time.Sleep(20 * time.Millisecond) // tmux has no event to wait on: poll its screen
	}
}

// typeKeys types text (literally) into the pane.
func (ts *tmuxServer) typeKeys(name, text string) {
	ts.t.Helper()
	ts.Must("send-keys", "-t", name, "-l", text)
}

// startTmuxAttach starts a server and, in tmux session "a" (80×24),
// `sidecar attach` of a new shell, once its prompt shows; script is
// fullScreenScript's file.
func startTmuxAttach(t *testing.T) (tm *tmuxServer, s *server, script string) {
	t.Helper()
	tm = startTmux(t)
	s = startServer(t, "")
	script = filepath.Join(t.TempDir(), "fullscreen.sh")
	if err := os.WriteFile(script, []byte(fullScreenScript), 0o644); err != nil {
		t.Fatal(err)
	}
	tm.session("a", append([]string{"attach", s.url}, s.connArgs()...)...)
	tm.waitScreen("a", "prompt", func(s string) bool { return strings.Contains(s, "XPROMPT>") }) // capture-pane trims the space
	return tm, s, script
}

// TestReattachTmuxCapture is the check through an independent
// terminal: `sidecar attach` runs in tmux, a full-screen program draws a
// title once and then redraws a counter far past the scrollback bound;
// after `~.` and a reattach in a fresh tmux terminal of the same size,
// tmux's capture (cells with their attributes, cursor, alternate screen,
// modes) equals the capture before the detach.
func TestReattachTmuxCapture(t *testing.T) {
	t.Parallel()
	tm, s, script := startTmuxAttach(t)
	tm.typeKeys("a", "sh "+script+"\r")
	// "counter done" is the program's last output (it sleeps then): once
	// tmux shows it, it shows everything before it.
	before := tm.waitScreen("a", "counter done", func(s string) bool { return strings.Contains(s, "counter done") })
	if !strings.Contains(before, "TITLE at row 5") || !strings.Contains(before, "alternate 1") {
		t.Fatalf("before the detach the screen is not the program's:\n%s", before)
	}
	tm.typeKeys("a", "\r~.")
	tm.waitScreen("a", "exit", func(string) bool {
		return strings.TrimSpace(tm.Must("display-message", "-p", "-t", "a", "#{pane_dead}")) == "1"
	})
	all := tm.Must("capture-pane", "-p", "-J", "-S", "-", "-t", "a")
	m := reattachHint.FindStringSubmatch(all + "\n")
	if m == nil {
		t.Fatalf("no reattach hint; pane:\n%s", tail(all, 2000))
	}
	tm.session("b", append([]string{"attach", s.url, m[1]}, s.connArgs()...)...)
	var after string
	deadline := time.Now().Add(waitTimeout)
	for after = tm.screen("b"); after != before; after = tm.screen("b") {
		if time.Now().After(deadline) {
			t.Fatalf("tmux capture after the reattach differs from the one before the detach:\n%s", lineDiff(after, before))
		}
		time.Sleep(20 * time.Millisecond)
	}
	tm.typeKeys("b", "\x03")
	tm.typeKeys("b", "\r~.")
}

// lineDiff lists the lines where got differs from want.
func lineDiff(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	var d []string
	for i := range max(len(g), len(w)) {
		var a, b string
		if i < len(g) {
			a = g[i]
		}
		if i < len(w) {
			b = w[i]
		}
		if a != b {
			d = append(d, fmt.Sprintf("line %d:\n got %q\nwant %q", i+1, a, b))
		}
	}
	return strings.Join(d, "\n")
}

// TestSharerBehindTmuxCapture: the same through tmux for a viewer that
// fell behind the journal. Two `sidecar attach` share a terminal, each in
// its own tmux terminal of 80×24; the sharer's connection is cut (and
// reconnects refused) while the holder's full-screen program writes far
// past the journal; once it may reconnect it resumes from a snapshot, and
// its capture equals the holder's (the last row aside: attach's own
// "sidecar: resumed" is drawn over it, on the alternate screen).
func TestSharerBehindTmuxCapture(t *testing.T) {
	t.Parallel()
	tm, s, script := startTmuxAttach(t)
	out, errOut, code := s.run(t, append([]string{"ls", s.url}, s.connArgs()...)...)
	lines := strings.Split(out, "\n")
	if code != 0 || len(lines) < 2 || len(strings.Fields(lines[1])) == 0 {
		t.Fatalf("ls: exit %d, %q, stderr %q", code, out, errOut)
	}
	id := strings.Fields(lines[1])[0]
	relay, url := relayed(t, s)
	tm.session("b", append([]string{"attach", url, id}, s.connArgs()...)...)
	tm.waitScreen("b", "shared notice", func(s string) bool { return strings.Contains(s, "another connected client holds") })
	relay.Refuse(true)
	relay.Cut()
	tm.typeKeys("a", "sh "+script+"\r")
	holder := tm.waitScreen("a", "counter done", func(s string) bool { return strings.Contains(s, "counter done") })
	relay.Refuse(false)
	withoutLastRow := func(screen string) string {
		l := strings.Split(screen, "\n")
		return strings.Join(append(l[:23:23], l[24:]...), "\n") // rows 1-23, then the fields
	}
	want := withoutLastRow(holder)
	var got string
	deadline := time.Now().Add(waitTimeout)
	for got = withoutLastRow(tm.screen("b")); got != want; got = withoutLastRow(tm.screen("b")) {
		if time.Now().After(deadline) {
			t.Fatalf("the sharer's tmux capture after its resume is not the holder's:\n%s", lineDiff(got, want))
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The host's log line may reach us after the screen does.
	s.p.stderr.waitFor(t, "the host resuming the sharer from a snapshot", 0, "ahp-terminal:/"+id+" snapshot")
}
