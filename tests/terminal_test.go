package tests

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/sidecar-dev/sidecar/client"
	"github.com/sidecar-dev/sidecar/rpc"
)

// TestRunExitStatusAndOutput: `sidecar run` copies the command's output to
// a non-TTY stdout with "\r\n" turned into "\n", and exits with its status.
func TestRunExitStatusAndOutput(t *testing.T) {
	t.Parallel()
	s := startServer(t, "")
	out, errOut, code := s.run(t, append(append([]string{"run", s.url}, s.connArgs()...), "--", "sh", "-c", "echo $((6*7)); exit 3")...)
	if out != "42\n" {
		t.Errorf("stdout = %q, want %q (stderr %q)", out, "42\n", errOut)
	}
	if code != 3 {
		t.Errorf("exit status = %d, want 3 (stderr %q)", code, errOut)
	}
}

// TestRunLargeOutputComplete: a multi-megabyte output arrives complete and
// in order (windowed delivery end to end through the CLI).
func TestRunLargeOutputComplete(t *testing.T) {
	t.Parallel()
	s := startServer(t, "")
	want, err := exec.Command("seq", "1", "400000").Output()
	if err != nil {
		t.Fatal(err)
	}
	p := start(t, append(append([]string{"run", s.url}, s.connArgs()...), "--", "seq", "1", "400000")...)
	if code := p.wait(t, 60*time.Second); code != 0 {
		t.Fatalf("exit status %d, stderr %q", code, p.stderr.String())
	}
	got := p.stdout.Bytes()
	if sha256.Sum256(got) != sha256.Sum256(want) {
		t.Fatalf("stdout differs from local seq: %d bytes, want %d; first difference at %d", len(got), len(want), firstDiff(got, want))
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// ptyProc is a sidecar client running inside a PTY (an interactive user).
type ptyProc struct {
	cmd  *exec.Cmd
	ptmx *os.File
	out  *streamBuf
	done chan struct{}
	err  error
	read chan struct{}
}

func startInPTY(t testing.TB, args ...string) *ptyProc {
	t.Helper()
	return startInPTYSize(t, 80, 24, args...)
}

// startInPTYSize is startInPTY in a PTY of cols x rows.
func startInPTYSize(t testing.TB, cols, rows uint16, args ...string) *ptyProc {
	t.Helper()
	cmd := exec.Command(sidecarBin, args...)
	cmd.Env = cleanEnv()
	return startCmdInPTY(t, cmd, cols, rows)
}

// startCmdInPTY starts cmd in a new PTY of cols x rows, its output
// collected; it is ended (SIGTERM, then SIGKILL) at cleanup.
func startCmdInPTY(t testing.TB, cmd *exec.Cmd, cols, rows uint16) *ptyProc {
	t.Helper()
	ptmx, err := pty.StartWithSize(cmd, &pty.Winsize{Cols: cols, Rows: rows})
	if err != nil {
		t.Fatalf("start in pty: %v", err)
	}
	p := &ptyProc{cmd: cmd, ptmx: ptmx, out: newStreamBuf(), done: make(chan struct{}), read: make(chan struct{})}
	go func() {
		defer close(p.read)
		_, _ = io.Copy(p.out, ptmx) // ends with EIO once the process has exited
	}()
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-p.done:
			case <-time.After(10 * time.Second):
				_ = cmd.Process.Kill()
				<-p.done
			}
		}
		_ = ptmx.Close()
		<-p.read
	})
	return p
}

func (p *ptyProc) typeText(t testing.TB, s string) {
	t.Helper()
	if _, err := p.ptmx.Write([]byte(s)); err != nil {
		t.Fatalf("typing %q: %v", s, err)
	}
}

// waitNotice waits (counting from offset from) for a notice of attach in
// its long form, or the short one it shows instead when the notice comes
// in the middle of an escape sequence or on the alternate screen; it
// returns the index just past it.
func (p *ptyProc) waitNotice(t testing.TB, what string, from int, long, short string) int {
	t.Helper()
	idx := -1
	text, ok := p.out.waitMatch(waitTimeout, func(text string) bool {
		if from > len(text) {
			return false
		}
		for _, sub := range []string{long, short} {
			if i := strings.Index(text[from:], sub); i >= 0 {
				idx = from + i + len(sub)
				return true
			}
		}
		return false
	})
	if !ok {
		t.Fatalf("%s: neither %q nor %q appeared within %v; got:\n%s", what, long, short, waitTimeout, tail(text, 2000))
	}
	return idx
}

func (p *ptyProc) wait(t testing.TB) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(waitTimeout):
		t.Fatalf("attach did not exit within %v; screen:\n%s", waitTimeout, tail(p.out.String(), 2000))
	}
	// What it wrote last may still be in the PTY: read it to the end
	// (EIO), or its last line is missing from out.
	select {
	case <-p.read:
	case <-time.After(waitTimeout):
		t.Fatalf("the PTY of attach was not read to its end within %v", waitTimeout)
	}
	return exitCode(p.err)
}

// TestAttachInteractive drives `sidecar attach` through a PTY: prompt,
// command output, window-size propagation (SIGWINCH → terminal/resized →
// remote pty), and exit status on `exit`.
func TestAttachInteractive(t *testing.T) {
	t.Parallel()
	s := startServer(t, "")
	a := startInPTY(t, append([]string{"attach", s.url}, s.connArgs()...)...)
	pos := a.out.waitFor(t, "prompt", 0, "XPROMPT> ")
	a.typeText(t, "echo hi\r")
	pos = a.out.waitFor(t, "echo hi", pos, "\r\nhi\r\n")
	pos = a.out.waitFor(t, "prompt after echo", pos, "XPROMPT> ")

	// The initial size is the outer PTY's.
	a.typeText(t, "stty size\r")
	pos = a.out.waitFor(t, "initial size", pos, "\r\n24 80\r\n")
	pos = a.out.waitFor(t, "prompt after stty", pos, "XPROMPT> ")

	if err := pty.Setsize(a.ptmx, &pty.Winsize{Rows: 50, Cols: 132}); err != nil {
		t.Fatal(err)
	}
	// SIGWINCH reaches attach asynchronously: ask again until the remote
	// side reports the new size (each try is bounded; the total too).
	deadline := time.Now().Add(waitTimeout)
	for {
		a.typeText(t, "stty size\r")
		from := pos
		text, ok := a.out.waitMatch(3*time.Second, func(text string) bool {
			return strings.Contains(text[from:], "\r\n50 132\r\n")
		})
		if ok {
			pos = strings.Index(text[from:], "\r\n50 132\r\n") + from
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("remote size never became 50 132; screen:\n%s", tail(text, 2000))
		}
		pos = len(text)
	}
	a.out.waitFor(t, "prompt after resize", pos, "XPROMPT> ")
	a.typeText(t, "exit\r")
	if code := a.wait(t); code != 0 {
		t.Fatalf("attach exit status = %d, want 0; screen:\n%s", code, tail(a.out.String(), 2000))
	}
}

var reattachHint = regexp.MustCompile(`detached from ahp-terminal:/(\S+); reattach with: \S*sidecar attach (\S+) (\S+)[^\r\n]*\r?\n`)

// TestAttachDetachReattach: "~." after Enter detaches (exit 0, "detached"),
// the terminal keeps running (sidecar ls), and `sidecar attach URL ID`
// reattaches to the same shell.
func TestAttachDetachReattach(t *testing.T) {
	t.Parallel()
	s := startServer(t, "")
	a := startInPTY(t, append([]string{"attach", s.url}, s.connArgs()...)...)
	pos := a.out.waitFor(t, "prompt", 0, "XPROMPT> ")
	// A marker in the shell's environment shows the reattach reaches the
	// same shell.
	a.typeText(t, "MARK=same-shell-7\r")
	pos = a.out.waitFor(t, "prompt after MARK", pos+1, "XPROMPT> ")
	a.typeText(t, "\r~.")
	if code := a.wait(t); code != 0 {
		t.Fatalf("detach: exit status %d, want 0; screen:\n%s", code, tail(a.out.String(), 2000))
	}
	<-a.read
	screen := a.out.String()
	if !strings.Contains(screen[pos:], "detached") {
		t.Fatalf("detach did not print \"detached\"; screen:\n%s", tail(screen, 2000))
	}
	m := reattachHint.FindStringSubmatch(screen)
	if m == nil {
		t.Fatalf("no reattach hint; screen:\n%s", tail(screen, 2000))
	}
	id := m[1]
	if m[2] != s.url || m[3] != id {
		t.Errorf("reattach hint = %q, want URL %s and id %s", m[0], s.url, id)
	}

	// lsClaim returns the terminal's claim column in sidecar ls.
	lsClaim := func() string {
		t.Helper()
		out, errOut, code := s.run(t, append([]string{"ls", s.url}, s.connArgs()...)...)
		if code != 0 {
			t.Fatalf("ls: exit %d, stderr %q", code, errOut)
		}
		for _, line := range strings.Split(out, "\n") {
			// A lost client is listed as "ID (away)" under ATTACHED.
			f := strings.Fields(strings.ReplaceAll(line, " (away)", ""))
			if len(f) < 3 || f[0] != id {
				continue
			}
			// Running: attached or detached (which one depends on
			// whether the host sends "attached").
			if st := f[len(f)-1]; st != "attached" && st != "detached" {
				t.Errorf("ls shows %q, want the terminal running (attached or detached)", line)
			}
			return f[len(f)-3]
		}
		t.Fatalf("ls does not list %s:\n%s", id, out)
		return ""
	}
	first := lsClaim()
	if !strings.HasPrefix(first, "client:") {
		t.Fatalf("claim %q, want the creating client's", first)
	}

	b := startInPTY(t, append([]string{"attach", s.url, id}, s.connArgs()...)...)
	// Reattaching replays the terminal's scrollback first.
	b.out.waitFor(t, "scrollback on reattach", 0, "XPROMPT> MARK=same-shell-7\r\n")
	b.typeText(t, "echo back $MARK\r")
	pos = b.out.waitFor(t, "echo back", 0, "\r\nback same-shell-7\r\n")
	b.out.waitFor(t, "prompt after back", pos, "XPROMPT> ")
	// The reattached client took the claim over from the one that left,
	// so its output is paced, not skipped.
	taken := lsClaim()
	if taken == first || !strings.HasPrefix(taken, "client:") {
		t.Fatalf("claim after reattach %q, want another client's than %q", taken, first)
	}
	// A second attach while b is connected shares the terminal and says so.
	c := startInPTY(t, append([]string{"attach", s.url, id}, s.connArgs()...)...)
	c.out.waitFor(t, "shared notice", 0, "another connected client holds ahp-terminal:/"+id)
	c.typeText(t, "\r~.")
	if code := c.wait(t); code != 0 {
		t.Fatalf("second attach detach: exit status %d; screen:\n%s", code, tail(c.out.String(), 2000))
	}
	if got := lsClaim(); got != taken {
		t.Fatalf("claim %q after a sharing attach, want still %q", got, taken)
	}
	b.typeText(t, "exit\r")
	if code := b.wait(t); code != 0 {
		t.Fatalf("reattached shell: exit status %d, want 0; screen:\n%s", code, tail(b.out.String(), 2000))
	}
	// Exiting the shell ends (and disposes) the terminal.
	out, _, _ := s.run(t, append([]string{"ls", s.url}, s.connArgs()...)...)
	if strings.Contains(out, id+" ") && (strings.Contains(out, "attached") || strings.Contains(out, "detached")) {
		t.Errorf("terminal %s still running after exit:\n%s", id, out)
	}
}

// TestTwoClientsShareTerminal: with the Go client library, two connections
// subscribe to one terminal; input from the second (not the claim holder)
// reaches the program and both see its output and its exit status.
func TestTwoClientsShareTerminal(t *testing.T) {
	t.Parallel()
	s := startServer(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	dial := func() *client.Conn {
		c, err := client.Dial(ctx, s.url, client.Options{Token: s.token, CertHash: s.hash})
		if err != nil {
			t.Fatalf("dial: %v", err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	ca, cb := dial(), dial()
	uri := "ahp-terminal:/shared-1"
	if err := ca.Call(ctx, rpc.MethodCreateTerminal, rpc.CreateTerminalParams{
		Channel: uri, Command: []string{"sh", "-c", "read x; echo got-$x; exit 5"},
	}, nil); err != nil {
		t.Fatalf("createTerminal: %v", err)
	}
	ta, err := client.OpenTerminal(ctx, ca, uri)
	if err != nil {
		t.Fatalf("open A: %v", err)
	}
	tb, err := client.OpenTerminal(ctx, cb, uri)
	if err != nil {
		t.Fatalf("open B: %v", err)
	}
	type result struct {
		code *int
		err  error
	}
	outA, outB := newStreamBuf(), newStreamBuf()
	resA, resB := make(chan result, 1), make(chan result, 1)
	go func() { c, err := ta.Copy(ctx, outA, true); resA <- result{c, err} }()
	go func() { c, err := tb.Copy(ctx, outB, true); resB <- result{c, err} }()
	if err := tb.Input(ctx, []byte("hello\r")); err != nil {
		t.Fatalf("input from B: %v", err)
	}
	for name, out := range map[string]*streamBuf{"A": outA, "B": outB} {
		out.waitFor(t, "client "+name, 0, "got-hello\r\n")
	}
	for name, ch := range map[string]chan result{"A": resA, "B": resB} {
		select {
		case r := <-ch:
			if r.err != nil || r.code == nil || *r.code != 5 {
				t.Errorf("client %s: Copy = (%v, %v), want exit code 5", name, r.code, r.err)
			}
		case <-time.After(waitTimeout):
			t.Fatalf("client %s never saw the exit", name)
		}
	}
	var re *rpc.Error
	// The exited terminal is still listed until disposed; dispose it.
	if err := ca.Call(ctx, rpc.MethodDisposeTerminal, rpc.ChannelParams{Channel: uri}, nil); err != nil && !(errors.As(err, &re) && re.Code == rpc.CodeNotFound) {
		t.Errorf("dispose: %v", err)
	}
}

// TestRunInputComplete: stdin of `sidecar run` reaches the program
// complete (client → host windowed input), and its end is end of file.
func TestRunInputComplete(t *testing.T) {
	t.Parallel()
	s := startServer(t, "")
	// Base64 lines (short, printable) so the PTY's canonical mode passes
	// them through unchanged.
	var in strings.Builder
	for i := 0; in.Len() < 600000; i++ {
		fmt.Fprintf(&in, "line %06d %s\n", i, strings.Repeat("abcdefghij", 6))
	}
	input := in.String()
	sum := sha256.Sum256([]byte(input))
	want := hex.EncodeToString(sum[:]) + "  -\n"
	p := exec.Command(sidecarBin, append(append([]string{"run", s.url}, s.connArgs()...), "--", "sh", "-c", "stty -echo; sha256sum")...)
	p.Env = cleanEnv()
	p.Stdin = strings.NewReader(input)
	out, errOut := newStreamBuf(), newStreamBuf()
	p.Stdout, p.Stderr = out, errOut
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- p.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: %v, stderr %q", err, errOut.String())
		}
	case <-time.After(waitTimeout):
		_ = p.Process.Kill()
		<-done
		t.Fatalf("run did not finish within %v; stdout tail %q", waitTimeout, tail(out.String(), 300))
	}
	if got := out.String(); !strings.HasSuffix(got, want) {
		t.Errorf("program saw different input: output ends %q, want %q", tail(got, 200), want)
	}
}

// attachNewShell attaches a new shell in a PTY, waits for its prompt, and
// returns it with the terminal's id as sidecar ls shows it (the only one).
func attachNewShell(t *testing.T, s *server) (*ptyProc, string) {
	t.Helper()
	a := startInPTY(t, append([]string{"attach", s.url}, s.connArgs()...)...)
	a.out.waitFor(t, "prompt", 0, "XPROMPT> ")
	out, errOut, code := s.run(t, append([]string{"ls", s.url}, s.connArgs()...)...)
	if code != 0 {
		t.Fatalf("ls: exit %d, stderr %q", code, errOut)
	}
	lines := strings.Split(out, "\n")
	if len(lines) < 2 || len(strings.Fields(lines[1])) == 0 {
		t.Fatalf("ls lists no terminal:\n%s", out)
	}
	return a, strings.Fields(lines[1])[0]
}

// TestAttachSharedTakesOver: a second attach shares a terminal (and says
// so); when the first detaches, the host passes the claim on and the
// sharing client says it holds the terminal now: its output is paced, so
// a flood arrives whole, with no "output skipped".
func TestAttachSharedTakesOver(t *testing.T) {
	t.Parallel()
	s := startServer(t, "")
	a, id := attachNewShell(t, s)
	b := startInPTY(t, append([]string{"attach", s.url, id}, s.connArgs()...)...)
	pos := b.out.waitFor(t, "shared notice", 0, "another connected client holds ahp-terminal:/"+id)
	// A sharer's window size does not resize the terminal under its
	// holder; once it holds the terminal, its size wins.
	if err := pty.Setsize(b.ptmx, &pty.Winsize{Rows: 50, Cols: 132}); err != nil {
		t.Fatal(err)
	}
	a.typeText(t, "stty size\r")
	apos := a.out.waitFor(t, "holder's size", 0, "stty size\r\n")
	apos = a.out.waitFor(t, "holder's size", apos, "24 80\r\n")
	apos = a.out.waitFor(t, "prompt after stty", apos, "XPROMPT> ")
	// Enter, and its prompt seen, before the detach: a prompt still to
	// come would land in the middle of what b types next.
	a.typeText(t, "\r")
	a.out.waitFor(t, "prompt after Enter", apos, "XPROMPT> ")
	a.typeText(t, "~.")
	if code := a.wait(t); code != 0 {
		t.Fatalf("detach: exit status %d; screen:\n%s", code, tail(a.out.String(), 2000))
	}
	pos = b.out.waitFor(t, "holder notice", pos, "you hold ahp-terminal:/"+id+" now")
	b.typeText(t, "stty size\r")
	pos = b.out.waitFor(t, "new holder's size", pos, "\r\n50 132\r\n")
	pos = b.out.waitFor(t, "prompt after stty", pos, "XPROMPT> ") // no typeahead before it
	const n = 200000
	b.typeText(t, "seq 1 200000; echo DONE-$((6*7))\r")
	start := b.out.waitFor(t, "command echo", pos, "echo DONE-$((6*7))\r\n")
	end := b.out.waitFor(t, "end of the flood", start, "\r\nDONE-42\r\n")
	screen := b.out.String()
	flood := screen[start : end-len("\r\nDONE-42\r\n")]
	if strings.Contains(flood, "output skipped") {
		t.Fatalf("the new holder skipped output: %s", tail(flood, 500))
	}
	lines := strings.Split(flood, "\r\n")
	if len(lines) != n {
		t.Fatalf("%d lines of seq output, want %d; end: %q", len(lines), n, tail(flood, 200))
	}
	for i, l := range lines {
		if l != strconv.Itoa(i+1) {
			t.Fatalf("line %d is %q, want %d", i+1, l, i+1)
		}
	}
	b.typeText(t, "exit\r")
	if code := b.wait(t); code != 0 {
		t.Fatalf("shell exit: status %d", code)
	}
}

// TestAttachTakeOverEscape: ~t in an attach that shares a terminal takes
// it over from a holder that is still connected: the taker says so and
// its size wins; the old holder is told who took it, shares it (its
// resize no longer applies), and takes it back with ~t.
func TestAttachTakeOverEscape(t *testing.T) {
	t.Parallel()
	s := startServer(t, "")
	a, id := attachNewShell(t, s)
	b := startInPTYSize(t, 132, 50, append([]string{"attach", s.url, id}, s.connArgs()...)...)
	bpos := b.out.waitFor(t, "shared notice", 0, "another connected client holds ahp-terminal:/"+id)
	b.typeText(t, "~t")
	bpos = b.waitNotice(t, "taker's notice", bpos, "you took ahp-terminal:/"+id+" over: you hold it now", "you took the terminal over")
	apos := a.waitNotice(t, "old holder told", 0, " took ahp-terminal:/"+id+" over; you share it now", "another client took the terminal over")
	// The old holder's window changes: it shares now, so the size stays the taker's.
	if err := pty.Setsize(a.ptmx, &pty.Winsize{Rows: 30, Cols: 100}); err != nil {
		t.Fatal(err)
	}
	b.typeText(t, "echo S1 $(stty size)\r")
	bpos = b.out.waitFor(t, "taker's size", bpos, "\r\nS1 50 132\r\n")
	apos = a.out.waitFor(t, "taker's size seen by the old holder", apos, "\r\nS1 50 132\r\n")
	a.out.waitFor(t, "prompt", apos, "XPROMPT> ")
	a.typeText(t, "~t")
	apos = a.waitNotice(t, "taking it back", apos, "you took ahp-terminal:/"+id+" over: you hold it now", "you took the terminal over")
	b.waitNotice(t, "the taker told", bpos, " took ahp-terminal:/"+id+" over; you share it now", "another client took the terminal over")
	a.typeText(t, "echo S2 $(stty size)\r")
	a.out.waitFor(t, "the old holder's size again", apos, "\r\nS2 30 100\r\n")
	a.typeText(t, "exit\r")
	if code := a.wait(t); code != 0 {
		t.Fatalf("shell exit: status %d", code)
	}
}

// TestKillEndsAttach: `sidecar kill` of a terminal someone is attached to
// ends that attach (the shell's hangup: 129) instead of leaving it
// waiting for output forever.
func TestKillEndsAttach(t *testing.T) {
	t.Parallel()
	s := startServer(t, "")
	a, id := attachNewShell(t, s)
	if _, errOut, code := s.run(t, append([]string{"kill", s.url, id}, s.connArgs()...)...); code != 0 {
		t.Fatalf("kill: exit %d, stderr %q", code, errOut)
	}
	if code := a.wait(t); code != 129 {
		t.Fatalf("attach after kill: exit status %d, want 129 (SIGHUP); screen:\n%s", code, tail(a.out.String(), 2000))
	}
	// Said, not only the status: by whom when the host sends disposedBy
	// (kill's clientId is its own, random), else without it.
	said := regexp.MustCompile(`sidecar: terminal ahp-terminal:/` + regexp.QuoteMeta(strings.TrimPrefix(id, "ahp-terminal:/")) + ` was disposed( by client \S+)?\r\n`)
	if out := a.out.String(); !said.MatchString(out) {
		t.Errorf("attach after kill did not say the terminal was disposed; screen:\n%s", tail(out, 2000))
	}
}

// TestKillEndsJobs: `sidecar kill` ends the jobs the terminal's shell
// started, not only the shell: a background job and a foreground one,
// each in a process group of its own (job control). They outlived it,
// reparented to init (a pipeline kept burning CPU for 20 minutes).
func TestKillEndsJobs(t *testing.T) {
	t.Parallel()
	s := startServer(t, "")
	a, id := attachNewShell(t, s)
	a.typeText(t, "sleep 4243 & echo BG $!\r")
	a.typeText(t, "sh -c 'echo FG $$; exec sleep 4242'\r")
	var bg, fg int
	if _, ok := a.out.waitMatch(waitTimeout, func(out string) bool {
		m1 := regexp.MustCompile(`\bBG (\d+)\r`).FindStringSubmatch(out)
		m2 := regexp.MustCompile(`\bFG (\d+)\r`).FindStringSubmatch(out)
		if m1 == nil || m2 == nil {
			return false
		}
		bg, _ = strconv.Atoi(m1[1])
		fg, _ = strconv.Atoi(m2[1])
		return true
	}); !ok {
		t.Fatalf("no job pids; screen:\n%s", tail(a.out.String(), 2000))
	}
	t.Cleanup(func() { _ = syscall.Kill(bg, syscall.SIGKILL); _ = syscall.Kill(fg, syscall.SIGKILL) })
	if _, errOut, code := s.run(t, append([]string{"kill", s.url, id}, s.connArgs()...)...); code != 0 {
		t.Fatalf("kill: exit %d, stderr %q", code, errOut)
	}
	for what, pid := range map[string]int{"background": bg, "foreground": fg} {
		if !exitsWithin(pid, waitTimeout) {
			t.Errorf("the %s job (pid %d) still runs after sidecar kill", what, pid)
		}
	}
	a.wait(t)
}
