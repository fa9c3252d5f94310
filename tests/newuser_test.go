package tests

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// runWithStdin runs the sidecar binary with stdin from a string.
func runWithStdin(t *testing.T, stdin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, sidecarBin, args...)
	cmd.Env = cleanEnv()
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("%v did not finish within %v; stdout %q stderr %q", args, waitTimeout, out.String(), errb.String())
	}
	return out.String(), errb.String(), exitCode(err)
}

// TestRunPipedStdin: input from a pipe is not echoed, reaches the program
// intact, and its end is end of file even without a final newline.
func TestRunPipedStdin(t *testing.T) {
	t.Parallel()
	s := startServer(t, "")
	run := func(stdin string, cmd ...string) (string, int) {
		args := append(append([]string{"run", s.url}, s.connArgs()...), "--")
		out, errOut, code := runWithStdin(t, stdin, append(args, cmd...)...)
		if errOut != "" {
			t.Logf("stderr: %s", errOut)
		}
		return out, code
	}
	if out, code := run("hi\n", "cat"); out != "hi\n" || code != 0 {
		t.Errorf("echo hi | run -- cat = %q (exit %d), want \"hi\\n\" once (no echo)", out, code)
	}
	if out, code := run("abc", "wc", "-c"); strings.TrimSpace(out) != "3" || code != 0 {
		t.Errorf("printf abc | run -- wc -c = %q (exit %d), want 3: end of input must be end of file", out, code)
	}
}

// TestRunStartErrors: a missing program exits 127, one that cannot be
// executed 126, as a shell reports them.
func TestRunStartErrors(t *testing.T) {
	t.Parallel()
	s := startServer(t, "")
	notProgram := filepath.Join(t.TempDir(), "data.txt")
	if err := os.WriteFile(notProgram, []byte("just text\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		cmd  string
		code int
		why  string
	}{
		{"no-such-command-xyz", 127, "command not found on the host"},
		{notProgram, 126, "permission denied on the host (not executable?)"},
	} {
		_, errOut, code := s.run(t, append(append([]string{"run", s.url}, s.connArgs()...), "--", tc.cmd)...)
		if want := "sidecar: cannot start " + tc.cmd + ": " + tc.why + "\n"; code != tc.code || errOut != want {
			t.Errorf("run -- %s: exit %d, stderr %q; want %d and %q", tc.cmd, code, errOut, tc.code, want)
		}
	}
}

// TestKillAndAttachNeedsTerminal: `sidecar kill` disposes a terminal (ls
// no longer lists it); attach with a pipe as stdin refuses at once.
func TestKillAndAttachNeedsTerminal(t *testing.T) {
	t.Parallel()
	s := startServer(t, "")
	rc := s.dialRaw(t)
	rc.initialize("killer")
	rc.mustCall("createTerminal", map[string]any{"channel": "ahp-terminal:/victim", "command": []string{"sleep", "300"}})
	out, _, code := s.run(t, append([]string{"ls", s.url}, s.connArgs()...)...)
	if code != 0 || !strings.Contains(out, "victim") {
		t.Fatalf("ls before kill (exit %d):\n%s", code, out)
	}
	if _, errOut, code := s.run(t, append([]string{"kill", s.url, "victim"}, s.connArgs()...)...); code != 0 {
		t.Fatalf("kill exited %d: %s", code, errOut)
	}
	out, _, _ = s.run(t, append([]string{"ls", s.url}, s.connArgs()...)...)
	if strings.Contains(out, "victim") {
		t.Errorf("ls after kill still lists it:\n%s", out)
	}
	_, errOut, code := runWithStdin(t, "", append([]string{"attach", s.url}, s.connArgs()...)...)
	if code != 2 || !strings.Contains(errOut, "stdin is not a terminal") {
		t.Errorf("attach with a pipe: exit %d, %q; want 2 and a hint to use run", code, errOut)
	}
}

// TestConfiguredTokenNotPrinted: a token from the configuration never
// reaches stdout (the journal under systemd); a generated one does.
func TestConfiguredTokenNotPrinted(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tokFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokFile, []byte("configured-secret-123\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "c.hcl")
	if err := os.WriteFile(cfg, []byte("listener {\n  address = \"127.0.0.1:0\"\n}\nauth {\n  token_file = \""+tokFile+"\"\n}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := start(t, "serve", "--config", cfg, "--state-dir", filepath.Join(dir, "state"))
	text, ok := p.stdout.waitMatch(waitTimeout, func(s string) bool { return strings.Contains(s, "--cert-hash") })
	if !ok {
		t.Fatalf("no attach line: %q", text)
	}
	if strings.Contains(text, "configured-secret-123") || !strings.Contains(text, `--token "$SIDECAR_TOKEN"`) {
		t.Errorf("attach line %q: want the configured token left out", text)
	}
}

// TestRunInterruptedDisposes: a run client interrupted with SIGINT while
// its stdin is a pipe (so no terminal turns Ctrl-C into a byte) ends the
// remote command too, and exits 130.
func TestRunInterruptedDisposes(t *testing.T) {
	t.Parallel()
	s := startServer(t, "")
	cmd := exec.Command(sidecarBin, append(append([]string{"run", s.url}, s.connArgs()...), "--", "sh", "-c", "echo started; exec sleep 300")...)
	cmd.Env = cleanEnv()
	stdin, err := cmd.StdinPipe() // stays open: the program never sees EOF
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	out := newStreamBuf()
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	out.waitFor(t, "run output", 0, "started")
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if code := exitCode(err); code != 130 {
			t.Errorf("run exited %d after SIGINT, want 130", code)
		}
	case <-time.After(waitTimeout):
		t.Fatal("run did not exit after SIGINT")
	}
	list, _, _ := s.run(t, append([]string{"ls", s.url}, s.connArgs()...)...)
	if strings.Contains(list, "run-") {
		t.Errorf("the interrupted run's terminal is still listed:\n%s", list)
	}
}

// TestRunEscapeWhileReconnecting: `sidecar run` in a terminal ends at once
// on ~. typed after Enter, even while the connection is cut and it
// reconnects (exit 255, "closed by the ~. escape"); on a live connection the command
// is ended on the host too.
func TestRunEscapeWhileReconnecting(t *testing.T) {
	t.Parallel()
	s := startServer(t, "")
	relay, url := relayed(t, s)
	a := startInPTY(t, append(append([]string{"run", url}, s.connArgs()...), "--", "sh", "-c", "echo started; exec sleep 300")...)
	a.out.waitFor(t, "run output", 0, "started")
	relay.Refuse(true)
	relay.Cut()
	a.out.waitFor(t, "reconnecting status", 0, "reconnecting (attempt")
	a.typeText(t, "\r~.")
	if code := a.wait(t); code != 255 {
		t.Fatalf("run after ~.: exit %d, want 255; screen:\n%s", code, tail(a.out.String(), 1500))
	}
	if screen := a.out.String(); !strings.Contains(screen, "closed by the ~. escape") || !strings.Contains(screen, "end it with: ") {
		t.Errorf("no message saying run was closed and how to end the command; screen:\n%s", tail(screen, 1500))
	}

	// Connected: ~. ends the command on the host as well.
	b := startInPTY(t, append(append([]string{"run", s.url}, s.connArgs()...), "--", "sh", "-c", "echo started; exec sleep 300")...)
	b.out.waitFor(t, "run output", 0, "started")
	b.typeText(t, "\r~.")
	if code := b.wait(t); code != 255 {
		t.Fatalf("run after ~.: exit %d, want 255; screen:\n%s", code, tail(b.out.String(), 1500))
	}
	list, _, _ := s.run(t, append([]string{"ls", s.url}, s.connArgs()...)...)
	if strings.Count(list, "run-") != 1 { // the first run's, whose dispose could not get through
		t.Errorf("want only the cut run's terminal listed:\n%s", list)
	}
}
