package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/sidecar-dev/sidecar/client"
	"github.com/sidecar-dev/sidecar/rpc"
)

func runCmd() *cobra.Command {
	var cf connFlags
	cmd := &cobra.Command{
		Use:   "run URL [flags] -- CMD [ARGS...]",
		Short: "Run a command in a new terminal, copy its output, exit with its status",
		Long: `Run CMD in a new terminal on the host, copy its output here and exit with its
status. With a terminal on stdin, input is typed raw (Ctrl-C goes to CMD); type ~.
after Enter to end run at once (exit 255, CMD is ended too), even while it
reconnects.

Exit status: CMD's, whatever it is (128+n when signal n killed it), passed
through as it is. run's own failures are 255 (the connection failed or was
lost, ~.), 127 and 126 (CMD not found or not executable on the host, as a
shell says), 2 (a usage error) and 128+n (signal n ended run, and CMD with
it). A status alone cannot tell CMD's 255 from run's, as with ssh; run's own
failures but the signals print a "sidecar:" line on stderr saying what
failed, while CMD's output, its stderr included, comes on stdout through the
terminal: with CMD's status, stderr holds at most run's reconnection notices.`,
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
	stdinTTY := term.IsTerminal(int(os.Stdin.Fd()))
	stdoutTTY := term.IsTerminal(int(os.Stdout.Fd()))
	// The command carries on across a lost connection; say so on stderr,
	// between output writes when both go to the terminal.
	var screen *statusOutput
	if stdoutTTY {
		screen = newStatusOutput(os.Stdout, os.Stderr, termWidth(os.Stdout))
	}
	cf.onReconnect = func(st client.ReconnectStatus) {
		l := reconnectLine(st)
		switch {
		case l == "":
		case screen != nil:
			screen.Status(l)
		case stdinTTY: // raw mode: the terminal does not return the carriage
			fmt.Fprintf(os.Stderr, "sidecar: %s\r\n", l)
		default:
			fmt.Fprintf(os.Stderr, "sidecar: %s\n", l)
		}
	}
	conn, err := cf.dial(ctx, url)
	if err != nil {
		return dialFailed(err, cf.dialSignal(ctx, err, func() syscall.Signal { return syscall.Signal(caught.Load()) }))
	}
	defer conn.Close()
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
	var escaped atomic.Bool // ~. typed: the user ends run, even while it reconnects
	defer func() {
		wait := 5 * time.Second
		if escaped.Load() {
			wait = 2 * time.Second // the user asked to leave now
		}
		dctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		err := conn.Call(dctx, rpc.MethodDisposeTerminal, rpc.ChannelParams{Channel: uri}, nil)
		if escaped.Load() && err != nil {
			fmt.Fprintf(os.Stderr, "sidecar: could not end %s on the host (%v); end it with: %s\r\n", uri, err, cf.terminalCommand("kill", url, uri))
		}
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
	// Typed input (a terminal in raw mode) has ssh's escape: ~. after
	// Enter ends run at once, the way out while it reconnects (Ctrl-C goes
	// to the command). The command is disposed as on any other exit.
	var escape chan struct{}
	if stdinTTY {
		escape = make(chan struct{})
		go func() {
			select {
			case <-escape:
				escaped.Store(true)
				cancel()
			case <-ctx.Done():
			}
		}()
	}
	go forwardInput(ctx, t, os.Stdin, escape, nil, !stdinTTY)
	var out io.Writer = os.Stdout
	if !stdoutTTY {
		out = &crlfWriter{w: os.Stdout}
	} else {
		out = screen
	}
	code, err := t.Copy(ctx, out, true)
	if err != nil {
		if escaped.Load() {
			if stdoutTTY {
				fmt.Fprint(os.Stderr, "\r\n") // the output may have stopped mid-line
			}
			return &exitError{code: 255, err: errors.New("closed by the ~. escape")}
		}
		if e := signalExit(); e != nil {
			return e // quietly, as a shell would
		}
		if errors.Is(err, syscall.EPIPE) {
			return &exitError{code: 128 + int(syscall.SIGPIPE)}
		}
		if stdoutTTY {
			fmt.Fprint(os.Stderr, "\r\n") // the output may have stopped mid-line
		}
		if errors.Is(err, client.ErrResumeExpired) && cf.via == "" && !hostHasTerminal(ctx, cf, url, uri) {
			// The host answered but keeps nothing of ours, and lists no
			// such terminal: it restarted (its terminals with it), or the
			// grace ended and the terminal was disposed.
			return &exitError{code: 255, err: fmt.Errorf("%w\nsidecar: the host no longer has %s (it restarted, or the grace ended): %s is not running there", err, uri, argv[0])}
		}
		if errors.Is(err, client.ErrConnectionLost) && !errors.Is(err, client.ErrNotKept) && cf.via == "" {
			// Gave up reconnecting: the command runs on unless the host
			// itself went (the dispose on the way out cannot reach it).
			return &exitError{code: 255, err: fmt.Errorf("%w\nsidecar: %s may still be running on the host as %s; see it with: %s; end it with: %s",
				err, argv[0], uri, cf.terminalCommand("attach", url, uri), cf.terminalCommand("kill", url, uri))}
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

// hostHasTerminal reports whether the host at url lists the terminal uri,
// asked on a connection of its own within 5 s; true when it cannot tell
// (the hint that the command may still run stays then).
func hostHasTerminal(ctx context.Context, cf *connFlags, url, uri string) bool {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	opts := cf.options()
	opts.OnDialRetry = nil // a question of its own: nothing to say while it waits
	conn, err := cf.dialOptions(ctx, url, opts)
	if err != nil {
		return true
	}
	defer conn.Close()
	st, err := conn.RootState(ctx)
	if err != nil {
		return true
	}
	for _, t := range st.Terminals {
		if t.Resource == uri {
			return true
		}
	}
	return false
}
