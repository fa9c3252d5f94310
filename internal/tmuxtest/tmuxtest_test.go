package tmuxtest

import (
	"strings"
	"testing"
	"time"
)

// TestCapture: a pane's capture holds what was printed, without the SGR
// of trailing blanks, then the fields asked for.
func TestCapture(t *testing.T) {
	s := Start(t, nil)
	s.Must("new-session", "-d", "-s", "a", "-x", "20", "-y", "3", "--", "sh", "-c", `printf '\033[1mhi\033[m\033[44m  \033[m'; exec sleep 600`)
	want := "\x1b[1mhi\n\n\ncursor 4,0"
	deadline := time.Now().Add(10 * time.Second)
	for got := ""; ; time.Sleep(20 * time.Millisecond) { // tmux has no event to wait on
		if got = s.Capture("a", "cursor #{cursor_x},#{cursor_y}"); strings.TrimSpace(got) == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("capture %q, want %q", got, want)
		}
	}
}
