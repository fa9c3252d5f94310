package tests

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// silenceNotice is attach's line about input the host has not answered.
var silenceNotice = regexp.MustCompile(`sidecar: no answer from the host for (\d+) s`)

// TestAttachSaysNoAnswer: attach runs in tmux through a relay whose link
// goes silent (a black hole: nothing gets through, nothing is reset).
// While nothing is typed nothing is said, however long the silence. Input
// typed into the hole is not answered: within about 3 s a status line
// says "no answer from the host for N s", and N grows. When the link
// comes back the host answers the input and the line goes, though the
// input printed nothing (the shell echoes nothing: stty -echo), and the
// session carries on: the keepalive never had to give up on it.
func TestAttachSaysNoAnswer(t *testing.T) {
	t.Parallel()
	tm := startTmux(t)
	s := startServer(t, "")
	relay, url := relayed(t, s)
	tm.session("a", append([]string{"attach", url}, s.connArgs()...)...)
	tm.waitScreen("a", "prompt", func(s string) bool { return strings.Contains(s, "XPROMPT>") })
	tm.typeKeys("a", "stty -echo; echo QUIET-$((1+1))\r")
	tm.waitScreen("a", "echo off", func(s string) bool { return strings.Contains(s, "QUIET-2") })

	relay.Stall(true)
	// Idle in the hole for twice the time input is given: the link is
	// silent, but nothing was asked of it (the silence's length is what
	// is tested, not a synchronization).
	<-time.After(4 * time.Second)
	if scr := tm.screen("a"); silenceNotice.MatchString(scr) {
		t.Fatalf("a notice on an idle link:\n%s", scr)
	}

	typed := time.Now()
	tm.typeKeys("a", "true") // not echoed: no output will answer it
	scr := tm.waitScreen("a", "the notice", silenceNotice.MatchString)
	if took := time.Since(typed); took > 4*time.Second {
		t.Errorf("the notice came %v after the input, want about 3 s at most", took.Round(time.Millisecond))
	}
	first, _ := strconv.Atoi(silenceNotice.FindStringSubmatch(scr)[1])
	tm.waitScreen("a", "the notice updated", func(s string) bool {
		m := silenceNotice.FindStringSubmatch(s)
		n := -1
		if m != nil {
			n, _ = strconv.Atoi(m[1])
		}
		return n > first
	})

	relay.Stall(false)
	tm.waitScreen("a", "the notice gone", func(s string) bool { return !silenceNotice.MatchString(s) })
	tm.typeKeys("a", "; echo BACK-$((3+4))\r")
	scr = tm.waitScreen("a", "output after the hole", func(s string) bool { return strings.Contains(s, "BACK-7") })
	if silenceNotice.MatchString(scr) || strings.Contains(scr, "reconnecting") {
		t.Errorf("after the hole:\n%s", scr)
	}
}
