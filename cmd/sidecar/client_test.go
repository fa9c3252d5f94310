package main

import (
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spf13/cobra"
)

// TestClientArgsChecked: every client command rejects, in its Args (so
// before anything is dialled, and with exit 2 once usageErrors wraps it),
// a URL client.Dial would refuse, a --transport that the URL cannot take,
// a pin that is no SHA-256 and a --connect-timeout that is not positive;
// with --via the URL is not checked. The words are client.Dial's and
// tlscert's, without the package prefix.
func TestClientArgsChecked(t *testing.T) {
	t.Setenv("SIDECAR_CERT_HASH", "")
	pin := strings.Repeat("ab", 32)
	commands := map[string]func() *cobra.Command{
		"ls": lsCmd, "attach": attachCmd, "run": runCmd, "kill": killCmd, "top": topCmd, "forward": forwardCmd,
	}
	// args are completed per command: the URL first, then what it needs.
	complete := func(name string, url string, flags []string) []string {
		a := []string{url}
		switch name {
		case "kill":
			a = append(a, "t1")
		case "run":
			a = append(a, "--", "true")
		}
		return append(flags, a...)
	}
	for _, tt := range []struct {
		url   string
		flags []string
		want  string // "" for none
	}{
		{"127.0.0.1:5533", nil, `invalid URL "127.0.0.1:5533": want https://HOST:PORT/transport-io or wss://HOST:PORT/ahp`},
		{"localhost:5533", nil, `invalid URL "localhost:5533": want https://HOST:PORT/transport-io or wss://HOST:PORT/ahp`},
		{"ftp://x", nil, `invalid URL "ftp://x": scheme must be https:// (transport-io) or wss:// (plain AHP), or http:// or ws:// for a peer without TLS`},
		{"wss://h/ahp", []string{"--transport", "webtransport"}, "wss://h/ahp: --transport webtransport needs an https:// URL (wss:// is plain AHP)"},
		{"wss://h/ahp", []string{"--transport", "websocket"}, "wss://h/ahp: --transport websocket needs an https:// URL (wss:// is plain AHP)"},
		{"wss://h/ahp", []string{"--cert-hash", "xyz"}, `--cert-hash: invalid certificate pin "xyz": not hexadecimal; want the 64 hex digits of a SHA-256 (as printed by sidecar cert)`},
		{"wss://h/ahp", []string{"--cert-hash", "abcd"}, `--cert-hash: invalid certificate pin "abcd": 2 bytes, want the 32 bytes (64 hex digits) of a SHA-256`},
		{"wss://h/ahp", []string{"--connect-timeout", "0"}, "--connect-timeout 0s: must be positive"},
		{"wss://h/ahp", []string{"--connect-timeout", "-1s"}, "--connect-timeout -1s: must be positive"},
		{"wss://h/ahp", []string{"--transport", "bogus"}, `unknown --transport "bogus": want auto, webtransport, websocket or ahp`},
		// Accepted: what Dial takes.
		{"wss://h/ahp", []string{"--cert-hash", pin, "--connect-timeout", "1ms"}, ""},
		{"wss://h/transport-io", []string{"--transport", "webtransport"}, ""},
		{"https://h:4433", []string{"--transport", "webtransport"}, ""},
		{"http://h:4433/", nil, ""},
		{"ws://h/ahp", []string{"--transport", "ahp"}, ""},
		{"127.0.0.1:5533", []string{"--via", "cat"}, ""}, // --via: the URL is not dialled
	} {
		for name, newCmd := range commands {
			cmd := newCmd()
			args := complete(name, tt.url, tt.flags)
			if err := cmd.ParseFlags(args); err != nil {
				t.Fatalf("%s %q: %v", name, args, err)
			}
			err := cmd.ValidateArgs(cmd.Flags().Args())
			got := ""
			if err != nil {
				got = err.Error()
			}
			if got != tt.want {
				t.Errorf("%s %q: %q, want %q", name, args, got, tt.want)
			}
		}
	}

	t.Run("no URL with --via", func(t *testing.T) {
		// A word that is no URL, where only the URL can go: with --via it
		// was taken as an argument after "stdio:" ("accepts 1 arg(s),
		// received 2").
		for name, newCmd := range map[string]func() *cobra.Command{"ls": lsCmd, "top": topCmd, "forward": forwardCmd} {
			cmd := newCmd()
			if err := cmd.ParseFlags([]string{"--via", "cat", "x"}); err != nil {
				t.Fatal(err)
			}
			err := cmd.ValidateArgs(cmd.Flags().Args())
			want := `"x" is not a URL (want https://HOST:PORT); with --via the URL may be left out`
			if err == nil || err.Error() != want {
				t.Errorf("%s --via cat x: %v, want %q", name, err, want)
			}
		}
	})

	t.Run("empty --via", func(t *testing.T) {
		cmd := lsCmd()
		if err := cmd.ParseFlags([]string{"--via", ""}); err != nil {
			t.Fatal(err)
		}
		err := cmd.ValidateArgs(cmd.Flags().Args())
		if want := "--via needs a command, e.g. --via 'docker exec -i C sidecar stdio'"; err == nil || err.Error() != want {
			t.Errorf("ls --via '': %v, want %q", err, want)
		}
	})

	t.Run("pin from the environment", func(t *testing.T) {
		t.Setenv("SIDECAR_CERT_HASH", "xyz")
		cmd := lsCmd()
		err := cmd.ValidateArgs([]string{"wss://h/ahp"})
		want := `$SIDECAR_CERT_HASH: invalid certificate pin "xyz": not hexadecimal; want the 64 hex digits of a SHA-256 (as printed by sidecar cert)`
		if err == nil || err.Error() != want {
			t.Errorf("error %v, want %q", err, want)
		}
	})
}

// TestSignalContext: the context ends at the signal, and caught tells
// which one it was.
func TestSignalContext(t *testing.T) {
	ctx, caught, stop := signalContext(syscall.SIGUSR1, syscall.SIGUSR2)
	defer stop()
	if got := caught(); got != 0 || ctx.Err() != nil {
		t.Fatalf("before any signal: caught %v, ctx %v", got, ctx.Err())
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGUSR2); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("SIGUSR2 did not end the context")
	}
	if got := caught(); got != syscall.SIGUSR2 {
		t.Errorf("caught %v, want SIGUSR2", got)
	}
}

// TestDialFailed: a dial cut short by a signal exits 128+n and says so
// (Ctrl-C: 130, "interrupted while connecting"); any other failure exits
// 255 with the dial's error.
func TestDialFailed(t *testing.T) {
	cut := errors.New("cannot connect to h: interrupt signal received")
	for _, tt := range []struct {
		sig  syscall.Signal
		code int
		msg  string
	}{
		{syscall.SIGINT, 130, "interrupted while connecting"},
		{syscall.SIGTERM, 143, "terminated while connecting"},
		{syscall.SIGHUP, 129, "hangup while connecting"},
		{0, 255, cut.Error()},
	} {
		var ee *exitError
		if err := dialFailed(cut, tt.sig); !errors.As(err, &ee) || ee.code != tt.code || err.Error() != tt.msg {
			t.Errorf("dialFailed(%v): %v, want exit %d and %q", tt.sig, err, tt.code, tt.msg)
		}
	}
}

// TestPrintable: what ls prints of a terminal's title (or any text from
// the host) cannot drive the user's terminal: control characters and
// invalid UTF-8 come out as escapes, everything else as is.
func TestPrintable(t *testing.T) {
	for in, want := range map[string]string{
		"plain title":             "plain title",
		"日本語 tïtle 😀":             "日本語 tïtle 😀",
		"x\x1b[2J\x1b]0;pwned\ay": `x\x1b[2J\x1b]0;pwned\ay`,
		"a\tb\rc":                 `a\tb\rc`,
		"\u009b31mRED":            `\u009b31mRED`,
		"bad \xff byte":           `bad \xff byte`,
		"del\x7f":                 `del\x7f`,
	} {
		if got := printable(in); got != want {
			t.Errorf("printable(%q) = %q, want %q", in, got, want)
		}
	}
}
