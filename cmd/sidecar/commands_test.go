package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
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
// with --via no URL is given (viaConflict). The words are client.Dial's
// and tlscert's, without the package prefix.
func TestClientArgsChecked(t *testing.T) {
	t.Setenv("SIDECAR_CERT_HASH", "")
	pin := strings.Repeat("ab", 32)
	commands := map[string]func() *cobra.Command{
		"ls": lsCmd, "attach": attachCmd, "run": runCmd, "kill": killCmd, "top": topCmd, "forward": forwardCmd,
		"connect": connectCmd,
	}
	// args are completed per command: the URL first, then what it needs.
	complete := func(name string, url string, flags []string) []string {
		a := []string{url}
		switch name {
		case "kill":
			a = append(a, "t1")
		case "run":
			a = append(a, "--", "true")
		case "connect":
			a = append(a, "localhost:22")
		}
		return append(flags, a...)
	}
	for _, tt := range []struct {
		url   string
		flags []string
		want  string // "" for none
	}{
		{"127.0.0.1:5533", nil, `invalid URL "127.0.0.1:5533": want https://HOST:PORT/ (transport-io) or wss://HOST:PORT/ahp (plain AHP), with the daemon's base path before them when it has one (https://HOST/vm1/)`},
		{"localhost:5533", nil, `invalid URL "localhost:5533": want https://HOST:PORT/ (transport-io) or wss://HOST:PORT/ahp (plain AHP), with the daemon's base path before them when it has one (https://HOST/vm1/)`},
		{"ftp://x", nil, `invalid URL "ftp://x": scheme must be https:// (transport-io) or wss:// (plain AHP), or http:// or ws:// for a peer without TLS`},
		{"wss://h/ahp", []string{"--transport", "webtransport"}, "wss://h/ahp: --transport webtransport needs an https:// URL, or wss:// with the path /transport-io (wss://…/ahp is plain AHP)"},
		{"wss://h/ahp", []string{"--transport", "websocket"}, "wss://h/ahp: --transport websocket needs an https:// URL, or wss:// with the path /transport-io (wss://…/ahp is plain AHP)"},
		{"wss://h/ahp", []string{"--cert-hash", "xyz"}, `--cert-hash: invalid certificate pin "xyz": not hexadecimal; want the 64 hex digits of a SHA-256 (as printed by sidecar cert)`},
		{"wss://h/ahp", []string{"--cert-hash", "abcd"}, `--cert-hash: invalid certificate pin "abcd": 2 bytes, want the 32 bytes (64 hex digits) of a SHA-256`},
		{"wss://h/ahp", []string{"--connect-timeout", "0"}, "--connect-timeout 0s: must be positive"},
		{"wss://h/ahp", []string{"--connect-timeout", "-1s"}, "--connect-timeout -1s: must be positive"},
		{"wss://h/ahp", []string{"--transport", "bogus"}, `unknown --transport "bogus": want auto, webtransport, websocket or ahp`},
		// Accepted: what Dial takes.
		{"wss://h/ahp", []string{"--cert-hash", pin, "--connect-timeout", "1ms"}, ""},
		{"wss://h/transport-io", []string{"--transport", "webtransport"}, ""},
		{"wss://h/vm1/transport-io", []string{"--transport", "websocket"}, ""},
		{"https://h/vm1/", []string{"--transport", "webtransport"}, ""},
		{"https://h:4433", []string{"--transport", "webtransport"}, ""},
		{"http://h:4433/", nil, ""},
		{"ws://h/ahp", []string{"--transport", "ahp"}, ""},
		{"stdio:", []string{"--via", "cat"}, ""}, // --via: the placeholder of the URL
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
			for _, arg := range []string{"x", "127.0.0.1:5533", ""} {
				cmd := newCmd()
				if err := cmd.ParseFlags([]string{"--via", "cat", arg}); err != nil {
					t.Fatal(err)
				}
				err := cmd.ValidateArgs(cmd.Flags().Args())
				want := fmt.Sprintf("unexpected argument %q: with --via no URL is given (--via's command is the connection)", arg)
				if err == nil || err.Error() != want {
					t.Errorf("%s --via cat %q: %v, want %q", name, arg, err, want)
				}
			}
		}
	})

	t.Run("URL and --via", func(t *testing.T) {
		// A URL with --via was ignored (the command is the connection):
		// they are exclusive, for every client command; only the
		// placeholder stdio: may stand for the URL. Terminal ids, a full
		// ahp-terminal:/ URI too, are no URL.
		exclusive := func(u string) string {
			return u + " and --via are exclusive: --via's command is the connection and no URL is dialled; leave the URL out"
		}
		for _, tt := range []struct {
			name string
			args []string
			want string // "" for none
		}{
			{"ls", []string{"wss://127.0.0.1:1/ahp"}, exclusive("wss://127.0.0.1:1/ahp")},
			{"ls", []string{"https://h:4433/"}, exclusive("https://h:4433/")},
			{"top", []string{"wss://h/ahp", "--once"}, exclusive("wss://h/ahp")},
			{"forward", []string{"wss://h/ahp", "-L", "8080:127.0.0.1:80"}, exclusive("wss://h/ahp")},
			{"attach", []string{"wss://h/ahp"}, exclusive("wss://h/ahp")},
			{"attach", []string{"wss://h/ahp", "t1"}, exclusive("wss://h/ahp")},
			{"kill", []string{"wss://h/ahp", "t1"}, exclusive("wss://h/ahp")},
			{"run", []string{"wss://h/ahp", "--", "true"}, exclusive("wss://h/ahp")},
			{"run", []string{"x", "--", "true"}, `unexpected argument "x": with --via no URL is given (--via's command is the connection)`},
			{"connect", []string{"wss://h/ahp", "localhost:22"}, exclusive("wss://h/ahp")},
			{"connect", nil, `missing HOST:PORT after "stdio:": sidecar connect URL HOST:PORT`},
			// Accepted.
			{"ls", nil, ""},
			{"ls", []string{"stdio:"}, ""},
			{"top", []string{"--once"}, ""},
			{"forward", []string{"-L", "8080:127.0.0.1:80"}, ""},
			{"attach", nil, ""},
			{"attach", []string{"t1"}, ""},
			{"attach", []string{"ahp-terminal:/t1"}, ""},
			{"attach", []string{"stdio:", "t1"}, ""},
			{"kill", []string{"t1", "ahp-terminal:/t2"}, ""},
			{"kill", []string{"ahp-terminal:/t1"}, ""},
			{"run", []string{"--", "wss://h/ahp"}, ""}, // the program, not a URL
			{"run", []string{"stdio:", "--", "true"}, ""},
			{"connect", []string{"localhost:22"}, ""},
			{"connect", []string{"::1:22"}, ""},
			{"connect", []string{"stdio:", "localhost:22"}, ""},
		} {
			cmd := commands[tt.name]()
			args := append([]string{"--via", "cat"}, tt.args...)
			if err := cmd.ParseFlags(args); err != nil {
				t.Fatalf("%s %q: %v", tt.name, args, err)
			}
			err := cmd.ValidateArgs(cmd.Flags().Args())
			got := ""
			if err != nil {
				got = err.Error()
			}
			if got != tt.want {
				t.Errorf("%s %q: %q, want %q", tt.name, args, got, tt.want)
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

// TestEmptyArgs: an empty program name (run URL -- "") or terminal id
// (attach URL "", kill URL "") is a usage error, with --via too: run
// said "cannot start : command not found on the host", attach opened a
// new shell.
func TestEmptyArgs(t *testing.T) {
	t.Setenv("SIDECAR_CERT_HASH", "")
	const (
		noProgram = "empty program name after --; usage: sidecar run URL [flags] -- CMD [ARGS...]"
		noShell   = "empty terminal id: give one that sidecar ls shows, or none for a new shell"
		noID      = "empty terminal id: give the ids sidecar ls shows"
	)
	for _, tt := range []struct {
		name string
		args []string
		want string // "" for none
	}{
		{"run", []string{"wss://h/ahp", "--", ""}, noProgram},
		{"run", []string{"wss://h/ahp", "--", "", "x"}, noProgram},
		{"run", []string{"--via", "cat", "--", ""}, noProgram},
		{"run", []string{"--via", "cat", "stdio:", "--", ""}, noProgram},
		{"run", []string{"wss://h/ahp", "--", "true", ""}, ""}, // an empty argument is one
		{"attach", []string{"wss://h/ahp", ""}, noShell},
		{"attach", []string{"--via", "cat", ""}, noShell},
		{"attach", []string{"--via", "cat", "stdio:", ""}, noShell},
		{"attach", []string{"wss://h/ahp", "t1"}, ""},
		{"kill", []string{"wss://h/ahp", ""}, noID},
		{"kill", []string{"wss://h/ahp", "t1", ""}, noID},
		{"kill", []string{"--via", "cat", ""}, noID},
		{"kill", []string{"--via", "cat", "", "t1"}, noID},
		{"kill", []string{"wss://h/ahp", "t1", "t2"}, ""},
	} {
		cmd := map[string]func() *cobra.Command{"run": runCmd, "attach": attachCmd, "kill": killCmd}[tt.name]()
		if err := cmd.ParseFlags(tt.args); err != nil {
			t.Fatalf("%s %q: %v", tt.name, tt.args, err)
		}
		err := cmd.ValidateArgs(cmd.Flags().Args())
		got := ""
		if err != nil {
			got = err.Error()
		}
		if got != tt.want {
			t.Errorf("%s %q: %q, want %q", tt.name, tt.args, got, tt.want)
		}
	}
}

// TestTopInterval: top's --interval, when given, must be positive (0 and
// negative ones ran every second), as --connect-timeout must; left out,
// the host's telemetry.interval applies.
func TestTopInterval(t *testing.T) {
	t.Setenv("SIDECAR_CERT_HASH", "")
	for _, tt := range []struct {
		flags []string
		want  string
	}{
		{[]string{"--interval", "0"}, "--interval 0s: must be positive"},
		{[]string{"--interval", "-1s"}, "--interval -1s: must be positive"},
		{[]string{"--interval", "0s", "--via", "cat"}, "--interval 0s: must be positive"},
		{[]string{"--interval", "500ms"}, ""},
		{nil, ""},
	} {
		cmd := topCmd()
		args := append([]string{"wss://h/ahp"}, tt.flags...)
		if slices.Contains(tt.flags, "--via") {
			args = tt.flags
		}
		if err := cmd.ParseFlags(args); err != nil {
			t.Fatal(err)
		}
		err := cmd.ValidateArgs(cmd.Flags().Args())
		got := ""
		if err != nil {
			got = err.Error()
		}
		if got != tt.want {
			t.Errorf("top %q: %q, want %q", args, got, tt.want)
		}
	}
}

// TestUnknownCommand: an unknown command is a usage error (exit 2, one
// line with the help's pointer and cobra's suggestions), as the others
// are; it exited 1.
func TestUnknownCommand(t *testing.T) {
	for args, want := range map[string]string{
		"bogus":     `unknown command "bogus" for "sidecar" (see sidecar --help)`,
		"sl --json": `unknown command "sl" for "sidecar"; did you mean ls? (see sidecar --help)`,
	} {
		root := &cobra.Command{Use: "sidecar", SilenceUsage: true, SilenceErrors: true}
		root.AddCommand(lsCmd(), tokenCmd())
		usageErrors(root)
		root.SetArgs(strings.Fields(args))
		ran, err := root.ExecuteC()
		err = unknownCommand(ran, err)
		var ee *exitError
		if !errors.As(err, &ee) || ee.code != 2 || err.Error() != want {
			t.Errorf("sidecar %s: %v, want exit 2 and %q", args, err, want)
		}
	}
	other := errors.New("unknown command in a message of the host")
	root := &cobra.Command{Use: "sidecar"}
	ls := lsCmd()
	root.AddCommand(ls)
	if err := unknownCommand(ls, other); err != other {
		t.Errorf("an error of a subcommand became %v", err)
	}
}

// TestDialSignal: a dial that failed because the --via command died of
// SIGINT (Ctrl-C reaches the whole process group) before our own handler
// had the signal waits for it (viaSignalWait at most), so that the exit
// is 130 "interrupted while connecting", not 255 "the command ended
// (signal: interrupt)"; any other failure does not wait.
func TestDialSignal(t *testing.T) {
	cf := &connFlags{via: "sleep 100"}
	died := errors.New(`--via "sleep 100": the command ended (signal: interrupt) before the session was set up (see its stderr above)`)
	ctx, caught, stop := signalContext(syscall.SIGINT)
	defer stop()
	go func() {
		time.Sleep(50 * time.Millisecond) // the signal after the dial's failure
		_ = syscall.Kill(os.Getpid(), syscall.SIGINT)
	}()
	sig := cf.dialSignal(ctx, died, caught)
	var ee *exitError
	if err := dialFailed(died, sig); !errors.As(err, &ee) || ee.code != 130 || err.Error() != "interrupted while connecting" {
		t.Errorf("dialFailed: %v, want exit 130 and \"interrupted while connecting\"", err)
	}

	// No signal of our own: the dial's error, after viaSignalWait.
	ctx2, caught2, stop2 := signalContext(syscall.SIGUSR1)
	defer stop2()
	start := time.Now()
	if sig := cf.dialSignal(ctx2, died, caught2); sig != 0 {
		t.Errorf("no signal: %v", sig)
	}
	if d := time.Since(start); d < viaSignalWait || d > 10*viaSignalWait {
		t.Errorf("waited %v for a signal, want %v", d, viaSignalWait)
	}
	// Other failures, or another command's, do not wait at all.
	for _, tt := range []struct {
		cf  *connFlags
		err error
	}{
		{cf, errors.New(`--via "sleep 100": the command ended (exit status 1) before the session was set up (see its stderr above)`)},
		{cf, errors.New(`--via "sleep 100": the command ended (signal: killed) before the session was set up (see its stderr above)`)},
		{cf, errors.New(`--via "sleep 100": the command ended (exit status 1300) before the session was set up (see its stderr above)`)},
		{&connFlags{via: "other"}, died},
		{&connFlags{}, died},
	} {
		start := time.Now()
		if sig := tt.cf.dialSignal(ctx2, tt.err, caught2); sig != 0 || time.Since(start) > viaSignalWait/2 {
			t.Errorf("--via %q, %v: signal %v after %v; want none at once", tt.cf.via, tt.err, sig, time.Since(start))
		}
	}
	for _, how := range []string{"signal: terminated", "signal: hangup", "exit status 130", "exit status 143", "exit status 129", "exit status 255"} {
		if !cf.viaEndedBySignal(fmt.Errorf("--via %q: the command ended (%s)", cf.via, how)) {
			t.Errorf("%s: not taken for a signal the terminal sends", how)
		}
	}
}

// TestPrintedCommandsHideToken: a command printed to paste (reattach, kill,
// ls) repeats the connection flags given but never the token itself.
func TestPrintedCommandsHideToken(t *testing.T) {
	f := &connFlags{token: "s3cret-token", certHash: "AB12", transport: "websocket"}
	url := "wss://127.0.0.1:4433/ahp"
	for _, got := range []string{
		f.reattachCommand(url, "ahp-terminal:/t1"),
		f.terminalCommand("kill", url, "ahp-terminal:/t1"),
		f.lsCommandFull(url),
	} {
		if strings.Contains(got, "s3cret") {
			t.Errorf("printed command shows the token: %s", got)
		}
		if !strings.Contains(got, ` --token "$SIDECAR_TOKEN" --cert-hash AB12 --transport websocket`) {
			t.Errorf("printed command %q lacks the connection flags", got)
		}
	}
}

// TestTokenFile: --token-file's content, white space trimmed, is the
// token, before $SIDECAR_TOKEN; a file that cannot be read or is empty,
// or one given with --token, one others may read (as ssh refuses such a
// key), or one far larger than a token, is a usage error found before dialling; a
// printed command repeats the flag, never the token.
func TestTokenFile(t *testing.T) {
	t.Setenv("SIDECAR_TOKEN", "from-env")
	t.Setenv("SIDECAR_CERT_HASH", "")
	dir := t.TempDir()
	good := filepath.Join(dir, "token")
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(good, []byte("  s3cret-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	twoLines := filepath.Join(dir, "two")
	if err := os.WriteFile(twoLines, []byte("tok\nsecond\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	open := filepath.Join(dir, "open")
	if err := os.WriteFile(open, []byte("tok\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o640); err != nil {
		t.Fatal(err)
	}
	huge := filepath.Join(dir, "huge")
	if err := os.WriteFile(huge, bytes.Repeat([]byte("t"), maxTokenFile+1), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		flags     []string
		wantErr   string // "" for none
		wantToken string
	}{
		{[]string{"--token-file", good}, "", "s3cret-file"},
		{[]string{"--token-file", open}, "--token-file: " + open + " may be read or written by others (mode 0640): chmod 600 " + open, ""},
		{[]string{"--token-file", huge}, fmt.Sprintf("--token-file: %s is larger than %d bytes: not a token", huge, maxTokenFile), ""},
		{nil, "", "from-env"},
		{[]string{"--token-file", empty}, "--token-file: " + empty + " is empty", ""},
		{[]string{"--token-file", filepath.Join(dir, "none")}, "--token-file: open " + filepath.Join(dir, "none") + ": no such file or directory", ""},
		{[]string{"--token-file", good, "--token", "x"}, "--token and --token-file are exclusive: give one", ""},
		{[]string{"--token-file", twoLines}, "--token-file: " + twoLines + " holds more than the token (white space or a second line inside it)", ""},
		{[]string{"--token-file="}, "--token-file: give the file's path", ""},
	} {
		var cf connFlags
		cmd := &cobra.Command{Use: "x", Args: cobra.ExactArgs(1), RunE: func(*cobra.Command, []string) error { return nil }}
		cf.register(cmd)
		if err := cmd.ParseFlags(append(tt.flags, "wss://h/ahp")); err != nil {
			t.Fatal(err)
		}
		err := cmd.ValidateArgs(cmd.Flags().Args())
		got := ""
		if err != nil {
			got = err.Error()
		}
		if got != tt.wantErr {
			t.Errorf("%q: error %q, want %q", tt.flags, got, tt.wantErr)
			continue
		}
		if err == nil {
			if tok := cf.options().Token; tok != tt.wantToken {
				t.Errorf("%q: token %q, want %q", tt.flags, tok, tt.wantToken)
			}
		}
	}
	f := &connFlags{tokenFile: good, fileToken: "s3cret-file"}
	if got := f.lsCommandFull("wss://h/ahp"); strings.Contains(got, "s3cret") || !strings.Contains(got, fmt.Sprintf(" --token-file %q", good)) {
		t.Errorf("printed command %q: want --token-file and no token", got)
	}
}
