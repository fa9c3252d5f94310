package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/sidecar-dev/sidecar/client"
	"github.com/sidecar-dev/sidecar/rpc"
)

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
when it leaves, the terminal passes to you (said too). Type ~t after a newline
to take it over at once (the other client then shares it); a client that takes
it from you (the web page's Take over, another attach's ~t) is named, and ~t
takes it back.

Exit status: the shell's (128+n when signal n killed it). A terminal
disposed of while you are attached (sidecar kill) has its process group
killed with SIGHUP: attach says so ("terminal ahp-terminal:/ID was
disposed by client ID" when the host names the client) and exits 129.
4 when TERMINAL is not on the host; 255 when the connection fails or is
lost, or the terminal's share with you is revoked (said: "detached from
ahp-terminal:/ID: permission denied: ..."); 2 for a usage error.

A terminal shared with you read-only (sidecar share --read-only, or your
role is viewer) shows its output; attach says once that it is read-only
and what you type is not sent (the host refuses it).`,
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
	// The terminal's output and our reconnection status share the
	// screen: a status line goes between output writes, on its own line.
	screen := newStatusOutput(os.Stdout, os.Stderr, termWidth(os.Stdout))
	// Input the host does not answer (a link gone silent) is said within
	// seconds, long before the keepalive gives up on the link.
	silence := &silenceWatch{screen: screen}
	cf.onReconnect = func(st client.ReconnectStatus) {
		silence.onReconnect(st)
		if l := reconnectLine(st); l != "" {
			screen.Status(l)
		}
	}
	conn, err := cf.dial(ctx, url)
	if err != nil {
		return dialFailed(err, cf.dialSignal(ctx, err, caught))
	}
	defer conn.Close()
	silence.heard = conn.LastHeard
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
			return &exitError{code: exitNotFound, err: noTerminal(uri, cf.lsCommand(url))}
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
	// While we hold the terminal our size wins (on attach, then on every
	// SIGWINCH); while another client holds it we share it and never
	// resize it under its holder. ~t takes it over (takeOver).
	var holding, takingOver atomic.Bool
	shared := false // told we share it (OnClaim and OnClaimLost run in Copy)
	ourSize := func() {
		if w, h, err := term.GetSize(int(os.Stdout.Fd())); err == nil {
			_ = t.Resize(ctx, w, h)
		}
	}
	// A terminal shared with us read-only (or our role is viewer): the
	// host refuses our keystrokes, resizes and claims with -32009. Say
	// so once, instead of typing into nothing (OnDenied and OnClaim run
	// in Copy).
	readOnly := false
	deniedNotice := func(reason string) {
		if readOnly {
			return
		}
		readOnly = true
		screen.Notice(fmt.Sprintf("%s is read-only for you: you see its output, and what you type is not sent (%s); ~. detaches", uri, printable(reason)),
			"read only: what you type is not sent")
	}
	t.OnDenied = deniedNotice
	t.OnClaim = func(err error) {
		var denied *rpc.Error
		switch {
		case errors.As(err, &denied) && denied.Code == rpc.CodePermissionDenied:
			takingOver.Store(false)
			holding.Store(false)
			deniedNotice(denied.Message)
		case err != nil && takingOver.Swap(false):
			screen.Notice(fmt.Sprintf("cannot take %s over: %v", uri, err), "cannot take the terminal over: "+err.Error())
		case err != nil:
			shared = true
			holding.Store(false)
			screen.Notice(fmt.Sprintf("another connected client holds %s; you share it, and output is skipped when you fall behind (~t takes it over)", uri),
				"shared: another client holds it; output skips if you fall behind")
		case !holding.Swap(true):
			ourSize()
			switch {
			case takingOver.Swap(false):
				screen.Notice(fmt.Sprintf("you took %s over: you hold it now", uri), "you took the terminal over")
			case shared:
				screen.Notice(fmt.Sprintf("the other client left: you hold %s now", uri), "the other client left: you hold the terminal now")
			}
			shared = false
		}
	}
	t.OnClaimLost = func(holder string) {
		if holding.Swap(false) {
			shared = true
			screen.Notice(fmt.Sprintf("client %s took %s over; you share it now: its window size and pace rule (~t takes it back)", printable(holder), uri),
				"another client took the terminal over; ~t takes it back")
		}
	}
	takeOver := func() bool {
		if holding.Load() {
			return false // ours already: "~t" is typed as it is
		}
		takingOver.Store(true)
		if t.TakeOver(ctx) != nil {
			takingOver.Store(false)
		}
		return true
	}
	if !created {
		// Reattaching: take the terminal over from a holder that has
		// gone, so our output is paced and none of it skipped. While
		// another client holds it we share it, until the host passes
		// the claim on to us when that one leaves.
		t.Claim()
	} else {
		holding.Store(true)
		_ = t.Resize(ctx, cols, rows)
	}
	go watchResize(ctx, t, &holding)
	detached := make(chan struct{})
	go forwardInput(ctx, t, silence.tap(os.Stdin), detached, takeOver, false)
	copyDone := make(chan struct{})
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	go silence.run(wctx, copyDone)
	var code *int
	var copyErr error
	go func() {
		defer close(copyDone)
		code, copyErr = t.Copy(ctx, screen, true)
	}()
	select {
	case <-detached:
		if term.IsTerminal(int(os.Stdout.Fd())) {
			// The remote program may have left our terminal on its
			// alternate screen with mouse reporting or bracketed paste
			// on: give the local shell back a plain terminal (a
			// reattach redraws the program's state from its snapshot).
			fmt.Fprint(os.Stdout, client.TerminalReset)
		}
		if cf.via != "" {
			// The host is the --via command's sidecar stdio: it ends when
			// we close its stdin, and kills its terminals as it goes.
			fmt.Fprintf(os.Stderr, "\r\nsidecar: detached from %s, which ends with this --via session: a sidecar stdio host keeps no terminal once its client has gone\r\n", uri)
			return nil
		}
		fmt.Fprintf(os.Stderr, "\r\nsidecar: detached from %s; reattach with: %s\r\n", uri, cf.reattachCommand(url, uri))
		return nil
	case <-copyDone:
	}
	if copyErr != nil {
		if sig := caught(); sig != 0 {
			return &exitError{code: 128 + int(sig)} // 143 for SIGTERM, 129 for SIGHUP
		}
		fmt.Fprint(os.Stderr, "\r\n") // the output may have stopped mid-line
		if errors.Is(copyErr, client.ErrNotKept) {
			// Resumed, but not the terminal: it ended (disposed, or its
			// program exited and it was disposed) while we were away.
			return &exitError{code: 255, err: fmt.Errorf("%s ended on the host while the connection was down (disposed by another client, or its program exited and it was disposed)", uri)}
		}
		if errors.Is(copyErr, client.ErrResumeExpired) {
			// The host has no state for us: it restarted (its terminals
			// with it) or dropped ours; the terminal may be gone.
			return &exitError{code: 255, err: fmt.Errorf("%w\nsidecar: the host no longer knows this client (it restarted, or the grace ended); %s is gone if the host restarted; list what it has with: %s", copyErr, uri, cf.lsCommandFull(url))}
		}
		var ended *rpc.Error
		if errors.As(copyErr, &ended) && ended.Code == rpc.CodePermissionDenied {
			// The host ended our subscription: the terminal's share
			// with us was revoked (channel/ended). Attaching again is
			// refused the same way.
			return &exitError{code: 255, err: fmt.Errorf("detached from %s: %s", uri, printable(ended.Message))}
		}
		if errors.Is(copyErr, client.ErrConnectionLost) && cf.via == "" {
			// Gave up reconnecting: the terminal lives on the host
			// unless the host itself went.
			return &exitError{code: 255, err: fmt.Errorf("%w\nsidecar: %s may still be running on the host; reattach with: %s", copyErr, uri, cf.reattachCommand(url, uri))}
		}
		return &exitError{code: 255, err: copyErr}
	}
	gone := false // the host no longer has the terminal: someone disposed of it
	if created || code != nil {
		dctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := conn.Call(dctx, rpc.MethodDisposeTerminal, rpc.ChannelParams{Channel: uri}, nil)
		cancel()
		var re *rpc.Error
		gone = errors.As(err, &re) && re.Code == rpc.CodeNotFound
	}
	if msg := disposedMessage(uri, t.DisposedBy(), conn.ClientID(), gone); msg != "" {
		// The exit status stays the program's: a disposed terminal's
		// process group is killed with SIGHUP, so 129.
		fmt.Fprintf(os.Stderr, "\r\nsidecar: %s\r\n", msg)
	}
	if code == nil {
		return &exitError{code: 255, err: errors.New("the shell was killed")}
	}
	if *code != 0 {
		return &exitError{code: *code}
	}
	return nil
}

// disposedMessage is the line attach prints when the terminal it showed
// ended because a client disposed of it (sidecar kill): by is the host's
// disposedBy (a clientId, "" when it did not say), self our own clientId,
// gone whether the host no longer had the terminal when we disposed of it
// in turn. It is "" when nobody else disposed of it.
func disposedMessage(uri, by, self string, gone bool) string {
	switch {
	case by == self && by != "":
		return "" // our own dispose: nothing to explain
	case by != "":
		return fmt.Sprintf("terminal %s was disposed by client %s", uri, printable(by))
	case gone:
		return fmt.Sprintf("terminal %s was disposed", uri)
	}
	return ""
}
