package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/sidecar-dev/sidecar/client"
	"github.com/sidecar-dev/sidecar/config"
	"github.com/sidecar-dev/sidecar/rpc"
	"github.com/sidecar-dev/sidecar/transport/tlscert"
)

// connFlags are the connection options every client command takes.
type connFlags struct {
	token     string
	certHash  string
	ordinary  bool
	timeout   time.Duration
	transport string
	via       string
}

func (f *connFlags) register(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.StringVar(&f.token, "token", "", "token (default $SIDECAR_TOKEN)")
	fs.StringVar(&f.certHash, "cert-hash", "", "SHA-256 pin of the server certificate, hex (default $SIDECAR_CERT_HASH)")
	fs.BoolVar(&f.ordinary, "ordinary", false, "use ordinary delivery instead of windowed delivery (for debugging)")
	fs.DurationVar(&f.timeout, "connect-timeout", 15*time.Second, "time allowed to connect and initialize")
	fs.StringVar(&f.transport, "transport", client.TransportAuto, "for https:// URLs: auto (WebTransport, falling back to WebSocket), webtransport, websocket, or ahp (plain /ahp)")
	fs.StringVar(&f.via, "via", "", "command whose stdin/stdout carry transport-io instead of a network connection, e.g. 'docker exec -i C sidecar stdio'; no URL is given then (or "+viaURL+")")
	// With --via there is nothing to dial: a missing URL becomes "stdio:".
	viaArgs := func(a []string) []string {
		if f.via != "" && (len(a) == 0 || !isURL(a[0])) && cmd.ArgsLenAtDash() < 0 {
			return append([]string{viaURL}, a...)
		}
		return a
	}
	// Every usage error (exit 2) is found here, before anything is dialled:
	// the flags, then the arguments, then the URL.
	if check := cmd.Args; check != nil {
		cmd.Args = func(c *cobra.Command, a []string) error {
			if err := f.check(); err != nil {
				return err
			}
			if f.via == "" && c.Flags().Changed("via") {
				return errors.New("--via needs a command, e.g. --via 'docker exec -i C sidecar stdio'")
			}
			if err := f.viaConflict(c, a); err != nil {
				return err
			}
			given := a
			a = viaArgs(a)
			if err := check(c, a); err != nil {
				if len(a) > len(given) && check(c, given) == nil {
					// Meant as the URL (one with no scheme): with --via
					// there is none.
					return viaUnexpected(given[0])
				}
				return err
			}
			if f.via != "" || len(a) == 0 {
				return nil // with --via the URL is not dialled
			}
			_, err := client.CheckURL(a[0], f.transport)
			return err
		}
	}
	if run := cmd.RunE; run != nil {
		cmd.RunE = func(c *cobra.Command, a []string) error { return run(c, viaArgs(a)) }
	}
}

// viaURL is the URL a command given --via runs with: none is dialled. It
// may be given as the URL (sidecar run stdio: --via CMD -- uname).
const viaURL = "stdio:"

// isURL reports whether argument s, where a URL may stand, is one (or
// viaURL): it has a scheme and "://". Anything else is the command's
// next argument: a terminal id (a full ahp-terminal:/ URI has no "//").
func isURL(s string) bool {
	return s == viaURL || strings.Contains(s, "://")
}

// viaConflict rejects a URL given along with --via: the command is the
// connection, and the URL would be ignored. The URL is what stands before
// "--" (run), or a first argument that is a URL (isURL); viaURL is
// allowed.
func (f *connFlags) viaConflict(c *cobra.Command, a []string) error {
	if f.via == "" {
		return nil
	}
	var u string
	switch dash := c.ArgsLenAtDash(); {
	case dash >= 1 && len(a) > 0: // run URL -- CMD
		u = a[0]
	case dash < 0 && len(a) > 0 && isURL(a[0]):
		u = a[0]
	default:
		return nil
	}
	switch {
	case u == viaURL:
		return nil
	case !isURL(u):
		return viaUnexpected(u)
	}
	return fmt.Errorf("%s and --via are exclusive: --via's command is the connection and no URL is dialled; leave the URL out", u)
}

// viaUnexpected is the usage error of an argument given with --via where
// the URL would stand.
func viaUnexpected(arg string) error {
	return fmt.Errorf("unexpected argument %q: with --via no URL is given (--via's command is the connection)", arg)
}

// check rejects flag values that cannot work: an unknown --transport, a
// --connect-timeout that is not positive, a pin (--cert-hash or
// $SIDECAR_CERT_HASH) that is no SHA-256.
func (f *connFlags) check() error {
	switch f.transport {
	case client.TransportAuto, client.TransportWebTransport, client.TransportWebSocket, client.TransportAHP:
	default:
		return fmt.Errorf("unknown --transport %q: want auto, webtransport, websocket or ahp", f.transport)
	}
	if f.timeout <= 0 {
		return fmt.Errorf("--connect-timeout %s: must be positive", f.timeout)
	}
	pin, from := f.certHash, "--cert-hash"
	if pin == "" {
		pin, from = os.Getenv("SIDECAR_CERT_HASH"), "$SIDECAR_CERT_HASH"
	}
	if pin != "" {
		if _, err := tlscert.ParsePin(pin); err != nil {
			return fmt.Errorf("%s: %s", from, strings.TrimPrefix(err.Error(), "tlscert: "))
		}
	}
	return nil
}

// options are the client options these flags give; the token and the pin
// default to $SIDECAR_TOKEN and $SIDECAR_CERT_HASH.
func (f *connFlags) options() client.Options {
	token := f.token
	if token == "" {
		token = os.Getenv("SIDECAR_TOKEN")
	}
	pin := f.certHash
	if pin == "" {
		pin = os.Getenv("SIDECAR_CERT_HASH")
	}
	return client.Options{Token: token, CertHash: pin, Ordinary: f.ordinary, ClientName: "sidecar-cli/" + version,
		Transport: f.transport, Via: f.via}
}

// dial connects and initializes within --connect-timeout.
func (f *connFlags) dial(ctx context.Context, url string) (*client.Conn, error) {
	return f.dialOptions(ctx, url, f.options())
}

func (f *connFlags) dialOptions(ctx context.Context, url string, opts client.Options) (*client.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	return client.Dial(ctx, url, opts)
}

// signalContext is signal.NotifyContext that also tells which of sigs
// ended the context (caught returns 0 until one has). The signals stay
// caught until stop.
func signalContext(sigs ...os.Signal) (ctx context.Context, caught func() syscall.Signal, stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, sigs...)
	var got atomic.Int32
	done := make(chan struct{})
	go func() {
		defer close(done)
		select {
		case sig := <-ch:
			got.Store(int32(sig.(syscall.Signal))) // before cancel: ctx.Err() implies caught
			cancel()
		case <-ctx.Done():
		}
	}()
	caught = func() syscall.Signal { return syscall.Signal(got.Load()) }
	stop = func() {
		signal.Stop(ch)
		cancel()
		<-done
	}
	return ctx, caught, stop
}

// viaSignalWait bounds how long dialSignal waits for a signal of our own
// after the --via command was ended by one.
const viaSignalWait = 500 * time.Millisecond

// dialSignal is the signal that ended a dial that returned err: the one
// caught says, or, when none has been caught yet but the dial failed
// because the --via command ended as a signal that the terminal sends
// ends it (viaEndedBySignal), the one that ends ctx (the signal context
// caught reads) within viaSignalWait. Ctrl-C sends SIGINT to the whole
// foreground process group, the --via command included, and the command
// may die of it (and the dial fail) before our own handler has run: that
// is still an interrupt, not a connection error.
func (f *connFlags) dialSignal(ctx context.Context, err error, caught func() syscall.Signal) syscall.Signal {
	if sig := caught(); sig != 0 || err == nil || !f.viaEndedBySignal(err) {
		return sig
	}
	t := time.NewTimer(viaSignalWait)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
	return caught()
}

// viaEndedBySignal reports whether err says that the --via command ended
// (client.Dial's "--via CMD: the command ended (HOW)...", HOW from
// os.ProcessState.String) as SIGINT, SIGTERM or SIGHUP end a command:
// killed by one, or exiting with 128+n as a shell reports it, or with 255
// as ssh does.
func (f *connFlags) viaEndedBySignal(err error) bool {
	if f.via == "" {
		return false
	}
	var hows []string
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP} {
		hows = append(hows, "signal: "+sig.String(), fmt.Sprintf("exit status %d", 128+int(sig)))
	}
	hows = append(hows, "exit status 255")
	for _, how := range hows {
		if strings.HasPrefix(err.Error(), fmt.Sprintf("--via %q: the command ended (%s)", f.via, how)) {
			return true
		}
	}
	return false
}

// dialFailed is how a client command ends when its dial failed: with
// 128+n when signal n ended the attempt (Ctrl-C: 130, as a shell reports
// it) and a line that says so instead of the dial's error, else with 255
// and the dial's error.
func dialFailed(err error, sig syscall.Signal) error {
	if sig != 0 {
		return interrupted(sig, "connecting")
	}
	return &exitError{code: 255, err: err}
}

// interrupted is the exit of a command that signal sig stopped while
// doing something ("connecting"): 128+sig, "interrupted while connecting"
// for SIGINT, "terminated while connecting" for SIGTERM.
func interrupted(sig syscall.Signal, while string) error {
	what := "interrupted"
	if sig != syscall.SIGINT {
		what = sig.String()
	}
	return &exitError{code: 128 + int(sig), err: fmt.Errorf("%s while %s", what, while)}
}

// withConn dials url, runs fn with the connection, and closes it; a dial
// failure exits 255, a signal while dialling 128+n (dialFailed). Once
// connected, signals have their default effect again.
func (f *connFlags) withConn(url string, fn func(ctx context.Context, conn *client.Conn) error) error {
	dctx, caught, stop := signalContext(os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	conn, err := f.dial(dctx, url)
	sig := f.dialSignal(dctx, err, caught)
	stop()
	if err != nil || sig != 0 {
		if conn != nil {
			_ = conn.Close()
		}
		return dialFailed(err, sig)
	}
	defer conn.Close()
	return fn(context.Background(), conn)
}

// terminalArgs are the terminal ids among the arguments of attach or
// kill: those after the URL. With --via and no URL first, all of them:
// connFlags also checks the arguments as given, before it puts viaURL in
// (an empty id is no URL left out).
func terminalArgs(cf *connFlags, args []string) []string {
	if len(args) > 0 && cf.via != "" && !isURL(args[0]) {
		return args
	}
	if len(args) == 0 {
		return nil
	}
	return args[1:]
}

// terminalURI accepts "t1" or "ahp-terminal:/t1".
func terminalURI(s string) string {
	if strings.HasPrefix(s, rpc.TerminalScheme) {
		return s
	}
	return rpc.TerminalScheme + "/" + s
}

func newTerminalID(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + "-" + hex.EncodeToString(b[:])
}

func runCmd() *cobra.Command {
	var cf connFlags
	cmd := &cobra.Command{
		Use:     "run URL [flags] -- CMD [ARGS...]",
		Short:   "Run a command in a new terminal, copy its output, exit with its status",
		Example: `  sidecar run wss://127.0.0.1:4433/ahp --token T --cert-hash H -- sh -c 'echo $((6*7)); exit 3'`,
		Args: func(cmd *cobra.Command, args []string) error {
			dash := cmd.ArgsLenAtDash()
			switch {
			case cf.via != "" && dash == 0 && len(args) >= 1:
				// With --via the URL is left out.
			case dash != 1 || len(args) < 2:
				return errors.New("usage: sidecar run URL [flags] -- CMD [ARGS...]   (or: sidecar run --via CMD -- CMD [ARGS...])")
			}
			if args[dash] == "" {
				return errors.New("empty program name after --; usage: sidecar run URL [flags] -- CMD [ARGS...]")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if cf.via != "" && cmd.ArgsLenAtDash() == 0 {
				args = append([]string{viaURL}, args...)
			}
			return runCommand(cmd.Context(), &cf, args[0], args[1:])
		},
	}
	cf.register(cmd)
	return cmd
}

func runCommand(ctx context.Context, cf *connFlags, url string, argv []string) error {
	// However the client ends (Ctrl-C with piped stdin, a closed stdout
	// pipe, hang-up, TERM), the deferred dispose below ends the remote
	// command too; the exit status is then 128+signal.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var caught atomic.Int32
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGINT)
	defer signal.Stop(sigs)
	// A closed stdout shows as EPIPE from Copy (exit 141 below); a --via
	// command that exits makes our write to its stdin fail the same way,
	// which is no reason to stop.
	pipeErrorsNotSignals()
	go func() {
		select {
		case sig := <-sigs:
			caught.Store(int32(sig.(syscall.Signal)))
			cancel()
		case <-ctx.Done():
		}
	}()
	signalExit := func() error {
		if n := caught.Load(); n != 0 {
			return &exitError{code: 128 + int(n)}
		}
		return nil
	}
	conn, err := cf.dial(ctx, url)
	if err != nil {
		return dialFailed(err, cf.dialSignal(ctx, err, func() syscall.Signal { return syscall.Signal(caught.Load()) }))
	}
	defer conn.Close()
	stdinTTY := term.IsTerminal(int(os.Stdin.Fd()))
	stdoutTTY := term.IsTerminal(int(os.Stdout.Fd()))
	cols, rows := 80, 24
	if stdoutTTY {
		if w, h, err := term.GetSize(int(os.Stdout.Fd())); err == nil {
			cols, rows = w, h
		}
	}
	uri := terminalURI(newTerminalID("run"))
	params := rpc.CreateTerminalParams{Channel: uri, Command: argv, Cols: cols, Rows: rows}
	if !stdinTTY {
		off := false
		params.Echo = &off // piped input is not typed: do not copy it to the output
	}
	if err := conn.Call(ctx, rpc.MethodCreateTerminal, params, nil); err != nil {
		var re *rpc.Error
		if errors.As(err, &re) && re.Data != nil {
			var d rpc.StartErrorData
			_ = json.Unmarshal(re.Data, &d)
			switch d.Kind { // as a shell reports them
			case "commandNotFound":
				return &exitError{code: 127, err: fmt.Errorf("cannot start %s: command not found on the host", argv[0])}
			case "permissionDenied":
				return &exitError{code: 126, err: fmt.Errorf("cannot start %s: permission denied on the host (not executable?)", argv[0])}
			}
		}
		return &exitError{code: 255, err: fmt.Errorf("cannot start %s: %w", argv[0], err)}
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = conn.Call(dctx, rpc.MethodDisposeTerminal, rpc.ChannelParams{Channel: uri}, nil)
	}()
	t, err := client.OpenTerminal(ctx, conn, uri)
	if err != nil {
		return &exitError{code: 255, err: err}
	}
	if stdinTTY {
		restore, err := makeRaw(os.Stdin)
		if err == nil {
			defer restore()
		}
		var holding atomic.Bool // run created the terminal: it holds it
		holding.Store(true)
		go watchResize(ctx, t, &holding)
	}
	go forwardInput(ctx, t, os.Stdin, nil, !stdinTTY)
	var out io.Writer = os.Stdout
	if !stdoutTTY {
		out = &crlfWriter{w: os.Stdout}
	}
	code, err := t.Copy(ctx, out, true)
	if err != nil {
		if e := signalExit(); e != nil {
			return e // quietly, as a shell would
		}
		if errors.Is(err, syscall.EPIPE) {
			return &exitError{code: 128 + int(syscall.SIGPIPE)}
		}
		return &exitError{code: 255, err: err}
	}
	if cw, ok := out.(*crlfWriter); ok {
		cw.Flush()
	}
	if code == nil {
		return &exitError{code: 255, err: errors.New("the command was killed without an exit status")}
	}
	if *code != 0 {
		return &exitError{code: *code}
	}
	return nil
}

func attachCmd() *cobra.Command {
	var cf connFlags
	var name string
	cmd := &cobra.Command{
		Use:   "attach URL [TERMINAL]",
		Short: "Open an interactive shell, or reattach to a running terminal by id",
		Long: `Open a new interactive shell on the host, or reattach to TERMINAL (an id
from "sidecar ls", or a full ahp-terminal:/ URI). Type ~. after a newline to
detach: the terminal keeps running and can be reattached (not through --via:
a sidecar stdio host ends with its client, and its terminals with it).

Reattaching takes the terminal over from the client that left: your output is
then paced by you, and nothing is skipped. While that client is still
connected you share the terminal instead (said when you attach): you both
type, its window size and pace rule, and you skip ahead when you fall behind;
when it leaves, the terminal passes to you (said too).`,
		Args: func(cmd *cobra.Command, args []string) error {
			if err := cobra.RangeArgs(1, 2)(cmd, args); err != nil {
				return err
			}
			if slices.Contains(terminalArgs(&cf, args), "") {
				return errors.New("empty terminal id: give one that sidecar ls shows, or none for a new shell")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			id := ""
			if len(args) == 2 {
				id = args[1]
			}
			return attach(&cf, args[0], id, name)
		},
	}
	cf.register(cmd)
	cmd.Flags().StringVar(&name, "name", "", "title of a new terminal")
	return cmd
}

func attach(cf *connFlags, url, id, name string) error {
	if !term.IsTerminal(int(os.Stdin.Fd())) {
		return &exitError{code: 2, err: errors.New("attach is interactive and stdin is not a terminal; use sidecar run URL -- CMD for commands fed from a pipe")}
	}
	// SIGINT too: Ctrl-C while connecting (once in raw mode, Ctrl-C is a
	// byte for the shell and the terminal sends no signal).
	ctx, caught, stop := signalContext(os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	conn, err := cf.dial(ctx, url)
	if err != nil {
		return dialFailed(err, cf.dialSignal(ctx, err, caught))
	}
	defer conn.Close()
	fd := int(os.Stdin.Fd())
	cols, rows := 80, 24
	if w, h, err := term.GetSize(int(os.Stdout.Fd())); err == nil {
		cols, rows = w, h
	}
	created := false
	var uri string
	if id == "" {
		uri = terminalURI(newTerminalID("t"))
		if err := conn.Call(ctx, rpc.MethodCreateTerminal, rpc.CreateTerminalParams{Channel: uri, Name: name, Cols: cols, Rows: rows}, nil); err != nil {
			return &exitError{code: 255, err: fmt.Errorf("cannot start a shell: %w", err)}
		}
		created = true
	} else {
		uri = terminalURI(id)
	}
	t, err := client.OpenTerminal(ctx, conn, uri)
	if err != nil {
		var re *rpc.Error
		if errors.As(err, &re) && re.Code == rpc.CodeNotFound {
			return &exitError{code: 255, err: noTerminal(uri, cf.lsCommand(url))}
		}
		return &exitError{code: 255, err: err}
	}
	if term.IsTerminal(fd) {
		restore, err := makeRaw(os.Stdin)
		if err != nil {
			return &exitError{code: 255, err: err}
		}
		defer restore()
	}
	var holding atomic.Bool
	if !created {
		// Reattaching: take the terminal over from a holder that has
		// gone, so our output is paced and none of it skipped. While
		// another client holds it we share it, until the host passes
		// the claim on to us when that one leaves.
		shared := false
		t.OnClaim = func(err error) {
			switch {
			case err != nil:
				shared = true
				holding.Store(false)
				fmt.Fprintf(os.Stderr, "\r\nsidecar: another connected client holds %s; you share it, and output is skipped when you fall behind\r\n", uri)
			case !holding.Swap(true):
				// Ours now: our size wins.
				if w, h, err := term.GetSize(int(os.Stdout.Fd())); err == nil {
					_ = t.Resize(ctx, w, h)
				}
				if shared {
					shared = false
					fmt.Fprintf(os.Stderr, "\r\nsidecar: the other client left: you hold %s now\r\n", uri)
				}
			}
		}
		t.Claim()
	} else {
		// Our size wins on attach; later on every SIGWINCH, while we
		// hold the terminal (a client sharing it does not resize it
		// under its holder).
		holding.Store(true)
		_ = t.Resize(ctx, cols, rows)
	}
	go watchResize(ctx, t, &holding)
	detached := make(chan struct{})
	go forwardInput(ctx, t, os.Stdin, detached, false)
	copyDone := make(chan struct{})
	var code *int
	var copyErr error
	go func() {
		defer close(copyDone)
		code, copyErr = t.Copy(ctx, os.Stdout, true)
	}()
	select {
	case <-detached:
		if cf.via != "" {
			// The host is the --via command's sidecar stdio: it ends when
			// we close its stdin, and kills its terminals as it goes.
			fmt.Fprintf(os.Stderr, "\r\nsidecar: detached from %s, which ends with this --via session: a sidecar stdio host keeps no terminal once its client has gone\r\n", uri)
			return nil
		}
		fmt.Fprintf(os.Stderr, "\r\nsidecar: detached from %s; reattach with: %s attach %s %s%s\r\n", uri, selfName(), url, strings.TrimPrefix(uri, rpc.TerminalScheme+"/"), cf.explicitFlags())
		return nil
	case <-copyDone:
	}
	if copyErr != nil {
		if sig := caught(); sig != 0 {
			return &exitError{code: 128 + int(sig)} // 143 for SIGTERM, 129 for SIGHUP
		}
		fmt.Fprint(os.Stderr, "\r\n") // the output may have stopped mid-line
		return &exitError{code: 255, err: copyErr}
	}
	if created || code != nil {
		dctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = conn.Call(dctx, rpc.MethodDisposeTerminal, rpc.ChannelParams{Channel: uri}, nil)
		cancel()
	}
	if code == nil {
		return &exitError{code: 255, err: errors.New("the shell was killed")}
	}
	if *code != 0 {
		return &exitError{code: *code}
	}
	return nil
}

// noTerminal is the error of a terminal the host does not have; ls is
// how to list the ones it has (connFlags.lsCommand).
func noTerminal(uri, ls string) error {
	return fmt.Errorf("no terminal %s on this host (%s lists them)", uri, ls)
}

// lsCommand is the sidecar ls that lists the terminals of the host at url
// (through --via when given).
func (f *connFlags) lsCommand(url string) string {
	if f.via != "" {
		return fmt.Sprintf("sidecar ls --via %q", f.via)
	}
	return "sidecar ls " + url
}

// explicitFlags repeats the connection flags given on the command line
// (so a printed command can be pasted as is); values from the environment
// stay there.
func (f *connFlags) explicitFlags() string {
	var b strings.Builder
	if f.token != "" {
		fmt.Fprintf(&b, " --token %s", f.token)
	}
	if f.certHash != "" {
		fmt.Fprintf(&b, " --cert-hash %s", f.certHash)
	}
	if f.via != "" {
		fmt.Fprintf(&b, " --via %q", f.via)
	}
	return b.String()
}

// selfName is how to run this binary again: its path when it was started
// by path (./bin/sidecar), else "sidecar".
func selfName() string {
	if strings.Contains(os.Args[0], "/") {
		return os.Args[0]
	}
	return "sidecar"
}

func killCmd() *cobra.Command {
	var cf connFlags
	cmd := &cobra.Command{
		Use:   "kill URL TERMINAL...",
		Short: "Dispose of terminals: kill their process groups and remove them",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) < 2 {
				return errors.New("usage: sidecar kill URL TERMINAL... (terminal ids as sidecar ls shows them)")
			}
			if slices.Contains(terminalArgs(&cf, args), "") {
				return errors.New("empty terminal id: give the ids sidecar ls shows")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return cf.withConn(args[0], func(ctx context.Context, conn *client.Conn) error {
				failed := 0
				for _, id := range args[1:] {
					uri := terminalURI(id)
					if err := conn.Call(ctx, rpc.MethodDisposeTerminal, rpc.ChannelParams{Channel: uri}, nil); err != nil {
						var re *rpc.Error
						if errors.As(err, &re) && re.Code == rpc.CodeNotFound {
							fmt.Fprintf(os.Stderr, "sidecar: %v\n", noTerminal(uri, cf.lsCommand(args[0])))
						} else {
							fmt.Fprintf(os.Stderr, "sidecar: %s: %s\n", id, printable(err.Error()))
						}
						failed++
					}
				}
				if failed > 0 {
					return &exitError{code: 255} // what went wrong is said above
				}
				return nil
			})
		},
	}
	cf.register(cmd)
	return cmd
}

func makeRaw(f *os.File) (func(), error) {
	state, err := term.MakeRaw(int(f.Fd()))
	if err != nil {
		return nil, err
	}
	return func() { _ = term.Restore(int(f.Fd()), state) }, nil
}

// watchResize sends terminal/resized on every SIGWINCH.
func watchResize(ctx context.Context, t *client.Terminal, holding *atomic.Bool) {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGWINCH)
	defer signal.Stop(ch)
	for {
		select {
		case <-ch:
			if w, h, err := term.GetSize(int(os.Stdout.Fd())); err == nil && holding.Load() {
				_ = t.Resize(ctx, w, h)
			}
		case <-ctx.Done():
			return
		case <-t.Done():
			return
		}
	}
}

// forwardInput copies r to the terminal. With detach set, "~." after a
// newline closes it instead (ssh's escape). With eofCtrlD, the end of r
// sends ^D so a program reading its input sees end of file.
func forwardInput(ctx context.Context, t *client.Terminal, r io.Reader, detach chan struct{}, eofCtrlD bool) {
	var esc escapeFilter
	buf := make([]byte, 4096)
	midLine := false
	for {
		n, err := r.Read(buf)
		if n > 0 {
			data := buf[:n]
			midLine = data[len(data)-1] != '\n'
			if detach != nil {
				var hit bool
				data, hit = esc.Filter(data)
				if len(data) > 0 {
					if t.Input(ctx, data) != nil {
						return
					}
				}
				if hit {
					close(detach)
					return
				}
				continue
			}
			if t.Input(ctx, data) != nil {
				return
			}
		}
		if err != nil {
			if detach != nil {
				// The user's terminal is gone (end of file, or EIO
				// after a hangup without a controlling terminal): leave
				// as ~. does, so the claim passes on at once.
				close(detach)
				return
			}
			if eofCtrlD {
				// The terminal's line discipline turns ^D into end of
				// file at the start of a line; mid-line the first ^D only
				// hands over the partial line, so a second one is needed.
				eof := []byte{4}
				if midLine {
					eof = []byte{4, 4}
				}
				_ = t.Input(ctx, eof)
			}
			return
		}
	}
}

// crlfWriter turns the PTY's "\r\n" into "\n" when output goes to a file
// or pipe, holding back a trailing '\r' until the next write.
type crlfWriter struct {
	w       io.Writer
	pending bool
	buf     []byte
}

func (c *crlfWriter) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	c.buf = c.buf[:0]
	if c.pending {
		c.pending = false
		if len(p) == 0 || p[0] != '\n' {
			c.buf = append(c.buf, '\r')
		}
	}
	for i := 0; i < len(p); i++ {
		if p[i] == '\r' {
			if i+1 == len(p) {
				c.pending = true
				break
			}
			if p[i+1] == '\n' {
				continue
			}
		}
		c.buf = append(c.buf, p[i])
	}
	if _, err := c.w.Write(c.buf); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Flush writes a held-back '\r'.
func (c *crlfWriter) Flush() {
	if c.pending {
		c.pending = false
		_, _ = c.w.Write([]byte{'\r'})
	}
}

func lsCmd() *cobra.Command {
	var cf connFlags
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "ls URL",
		Short: "List the host's terminals and listening TCP ports",
		Long: `List the host's terminals (id, title, who claims them, status) and the TCP
ports listening on the host, with the process that owns each where the host
may see it (the ports to give sidecar forward -L). The host reads its
listening ports every 3 seconds, so a port opened a moment ago may be
missing.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return cf.withConn(args[0], func(ctx context.Context, conn *client.Conn) error {
				return listHost(ctx, conn, asJSON)
			})
		},
	}
	cf.register(cmd)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the root state as JSON")
	return cmd
}

// listHost prints the terminals and listening ports of the host.
func listHost(ctx context.Context, conn *client.Conn, asJSON bool) error {
	st, err := conn.RootState(ctx)
	if err != nil {
		return &exitError{code: 255, err: err}
	}
	if asJSON {
		b, _ := json.MarshalIndent(st, "", "  ")
		fmt.Println(string(b))
		return nil
	}
	var terms table
	terms.row("TERMINAL", "TITLE", "CLAIM", "STATUS")
	for _, t := range st.Terminals {
		status := "running"
		switch {
		case t.ExitCode != nil:
			status = fmt.Sprintf("exited (%d)", *t.ExitCode)
		case t.Signal != "":
			status = "killed (" + t.Signal + ")"
		}
		claim := t.Claim.Kind + ":" + t.Claim.ClientID + t.Claim.Session
		terms.row(printable(strings.TrimPrefix(t.Resource, rpc.TerminalScheme+"/")), printable(t.Title), printable(claim), printable(status))
	}
	if err := terms.write(os.Stdout); err != nil {
		return err
	}
	if len(st.Ports) > 0 {
		fmt.Fprintln(os.Stdout)
		var ports table
		ports.row("LISTENING", "PROCESS")
		for _, p := range st.Ports {
			ports.row(printable(net.JoinHostPort(p.Address, strconv.Itoa(p.Port))), printable(p.Process))
		}
		return ports.write(os.Stdout)
	}
	return nil
}

// printable is s for a table on the user's terminal: control characters
// (C0, DEL, C1: an escape sequence in a terminal's title would clear or
// retitle the screen of whoever lists it, a tab or \r would break the
// columns) and invalid UTF-8 are written as Go escapes (\x1b, \u009b).
func printable(s string) string {
	clean := true
	for _, r := range s {
		if r == utf8.RuneError || unicode.IsControl(r) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n <= 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case unicode.IsControl(r):
			q := strconv.QuoteRuneToASCII(r) // '\x1b', '\u009b', '\t'
			b.WriteString(q[1 : len(q)-1])
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

func tokenCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "token",
		Short: "Print a new random token (for auth.token or SIDECAR_TOKEN)",
		Args:  cobra.NoArgs,
		Run: func(*cobra.Command, []string) {
			fmt.Println(config.NewToken())
		},
	}
}

func certCmd() *cobra.Command {
	var configFile, stateDir string
	cmd := &cobra.Command{
		Use:   "cert",
		Short: "Print the pin (--cert-hash) of the certificate sidecar serve uses",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			cfg, err := config.Load(configFile)
			if err != nil {
				return &exitError{code: 2, err: err}
			}
			if stateDir != "" {
				cfg.StateDir = stateDir
			}
			var c = struct{}{}
			_ = c
			if cfg.TLS.CertFile != "" {
				cert, err := tlscert.Load(cfg.TLS.CertFile, cfg.TLS.KeyFile)
				if err != nil {
					return err
				}
				fmt.Println(tlscert.Pin(cert))
				return nil
			}
			cs, err := newCertSource(cfg, nil)
			if err != nil {
				return err
			}
			fmt.Println(cs.pin())
			return nil
		},
	}
	cmd.Flags().StringVar(&configFile, "config", "", "configuration file")
	cmd.Flags().StringVar(&stateDir, "state-dir", "", "state directory")
	return cmd
}

// parseOrigin returns the host[:port] of an origin URL.
func parseOrigin(o string) (string, error) {
	u, err := url.Parse(o)
	if err != nil || u.Host == "" {
		return "", fmt.Errorf("bad origin %q", o)
	}
	return u.Host, nil
}
