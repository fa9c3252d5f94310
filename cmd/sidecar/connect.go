package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	tcpadapter "github.com/sidecar-dev/sidecar/adapters/tcp"
	"github.com/sidecar-dev/sidecar/client"
)

// Exit statuses of connect besides 0 (both directions ended), 2 (usage),
// 255 (the connection to the host failed or was lost for good) and
// 128+n (signal n).
const (
	// exitConnectStream: the forwarded connection itself failed: the
	// destination refused it (or the host's policy did), reset it, or a
	// resumed session lacked it (client.ErrNotKept); or reading standard
	// input or writing standard output failed. Its end was not an orderly one: what came out may be
	// cut short.
	exitConnectStream = 1
)

func connectCmd() *cobra.Command {
	var cf connFlags
	var verbose bool
	cmd := &cobra.Command{
		Use:   "connect URL HOST:PORT",
		Short: "Make standard input and output one TCP connection to HOST:PORT on the host (for ssh's ProxyCommand)",
		Long: `Make standard input and output one TCP connection to HOST:PORT, dialled by
the host under its tcp.allow policy (loopback only by default), as
ssh -W does: what comes in on standard input goes to HOST:PORT, what
HOST:PORT sends comes out on standard output, and nothing else does.
It is a forwarded connection like those of forward -L: it resumes across
a lost connection to the host (a laptop that sleeps, a path gone silent)
with no byte lost or duplicated, and holds at most its windows.

It is made for ssh's ProxyCommand, so that ssh, scp, rsync, git and
editors' remote modes reach the workload's sshd through the sidecar:

  ssh -o ProxyCommand='sidecar connect wss://vm:4433/ahp localhost:%p' user@vm

The token comes from $SIDECAR_TOKEN or --token-file, the pin from
$SIDECAR_CERT_HASH or --cert-hash, so that no secret is on a command
line. Put IPv6 addresses in brackets ([::1]:22); ssh's %h:%p with an
IPv6 address (::1:22) is read as address and port too.

End of file on standard input half-closes the connection (the
destination reads end of file and may still answer); the destination's
end of file closes standard output; connect exits 0 once both have
happened. Standard error says something only when something goes wrong
(--verbose adds the connection's steps).

Exit status: 0 when both directions ended; 1 when the forwarded
connection failed: the destination refused it or the host's policy did,
the destination reset it, a resumed session lacked it, or standard
output could not be written (standard output may then be cut short);
255 when the connection to the host could not be made or was lost for
good (the host's grace ended, the daemon restarted, or its address
refuses connections for 12 s: a relay in front of the daemon that
restarts within that resumes with nothing lost); 2 for a usage error; 128+n
when signal n ended it, the connection reset. ssh closes standard input
and then sends its ProxyCommand SIGHUP as it exits: after SIGHUP,
connect lets that orderly close finish for up to 2 s (exit 0 when it
does), and resets what is left then (129, silently).`,
		Example: `  SIDECAR_TOKEN=… sidecar connect wss://127.0.0.1:4433/ahp localhost:22
  sidecar connect --via 'kubectl exec -i POD -c sidecar -- sidecar stdio' localhost:22`,
		Args: connectArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			host, port, _ := parseDest(args[1]) // checked by connectArgs
			return connect(&cf, args[0], host, port, verbose)
		},
	}
	cf.register(cmd)
	// TCP channels need windowed delivery: --ordinary is refused.
	_ = cmd.Flags().MarkHidden("ordinary")
	cmd.Flags().BoolVarP(&verbose, "verbose", "v", false, "say on standard error when connected, reconnecting and resumed")
	return cmd
}

// connectArgs takes the URL (with --via, connFlags puts "stdio:" in for
// a missing one) and HOST:PORT, which must parse (parseDest).
func connectArgs(_ *cobra.Command, args []string) error {
	switch len(args) {
	case 0:
		return errors.New("missing URL and HOST:PORT: sidecar connect URL HOST:PORT")
	case 1:
		return fmt.Errorf("missing HOST:PORT after %q: sidecar connect URL HOST:PORT", args[0])
	case 2:
		_, _, err := parseDest(args[1])
		return err
	}
	return fmt.Errorf("unexpected argument %q: connect takes a URL and HOST:PORT", args[2])
}

// parseDest parses HOST:PORT, IPv6 addresses in brackets, or without
// them as ssh's %h:%p gives one (::1:22: the port after the last colon).
func parseDest(s string) (string, int, error) {
	host, portText, err := net.SplitHostPort(s)
	if err != nil {
		i := strings.LastIndexByte(s, ':')
		if a, perr := netip.ParseAddr(s[:max(i, 0)]); i < 0 || perr != nil || !a.Is6() {
			return "", 0, fmt.Errorf("bad HOST:PORT %q: want host:port, IPv6 addresses in brackets ([::1]:22)", s)
		}
		host, portText = s[:i], s[i+1:]
	}
	if host == "" {
		return "", 0, fmt.Errorf("bad HOST:PORT %q: no host", s)
	}
	if err := tcpadapter.CheckHost(host); err != nil {
		return "", 0, fmt.Errorf("bad HOST:PORT %q: host %v", s, err)
	}
	port, err := parsePort(portText, false)
	if err != nil {
		return "", 0, fmt.Errorf("bad HOST:PORT %q: %v", s, err)
	}
	return host, port, nil
}

func connect(cf *connFlags, url, host string, port int, verbose bool) error {
	if cf.ordinary {
		return &exitError{code: 2, err: errors.New("--ordinary is not for connect: TCP channels need windowed delivery")}
	}
	setGCPercent(forwardGCPercent)
	dest := net.JoinHostPort(host, strconv.Itoa(port))
	sigCtx, caughtSig, stop := signalContext(os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, caughtHup, stopHup := hangupContext(sigCtx, hupDrain)
	defer stopHup()
	caught := func() syscall.Signal {
		if sig := caughtSig(); sig != 0 {
			return sig
		}
		return caughtHup()
	}
	// A daemon whose address refuses connections is gone with the state
	// that could resume the connection: say so at once rather than keep
	// ssh waiting for the grace (2 h by default), as forward does.
	cf.giveUpWhenRefused = true
	// Not at the first refusal, though: a relay or tunnel in front of a
	// live daemon refuses while it restarts, and the daemon keeps the
	// connection (sshd's session) for the grace.
	cf.refusedRetry = connectRefusedRetry
	if verbose {
		cf.onReconnect = func(st client.ReconnectStatus) {
			if st.State == client.Connecting {
				return
			}
			if l := reconnectLine(st); l != "" {
				fmt.Fprintf(os.Stderr, "sidecar: %s\n", l)
			}
		}
	}
	conn, err := cf.dial(ctx, url)
	if err != nil {
		return dialFailed(err, cf.dialSignal(ctx, err, caught))
	}
	defer conn.Close()
	if conn.Initialized().TCPConnections == nil {
		return &exitError{code: 255, err: fmt.Errorf("%s does not offer TCP forwarding (no tcpConnections in its capabilities)", url)}
	}
	if verbose {
		if cf.via != "" {
			fmt.Fprintf(os.Stderr, "sidecar: connected through %q\n", cf.via)
		} else if tr := conn.Transport(); tr != "" {
			fmt.Fprintf(os.Stderr, "sidecar: connected to %s over %s\n", url, tr)
		}
	}
	fw := client.NewForwarder(conn, client.ForwarderOptions{})
	defer fw.Close()
	out := &connectStdout{said: func(err error) error { return connectEnded(ctx, err, caught(), conn, dest) }}
	err = fw.Bridge(ctx, os.Stdin, out, host, port)
	if out.ended != nil {
		return out.ended
	}
	return connectEnded(ctx, err, caught(), conn, dest)
}

// connectRefusedRetry is how long connect retries a host address that
// refuses connections before it gives up (exit 255): long enough for a
// relay, ssh tunnel or kubectl port-forward in front of the daemon to
// restart, short enough that ssh is not left waiting on a daemon that is
// gone. Giving up, connect cannot reach the host to release what it
// keeps: a live daemon behind the refusing relay holds the destination
// connection (sshd's session, authenticated, with no client) until its
// grace ends (journal.reconnect_grace, 2 h by default).
const connectRefusedRetry = 12 * time.Second

// hupDrain bounds how long connect goes on after SIGHUP. ssh closes its
// ends of our standard input and output and then sends its ProxyCommand
// SIGHUP at once: its last bytes (the disconnect) are still in our
// standard input, its end of file right behind them. Reset at the
// signal, the destination (sshd) would see a reset where ssh had closed
// in order; so connect lets the close finish, standard input's end of
// file going through as a half-close, and resets only what is not done
// by then.
const hupDrain = 2 * time.Second

// hangupContext returns a context derived from parent that ends drain
// after the first SIGHUP, and which signal ended it (SIGHUP, or 0).
func hangupContext(parent context.Context, drain time.Duration) (ctx context.Context, caught func() syscall.Signal, stop func()) {
	ctx, cancel := context.WithCancel(parent)
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGHUP)
	var got atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		select {
		case <-ch:
		case <-ctx.Done():
			return
		}
		t := time.NewTimer(drain)
		defer t.Stop()
		select {
		case <-t.C:
			got.Store(true) // before cancel: ctx.Err() by the drain implies caught
			cancel()
		case <-ctx.Done():
		}
	}()
	caught = func() syscall.Signal {
		if got.Load() {
			return syscall.SIGHUP
		}
		return 0
	}
	stop = func() {
		signal.Stop(ch)
		cancel()
		<-done
	}
	return ctx, caught, stop
}

// connectStdout is connect's standard output for Bridge. On a failure it
// prints why before it closes: ssh ends its ProxyCommand (SIGHUP) as soon
// as our output ends, and the line would otherwise never be written.
type connectStdout struct {
	said  func(error) error // the exit for Bridge's error (connectEnded)
	ended error             // that exit, its line printed already
}

func (o *connectStdout) Write(p []byte) (int, error) { return os.Stdout.Write(p) }
func (o *connectStdout) Close() error                { return os.Stdout.Close() }

// CloseWithError prints err's line (if it has one) and closes.
func (o *connectStdout) CloseWithError(err error) error {
	var ee *exitError
	if errors.As(o.said(err), &ee) {
		if ee.err != nil {
			fmt.Fprintln(os.Stderr, "sidecar:", ee.err)
		}
		o.ended = &exitError{code: ee.code}
	}
	return os.Stdout.Close()
}

// connectEnded is connect's exit for Bridge's result err.
func connectEnded(ctx context.Context, err error, sig syscall.Signal, conn *client.Conn, dest string) error {
	var oe *client.OpenError
	var le *client.LocalError
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil && sig != 0:
		// Ctrl-C, or ssh ending its ProxyCommand: no line.
		return &exitError{code: 128 + int(sig)}
	case conn.Err() != nil:
		return &exitError{code: 255, err: errors.New(printable(conn.Err().Error()))}
	case errors.As(err, &oe):
		return &exitError{code: exitConnectStream, err: fmt.Errorf("%s: %s", printable(dest), err)}
	case errors.Is(err, client.ErrTCPReset):
		return &exitError{code: exitConnectStream, err: fmt.Errorf("%s: connection reset by the destination", printable(dest))}
	case errors.Is(err, client.ErrNotKept):
		return &exitError{code: exitConnectStream, err: fmt.Errorf("%s: the host could not keep the connection across the reconnect: reset", printable(dest))}
	case errors.As(err, &le) && le.Op == "write":
		return &exitError{code: exitConnectStream, err: fmt.Errorf("standard output: %v; the connection to %s was reset", le.Err, printable(dest))}
	case errors.As(err, &le):
		return &exitError{code: exitConnectStream, err: fmt.Errorf("standard input: %v; the connection to %s was reset", le.Err, printable(dest))}
	}
	return &exitError{code: exitConnectStream, err: fmt.Errorf("%s: %s", printable(dest), printable(err.Error()))}
}
