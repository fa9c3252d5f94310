package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/sidecar-dev/sidecar/client"
	"github.com/sidecar-dev/sidecar/internal/fileperm"
	"github.com/sidecar-dev/sidecar/rpc"
	"github.com/sidecar-dev/sidecar/transport/tlscert"
)

// connFlags are the connection options every client command takes.
type connFlags struct {
	token     string
	tokenFile string
	// fileToken is what tokenFile holds, read by check.
	fileToken string
	// tokenFileGiven: --token-file was on the command line (an empty
	// value, --token-file=, is then a mistake, not "none").
	tokenFileGiven func() bool
	certHash       string
	ordinary       bool
	timeout        time.Duration
	transport      string
	via            string
	compress       bool

	// onReconnect, when set before dial, is told each step of a
	// reconnection (client.Options.OnReconnect).
	onReconnect func(client.ReconnectStatus)
	// reconnectAfterShutdown: a host that shuts down is reconnected to
	// (client.Options.ReconnectAfterShutdown), for forward.
	reconnectAfterShutdown bool
	// giveUpWhenRefused: a reconnect whose dial is refused ends at once
	// (client.Options.GiveUpWhenRefused), for forward.
	giveUpWhenRefused bool
	// refusedRetry: how long refusals are retried before giving up
	// (client.Options.RefusedRetry), for connect.
	refusedRetry time.Duration
}

func (f *connFlags) register(cmd *cobra.Command) {
	fs := cmd.Flags()
	f.tokenFileGiven = func() bool { return fs.Changed("token-file") }
	fs.StringVar(&f.token, "token", "", "token (default $SIDECAR_TOKEN); --token-file keeps it off the command line")
	fs.StringVar(&f.tokenFile, "token-file", "", "read the token from this file (white space trimmed), as serve's auth.token_file; for commands others start, such as ssh's ProxyCommand")
	fs.StringVar(&f.certHash, "cert-hash", "", "SHA-256 pin of the server certificate, hex (default $SIDECAR_CERT_HASH)")
	fs.BoolVar(&f.ordinary, "ordinary", false, "use ordinary delivery instead of windowed delivery (for debugging)")
	fs.DurationVar(&f.timeout, "connect-timeout", 15*time.Second, "time allowed to connect and initialize")
	fs.StringVar(&f.transport, "transport", client.TransportAuto, "for https:// URLs: auto (WebTransport and WebSocket at once, WebTransport preferred; what worked is remembered per host), webtransport, websocket, or ahp (plain /ahp)")
	fs.BoolVar(&f.compress, "compress", false, "offer WebSocket compression (permessage-deflate): pays for compressible streams (text, logs) on slow links; costs CPU on fast ones")
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

// maxTokenFile bounds what --token-file reads: a token is 43 characters
// (config.NewToken); a larger file is not a token file.
const maxTokenFile = 4 << 10

// readTokenFile reads a --token-file. As ssh does with a private key, it
// refuses a regular file that others than its owner may read or write
// (a token is as good as a key to the host): the error names the mode
// and the chmod that fixes it. Pipes and the like (<(pass show …),
// /dev/stdin) are read as they are. A file over maxTokenFile is refused.
func readTokenFile(path string) ([]byte, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	st, err := fh.Stat()
	if err != nil {
		return nil, err
	}
	if st.Mode().IsRegular() {
		if err := fileperm.Private(path, st); err != nil {
			return nil, err
		}
	}
	b, err := io.ReadAll(io.LimitReader(fh, maxTokenFile+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxTokenFile {
		return nil, fmt.Errorf("%s is larger than %d bytes: not a token", path, maxTokenFile)
	}
	return b, nil
}

// check rejects flag values that cannot work: an unknown --transport, a
// --connect-timeout that is not positive, a pin (--cert-hash or
// $SIDECAR_CERT_HASH) that is no SHA-256, a --token-file that cannot be
// read or is empty, or given with --token. It reads the token file.
func (f *connFlags) check() error {
	if f.tokenFile == "" && f.tokenFileGiven != nil && f.tokenFileGiven() {
		return errors.New("--token-file: give the file's path")
	}
	if f.tokenFile != "" {
		if f.token != "" {
			return errors.New("--token and --token-file are exclusive: give one")
		}
		b, err := readTokenFile(f.tokenFile)
		if err != nil {
			return fmt.Errorf("--token-file: %v", err)
		}
		if f.fileToken = strings.TrimSpace(string(b)); f.fileToken == "" {
			return fmt.Errorf("--token-file: %s is empty", f.tokenFile)
		}
		if strings.ContainsFunc(f.fileToken, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
			// A second line, or a space inside: no token has one, and
			// it would not go into an Authorization header.
			return fmt.Errorf("--token-file: %s holds more than the token (white space or a second line inside it)", f.tokenFile)
		}
	}
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

// options are the client options these flags give; the token (unless
// given by --token or --token-file) and the pin default to $SIDECAR_TOKEN
// and $SIDECAR_CERT_HASH.
func (f *connFlags) options() client.Options {
	token := f.token
	if token == "" {
		token = f.fileToken
	}
	if token == "" {
		token = os.Getenv("SIDECAR_TOKEN")
	}
	pin := f.certHash
	if pin == "" {
		pin = os.Getenv("SIDECAR_CERT_HASH")
	}
	return client.Options{Token: token, CertHash: pin, Ordinary: f.ordinary, ClientName: "sidecar-cli/" + version,
		Transport: f.transport, TransportMemory: client.DefaultTransportMemory(), Via: f.via, OnReconnect: f.onReconnect, Compress: f.compress,
		ReconnectAfterShutdown: f.reconnectAfterShutdown, GiveUpWhenRefused: f.giveUpWhenRefused, RefusedRetry: f.refusedRetry,
		OnDialRetry: f.onDialRetry()}
}

// onDialRetry returns the client's OnDialRetry for one Dial: the first
// time the host cannot decide on the credential, one line on stderr says
// that the CLI waits for it and how long at most (--connect-timeout), so
// that a command that seems to hang says why.
func (f *connFlags) onDialRetry() func(error, time.Duration, time.Duration) {
	told := false
	return func(_ error, _, left time.Duration) {
		if told {
			return
		}
		told = true
		until := "until it decides"
		if left > 0 {
			until = fmt.Sprintf("for up to %v (--connect-timeout)", left.Round(100*time.Millisecond))
		}
		fmt.Fprintf(os.Stderr, "sidecar: the host could not decide on the credential (its identity provider may be unreachable); trying again %s\n", until)
	}
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

// lsCommand is the sidecar ls that lists the terminals of the host at url
// (through --via when given).
func (f *connFlags) lsCommand(url string) string {
	if f.via != "" {
		return fmt.Sprintf("sidecar ls --via %q", f.via)
	}
	return "sidecar ls " + url
}

// lsCommandFull is lsCommand as a command line to paste: the installed
// name and the connection flags given.
func (f *connFlags) lsCommandFull(url string) string {
	if f.via != "" {
		return fmt.Sprintf("%s ls --via %q", selfName(), f.via)
	}
	return fmt.Sprintf("%s ls %s%s", selfName(), url, f.explicitFlags())
}

// reattachCommand is the command line that attaches again to the
// terminal uri of the host at url.
func (f *connFlags) reattachCommand(url, uri string) string {
	return f.terminalCommand("attach", url, uri)
}

// terminalCommand is the command line of sidecar verb (attach, kill) for
// the terminal uri of the host at url, to paste as is.
func (f *connFlags) terminalCommand(verb, url, uri string) string {
	return fmt.Sprintf("%s %s %s %s%s", selfName(), verb, url, strings.TrimPrefix(uri, rpc.TerminalScheme+"/"), f.explicitFlags())
}

// explicitFlags repeats the connection flags given on the command line
// (so a printed command can be pasted as is); values from the environment
// stay there. A token is a secret and is never printed: a --token given
// on the command line comes back as --token "$SIDECAR_TOKEN", as serve
// prints it (screens are shared and recorded; the shell's history already
// has it where the user put it).
func (f *connFlags) explicitFlags() string {
	var b strings.Builder
	if f.token != "" {
		b.WriteString(` --token "$SIDECAR_TOKEN"`)
	}
	if f.tokenFile != "" {
		fmt.Fprintf(&b, " --token-file %q", f.tokenFile)
	}
	if f.certHash != "" {
		fmt.Fprintf(&b, " --cert-hash %s", f.certHash)
	}
	if f.via != "" {
		fmt.Fprintf(&b, " --via %q", f.via)
	}
	if f.transport != "" && f.transport != client.TransportAuto {
		fmt.Fprintf(&b, " --transport %s", f.transport)
	}
	return b.String()
}
