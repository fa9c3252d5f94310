package pty

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const testTimeout = 20 * time.Second

// eventually polls cond every few milliseconds until it holds or timeout
// passes.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-deadline.C:
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		case <-tick.C:
		}
	}
}

// harness reads a Process in the background.
type harness struct {
	t      *testing.T
	p      *Process
	mu     sync.Mutex
	out    bytes.Buffer
	err    error // the error that ended reading
	readed chan struct{}
}

func start(t *testing.T, opts Options) *harness {
	t.Helper()
	p, err := Start(opts)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	h := &harness{t: t, p: p, readed: make(chan struct{})}
	go func() {
		defer close(h.readed)
		buf := make([]byte, 4096)
		for {
			n, err := p.Read(buf)
			h.mu.Lock()
			h.out.Write(buf[:n])
			if err != nil {
				h.err = err
			}
			h.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() {
		if err := p.Kill(100 * time.Millisecond); err != nil {
			t.Errorf("Kill: %v", err)
		}
		select {
		case <-h.readed:
		case <-time.After(testTimeout):
			t.Errorf("reader did not end after Kill")
		}
	})
	return h
}

func (h *harness) output() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.out.String()
}

func (h *harness) waitOutput(substr string) {
	h.t.Helper()
	eventually(h.t, testTimeout, fmt.Sprintf("output %q", substr), func() bool {
		return strings.Contains(h.output(), substr)
	})
}

// waitEnd waits for EOF and the reap and returns the output and exit code.
func (h *harness) waitEnd() (string, int) {
	h.t.Helper()
	select {
	case <-h.readed:
	case <-time.After(testTimeout):
		h.t.Fatalf("no EOF; output so far %q", h.output())
	}
	select {
	case <-h.p.Done():
	case <-time.After(testTimeout):
		h.t.Fatalf("child not reaped")
	}
	h.mu.Lock()
	err := h.err
	h.mu.Unlock()
	if err != io.EOF {
		h.t.Fatalf("read ended with %v, want io.EOF", err)
	}
	code, ok := h.p.ExitCode()
	if !ok {
		h.t.Fatalf("ExitCode not ok after Done")
	}
	return h.output(), code
}

func (h *harness) write(s string) {
	h.t.Helper()
	if _, err := h.p.Write([]byte(s)); err != nil {
		h.t.Fatalf("Write: %v", err)
	}
}

func TestExitCodeAndOutput(t *testing.T) {
	h := start(t, Options{Argv: []string{"/bin/sh", "-c", "echo $((6*7)); exit 3"}})
	out, code := h.waitEnd()
	if out != "42\r\n" {
		t.Errorf("output %q, want %q", out, "42\r\n")
	}
	if code != 3 {
		t.Errorf("exit code %d, want 3", code)
	}
}

func TestExitCodeNotReadyBeforeExit(t *testing.T) {
	h := start(t, Options{Argv: []string{"sleep", "100"}})
	if _, ok := h.p.ExitCode(); ok {
		t.Fatal("ExitCode ok before exit")
	}
	if h.p.Pid() <= 0 {
		t.Fatalf("Pid %d", h.p.Pid())
	}
}

func TestResize(t *testing.T) {
	h := start(t, Options{Argv: []string{"/bin/sh", "-c", "stty size; read x; stty size"}})
	h.waitOutput("24 80\r\n")
	if err := h.p.Resize(132, 50); err != nil {
		t.Fatal(err)
	}
	h.write("go\n")
	out, code := h.waitEnd()
	if !strings.HasSuffix(out, "50 132\r\n") || code != 0 {
		t.Fatalf("output %q code %d, want it to end with \"50 132\\r\\n\", code 0", out, code)
	}
}

func TestInitialSizeAndEnv(t *testing.T) {
	t.Setenv("SIDECAR_LEAK_CHECK", "leaked")
	h := start(t, Options{
		Argv: []string{"/bin/sh", "-c", "stty size; env; pwd"},
		Cols: 100, Rows: 40,
		Env: map[string]string{"FOO": "bar baz"},
		Dir: "/tmp",
	})
	out, code := h.waitEnd()
	if code != 0 {
		t.Fatalf("code %d", code)
	}
	for _, want := range []string{"40 100\r\n", "FOO=bar baz\r\n", "TERM=xterm-256color\r\n", "PATH=" + DefaultPath + "\r\n", "HOME=", "USER=", "LOGNAME=", "SHELL=", "/tmp\r\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "SIDECAR_LEAK_CHECK") {
		t.Errorf("the daemon's environment leaked into the child:\n%s", out)
	}
}

func TestLoginShell(t *testing.T) {
	h := start(t, Options{Shell: "/bin/sh", Login: true, Env: map[string]string{"PS1": "$ "}})
	h.write("echo \"zero=$0\"\n")
	h.waitOutput("zero=-sh")
	h.write("exit 5\n")
	_, code := h.waitEnd()
	if code != 5 {
		t.Fatalf("code %d, want 5", code)
	}
}

func TestInterrupt(t *testing.T) {
	h := start(t, Options{Argv: []string{"sleep", "100"}})
	h.write("\x03")
	_, code := h.waitEnd()
	if code != 128+int(syscall.SIGINT) {
		t.Fatalf("code %d, want %d", code, 128+int(syscall.SIGINT))
	}
}

func TestSignalGroup(t *testing.T) {
	h := start(t, Options{Argv: []string{"sleep", "100"}})
	if err := h.p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	_, code := h.waitEnd()
	if code != 128+int(syscall.SIGTERM) {
		t.Fatalf("code %d, want %d", code, 128+int(syscall.SIGTERM))
	}
}

func TestKillStubbornShell(t *testing.T) {
	h := start(t, Options{Argv: []string{"/bin/sh", "-c", `trap "" HUP TERM; echo ready; while :; do sleep 1; done`}})
	h.waitOutput("ready")
	t0 := time.Now()
	if err := h.p.Kill(200 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(t0); d < 200*time.Millisecond {
		t.Errorf("Kill returned after %v, before the grace period", d)
	}
	select {
	case <-h.p.Done():
	default:
		t.Fatal("not reaped after Kill")
	}
	if code, ok := h.p.ExitCode(); !ok || code != 128+int(syscall.SIGKILL) {
		t.Fatalf("code %d ok %v, want %d", code, ok, 128+int(syscall.SIGKILL))
	}
	if err := h.p.Kill(time.Second); err != nil { // idempotent
		t.Fatal(err)
	}
	<-h.readed
}

func TestKillGraceful(t *testing.T) {
	h := start(t, Options{Argv: []string{"sleep", "100"}})
	t0 := time.Now()
	if err := h.p.Kill(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(t0); d > 5*time.Second {
		t.Errorf("Kill took %v for a process that dies on SIGHUP", d)
	}
	if code, _ := h.p.ExitCode(); code != 128+int(syscall.SIGHUP) && code != 128+int(syscall.SIGTERM) {
		t.Errorf("code %d, want %d or %d", code, 128+int(syscall.SIGHUP), 128+int(syscall.SIGTERM))
	}
}

func TestCloseUnblocksRead(t *testing.T) {
	p, err := Start(Options{Argv: []string{"sleep", "100"}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Kill(100 * time.Millisecond)
	got := make(chan error, 1)
	go func() {
		_, err := p.Read(make([]byte, 100))
		got <- err
	}()
	// The Read may not have started yet; Close must work either way.
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err == nil {
			t.Fatal("Read returned nil error after Close")
		}
	case <-time.After(testTimeout):
		t.Fatal("Read still blocked after Close")
	}
	if err := p.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := p.Write([]byte("x")); !errors.Is(err, os.ErrClosed) {
		t.Fatalf("Write after Close: %v", err)
	}
}

func TestCloseUnblocksPendingRead(t *testing.T) {
	// Same as above, but make sure the Read is really blocked first: the
	// goroutine's state is visible through a started signal plus the fact
	// that no result arrived while the child was still alive.
	p, err := Start(Options{Argv: []string{"sleep", "100"}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Kill(100 * time.Millisecond)
	started := make(chan struct{})
	got := make(chan error, 1)
	go func() {
		close(started)
		_, err := p.Read(make([]byte, 100))
		got <- err
	}()
	<-started
	select {
	case err := <-got:
		t.Fatalf("Read returned early: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	p.Close()
	select {
	case err := <-got:
		if !errors.Is(err, os.ErrClosed) {
			t.Fatalf("Read error %v, want os.ErrClosed", err)
		}
	case <-time.After(testTimeout):
		t.Fatal("Read still blocked after Close")
	}
}

func TestGrandchildHoldsSlave(t *testing.T) {
	// The background sleep keeps the slave open, so EIO never comes: Read
	// must still drain and then end after the child is reaped.
	// It ignores SIGHUP, which the kernel sends to the foreground group
	// when the session leader exits.
	h := start(t, Options{Argv: []string{"/bin/sh", "-c", `trap "" HUP; sleep 30 & echo hi; exit 4`}})
	out, code := h.waitEnd()
	if out != "hi\r\n" || code != 4 {
		t.Fatalf("output %q code %d", out, code)
	}
	// The grandchild is still there, in the child's process group, until
	// Kill (in Cleanup) ends it.
	if err := syscall.Kill(-h.p.Pid(), 0); err != nil {
		t.Fatalf("the process group is gone: %v", err)
	}
}

func TestDrainAfterExit(t *testing.T) {
	// Lots of output, the child exits before we read anything: it all
	// arrives, then EOF.
	p, err := Start(Options{Argv: []string{"/bin/sh", "-c", "i=0; while [ $i -lt 300 ]; do echo line$i; i=$((i+1)); done"}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Kill(100 * time.Millisecond)
	// Nobody reads: with ~3 KB of output the child does not block.
	select {
	case <-p.Done():
	case <-time.After(testTimeout):
		t.Fatal("child did not exit")
	}
	data, err := io.ReadAll(p)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(data), "\r\n"), "\r\n")
	if len(lines) != 300 || lines[299] != "line299" {
		t.Fatalf("got %d lines, last %q", len(lines), lines[len(lines)-1])
	}
}

// procState returns the state letter from /proc/<pid>/stat.
func procState(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+3 > len(s) {
		return ""
	}
	return s[i+2 : i+3]
}

// procWchar returns the bytes written so far by pid (/proc/<pid>/io).
func procWchar(pid int) (int64, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "wchar: "); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}

func TestBackpressure(t *testing.T) {
	const blocks = 256
	dir := t.TempDir()
	counter := filepath.Join(dir, "count")
	// The shell (builtins only, no forks) writes 1 KiB lines to the tty
	// and records in a counter file how many it has written so far.
	script := fmt.Sprintf(`i=0; while [ $i -lt %d ]; do printf '%%01023d\n' 0; i=$((i+1)); echo $i > %s; done`, blocks, counter)
	const total = blocks * 1025 // ONLCR turns each "\n" into "\r\n"
	p, err := Start(Options{Argv: []string{"/bin/sh", "-c", script}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Kill(100 * time.Millisecond)

	written := func() int {
		b, _ := os.ReadFile(counter)
		n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		return n
	}
	// Wait until output stops progressing: the count is stable while some
	// process of the group sleeps in write (state S) for several polls.
	stable, last := 0, -1
	eventually(t, testTimeout, "the writer to block", func() bool {
		n := written()
		if n == last && procState(p.Pid()) == "S" {
			stable++
		} else {
			stable, last = 0, n
		}
		return stable >= 20 // 20 polls (>= 100 ms) asleep without progress
	})
	if n := written(); n*1024 >= 64<<10 {
		t.Fatalf("the child wrote %d KiB with nobody reading", n)
	}
	select {
	case <-p.Done():
		t.Fatal("the child finished with nobody reading")
	default:
	}

	// Now read: everything arrives and the child finishes.
	got := 0
	buf := make([]byte, 32<<10)
	for {
		n, err := p.Read(buf)
		got += n
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	<-p.Done()
	if got != total {
		t.Fatalf("read %d bytes, want %d", got, total)
	}
	if code, _ := p.ExitCode(); code != 0 {
		t.Fatalf("code %d", code)
	}
}

func TestBackpressureSingleWriter(t *testing.T) {
	// One dd writes 256 KiB: it must be blocked in write with far less
	// written, as seen in /proc/<pid>/io.
	p, err := Start(Options{Argv: []string{"dd", "if=/dev/zero", "bs=1024", "count=256", "status=none"}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Kill(100 * time.Millisecond)
	if _, ok := procWchar(p.Pid()); !ok {
		t.Skip("/proc/<pid>/io not readable")
	}
	var w int64
	stable, last := 0, int64(-1)
	eventually(t, testTimeout, "dd to block in write", func() bool {
		w, _ = procWchar(p.Pid())
		if w == last && procState(p.Pid()) == "S" {
			stable++
		} else {
			stable, last = 0, w
		}
		return stable >= 20
	})
	if w >= 64<<10 {
		t.Fatalf("dd wrote %d bytes with nobody reading", w)
	}
	n, err := io.Copy(io.Discard, p)
	if err != nil || n != 256<<10 {
		t.Fatalf("read %d bytes, err %v", n, err)
	}
	<-p.Done()
}

func TestUser(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root")
	}
	h := start(t, Options{User: "nobody", Argv: []string{"/bin/sh", "-c", `id -u; echo "U=$USER H=$HOME"; echo hello > $(tty) && echo reopen-ok; ls -l $(tty)`}})
	out, code := h.waitEnd()
	if code != 0 {
		t.Fatalf("code %d: %s", code, out)
	}
	for _, want := range []string{"65534\r\n", "U=nobody ", "reopen-ok", "crw--w----"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestStartErrors(t *testing.T) {
	if _, err := Start(Options{Argv: []string{"definitely-not-a-command-xyz"}}); err == nil {
		t.Error("no error for a missing command")
	}
	if _, err := Start(Options{Shell: "/no/such/shell"}); err == nil {
		t.Error("no error for a missing shell")
	}
	if _, err := Start(Options{User: "no-such-user-xyz"}); err == nil {
		t.Error("no error for a missing user")
	}
	if _, err := Start(Options{Argv: []string{"true"}, Env: map[string]string{"A=B": "x"}}); err == nil {
		t.Error("no error for a bad env name")
	}
}

// TestCheckEnv (issue 27 item 15): an environment exec cannot take is
// refused before any process starts, with the variable (quoted, cut
// short) and the rule; the bounds themselves are accepted.
func TestCheckEnv(t *testing.T) {
	long := strings.Repeat("K", 100)
	for _, c := range []struct {
		env  map[string]string
		want string // "" for accepted
	}{
		{map[string]string{"FOO": "bar", "EMPTY": ""}, ""},
		{map[string]string{"": "x"}, `a variable name is empty: a name must be non-empty, without "=" or NUL`},
		{map[string]string{"A=B": "c"}, `variable name "A=B" contains "=": a name must be non-empty, without "=" or NUL`},
		{map[string]string{"A\x00B": "c"}, `variable name "A\x00B" contains NUL: a name must be non-empty, without "=" or NUL`},
		{map[string]string{"OK": "1", "V": "a\x00b"}, `the value of "V" contains NUL: a value must not`},
		{map[string]string{long + "=": "x"}, `variable name "` + long[:64] + `"…(101 bytes) contains "=": a name must be non-empty, without "=" or NUL`},
		{map[string]string{"BIG": strings.Repeat("v", MaxEnvEntryBytes-3)}, `variable "BIG" is 131072 bytes as NAME=value: one may be at most 131071`},
		{map[string]string{"A": strings.Repeat("a", 100_000), "B": strings.Repeat("b", 120_000), "C": strings.Repeat("c", 100_000)},
			`the environment is 320009 bytes (3 variables as NAME=value, each with a NUL; the largest "B", 120002 bytes): at most 262144 in all`},
	} {
		err := CheckEnv(c.env)
		got := ""
		if err != nil {
			got = err.Error()
		}
		if got != c.want {
			t.Errorf("CheckEnv(%d variables): %q, want %q", len(c.env), got, c.want)
		}
	}
}

// TestEnvAtItsBounds: an environment at MaxEnvBytes made of variables at
// MaxEnvEntryBytes passes CheckEnv and exec takes it (the bounds are
// within what Linux allows), and one byte more is refused by Start with
// CheckEnv's reason instead of exec's "argument list too long".
func TestEnvAtItsBounds(t *testing.T) {
	value := strings.Repeat("v", MaxEnvEntryBytes-2) // "A=" + value
	env := map[string]string{"A": value, "B": value}
	if err := CheckEnv(env); err != nil {
		t.Fatalf("at the bounds: %v", err)
	}
	h := start(t, Options{Argv: []string{"/bin/sh", "-c", `printf '%s %s\n' "${#A}" "${#B}"`}, Env: env})
	out, code := h.waitEnd()
	if want := fmt.Sprintf("%d %d\r\n", len(value), len(value)); out != want || code != 0 {
		t.Fatalf("output %q, code %d; want %q, 0", out, code, want)
	}
	env["C"] = ""
	_, err := Start(Options{Argv: []string{"true"}, Env: env})
	if want := "pty: environment: the environment is 262147 bytes"; err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("one variable more: %v, want %q…", err, want)
	}
}

func TestDefaultShell(t *testing.T) {
	want := passwdShell(os.Getenv("USER"))
	if u, err := resolveUser(""); err == nil {
		want = u.shell
	}
	if want == "" || !isExecutable(want) {
		want = "/bin/bash"
		if !isExecutable(want) {
			want = "/bin/sh"
		}
	}
	h := start(t, Options{})
	if got := h.p.Shell(); got != want { // what a recording's header names
		t.Errorf("Shell() %q, want %q", got, want)
	}
	h.write("echo \"sh=$SHELL\"; exit 7\n")
	out, code := h.waitEnd()
	if code != 7 || !strings.Contains(out, "sh="+want+"\r\n") {
		t.Fatalf("code %d, output %q, want SHELL %s", code, out, want)
	}
}

func TestSetEchoOff(t *testing.T) {
	p, err := Start(Options{Argv: []string{"sh", "-c", "read line; echo got:$line"}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Kill(time.Second)
	if err := p.SetEcho(false); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Write([]byte("secret\n")); err != nil {
		t.Fatal(err)
	}
	out, err := io.ReadAll(p)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(out); got != "got:secret\r\n" {
		t.Fatalf("output %q, want only the program's line (no echo of the input)", got)
	}
}

// TestKillEndsJobs: Kill ends the jobs a job-control shell started in
// process groups of their own (the child's group alone missed them: they
// outlived `sidecar kill` and the daemon, reparented to init), a stopped
// one too, and a job that ignores SIGHUP and SIGTERM gets SIGKILL once
// the grace has passed.
func TestKillEndsJobs(t *testing.T) {
	h := start(t, Options{Argv: []string{"/bin/sh", "-c",
		`set -m; sleep 1000 & echo "job $!"; sh -c 'trap "" HUP TERM; exec sleep 1001' & echo "job $!"; sleep 1002 & kill -STOP $!; echo "job $!"; wait`}})
	var pids []int
	eventually(t, testTimeout, "three jobs", func() bool {
		pids = pids[:0]
		for _, line := range strings.Split(h.output(), "\n") {
			var pid int
			if _, err := fmt.Sscanf(strings.TrimSpace(line), "job %d", &pid); err == nil {
				pids = append(pids, pid)
			}
		}
		return len(pids) == 3
	})
	for _, pid := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			t.Fatal(err)
		}
		if pgrp, sid, _, _ := parseStat(b); pgrp == h.p.pid || sid != h.p.pid {
			t.Fatalf("job %d: group %d, session %d: not a job in a group of its own in the child's session %d", pid, pgrp, sid, h.p.pid)
		}
	}
	if err := h.p.Kill(300 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	for _, pid := range pids {
		eventually(t, testTimeout, fmt.Sprintf("job %d to end", pid), func() bool {
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
			if err != nil {
				return true
			}
			_, _, zombie, _ := parseStat(b)
			return zombie // ended; its new parent has not reaped it yet
		})
	}
	if g := sessionGroups(h.p.pid); len(g) != 0 {
		t.Errorf("process groups left in the session: %v", g)
	}
}

func TestParseStat(t *testing.T) {
	pgrp, sid, zombie, ok := parseStat([]byte("4242 (a (b) c) S 1 4240 4200 34816 4240 4194560 0 0"))
	if !ok || pgrp != 4240 || sid != 4200 || zombie {
		t.Errorf("got %d %d %v %v", pgrp, sid, zombie, ok)
	}
	if _, _, zombie, ok := parseStat([]byte("7 (x) Z 1 7 7 0")); !ok || !zombie {
		t.Errorf("zombie: %v %v", zombie, ok)
	}
	if _, _, _, ok := parseStat([]byte("7 (x")); ok {
		t.Error("a cut stat parsed")
	}
}
