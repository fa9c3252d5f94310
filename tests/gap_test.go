package tests

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sidecar-dev/sidecar/client"
)

// TestRunStoppedPagesGap (issue 16, seed 003 "catch up by cursor"): a
// `sidecar run --ordinary` that is stopped (SIGSTOP: it reads nothing)
// while its program prints 2,000,000 lines gets a channel/gap once it
// runs again, reads what it missed from the journal with channel/page,
// and writes every line exactly once, in order. Before, it printed
// "[sidecar: output skipped …]" and lost what the gap covered.
func TestRunStoppedPagesGap(t *testing.T) {
	t.Parallel()
	// A journal that holds the whole output (64 MiB per terminal); a
	// small FIFO, so the backlog beyond the socket buffers collapses.
	s := startServer(t, "journal {\n  max_bytes = 4294967296\n}\ndelivery {\n  ordinary_queue_messages = 16\n}\n")
	const lines = 2000000
	p := runStopped(t, s, lines)
	var want strings.Builder
	want.WriteString("ready\n")
	for i := 1; i <= lines; i++ {
		fmt.Fprintf(&want, "%d\n", i)
	}
	got := strings.ReplaceAll(p.stdout.String(), "\r\n", "\n")
	if got != want.String() {
		i := 0
		for i < len(got) && i < len(want.String()) && got[i] == want.String()[i] {
			i++
		}
		t.Fatalf("run wrote %d bytes, want %d; first difference at %d: %q", len(got), want.Len(), i, tail(got[:min(len(got), i+200)], 400))
	}
	// It did get a gap and page (the host logs each page at debug).
	if logs := s.p.stderr.String(); !strings.Contains(logs, `"@message":"channel page"`) {
		t.Errorf("the host logged no channel/page: the test did not make a gap")
	} else {
		t.Logf("%d channel/page requests served", strings.Count(logs, `"@message":"channel page"`))
	}
}

// TestRunStoppedPastJournal: when the journal no longer reaches back to
// where a stopped `sidecar run --ordinary` was (-32051), it subscribes
// again and writes, after what it had, the reset to a plain terminal, the
// notice and the terminal's screen from the fresh snapshot (its redraw):
// it ends with the program's last lines, never with a hole it does not
// mark.
func TestRunStoppedPastJournal(t *testing.T) {
	t.Parallel()
	// The journal's smallest share (256 KiB per terminal) and a small
	// FIFO: 2,000,000 lines overrun both.
	s := startServer(t, "delivery {\n  ordinary_queue_messages = 16\n}\n")
	const lines = 2000000
	p := runStopped(t, s, lines)
	got := strings.ReplaceAll(p.stdout.String(), "\r\n", "\n")
	const notice = "\n[sidecar: output skipped: the terminal's journal no longer held it]\n"
	before, after, ok := strings.Cut(got, client.TerminalReset+notice)
	if !ok || strings.Count(got, notice) != 1 {
		t.Fatalf("run's output (%d bytes) has %d notices (after a reset), want 1; its end:\n%q", len(got), strings.Count(got, notice), tail(got, 400))
	}
	// Before the notice: the lines from the start, in order, none missing.
	// The skip may start between a line's "\r" and its "\n" (the PTY's
	// "\r\n"), which the skipped part then holds.
	before = strings.TrimSuffix(before, "\r")
	var want strings.Builder
	want.WriteString("ready\n")
	for i := 1; want.Len() < len(before); i++ {
		fmt.Fprintf(&want, "%d\n", i)
	}
	if !strings.HasPrefix(want.String(), before) {
		t.Fatalf("before the notice: %q is not the start of the output", tail(before, 200))
	}
	// After it: the screen's redraw, whose last rows are the last lines.
	e := emulated(strings.ReplaceAll(after, "\n", "\r\n"))
	y := e.Height() - 1
	for y > 0 && emulatedRow(e, y) == "" {
		y--
	}
	for i := range 10 {
		if got, want := emulatedRow(e, y-i), strconv.Itoa(lines-i); got != want {
			t.Fatalf("after the notice (%d bytes, %d lines), row %d is %q, want %q; the text: %q", len(after), strings.Count(after, "\n"), y-i, got, want, tail(after, 300))
		}
	}
	if strings.Count(after, "\n") > 30 {
		t.Fatalf("after the notice: %d lines, want a screen's", strings.Count(after, "\n"))
	}
	// The host answered its channel/page -32051 (logged with the code).
	if logs := s.p.stderr.String(); !strings.Contains(logs, `"code":-32051`) {
		t.Errorf("the host logged no -32051 answer: the test did not overrun the journal")
	}
	t.Logf("%d bytes before the notice, %d after", len(before), len(after))
}

// runStopped runs `sidecar run --ordinary` of a program that prints
// "ready", then 1..lines once released; it stops run (SIGSTOP) before
// releasing the program, lets it finish into the journal, continues run
// (SIGCONT) and waits for its exit (0).
func runStopped(t *testing.T, s *server, lines int) *proc {
	t.Helper()
	dir := t.TempDir()
	goFile, doneFile := filepath.Join(dir, "go"), filepath.Join(dir, "done")
	script := fmt.Sprintf("echo ready; while [ ! -e %s ]; do sleep 0.05; done; seq 1 %d; touch %s", goFile, lines, doneFile)
	p := start(t, append(append([]string{"run", s.url, "--ordinary"}, s.connArgs()...), "--", "sh", "-c", script)...)
	p.stdout.waitFor(t, "run's first line", 0, "ready")
	if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := true
	defer func() {
		if stopped {
			_ = p.cmd.Process.Signal(syscall.SIGCONT)
		}
	}()
	if err := os.WriteFile(goFile, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for stop := time.Now().Add(waitTimeout); ; time.Sleep(20 * time.Millisecond) { // a bounded poll of the file system
		if _, err := os.Stat(doneFile); err == nil {
			break // the whole output is in the journal
		}
		if time.Now().After(stop) {
			t.Fatalf("the program did not finish within %v", waitTimeout)
		}
	}
	if err := p.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	stopped = false
	if code := p.wait(t, waitTimeout); code != 0 {
		t.Fatalf("run exited %d; stderr:\n%s", code, tail(p.stderr.String(), 2000))
	}
	return p
}
