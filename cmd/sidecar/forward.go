package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/sidecar-dev/sidecar/client"
)

// forwardDrain bounds how long Ctrl-C waits for open channels to close.
const forwardDrain = 3 * time.Second

func forwardCmd() *cobra.Command {
	var cf connFlags
	var locals, dynamics, remotes []string
	cmd := &cobra.Command{
		Use:   "forward URL -L [bind:]port:host:hostport ... [-D [bind:]port ...] [-R [bind:]port:host:hostport ...]",
		Short: "Forward TCP ports through the host, like ssh -L, -D and -R",
		Long: `Forward local TCP ports through the host, as ssh -L and -D do.

-L [bind:]port:host:hostport listens on bind:port and opens, for every
accepted connection, one TCP channel on which the host connects to
host:hostport. host is resolved on the host, and must be allowed by its
tcp.allow policy (loopback only by default). Put IPv6 addresses in
brackets: -L 8080:[::1]:3000.

The bind address is as ssh's: none (-L 8080:...) listens on 127.0.0.1
only; an empty one (-L :8080:...) or * (-L '*:8080:...') on all
interfaces (0.0.0.0 and [::]); a name on every address it resolves to
(localhost: 127.0.0.1 and ::1). Port 0 picks a free port; the address
actually bound is printed. Every port is bound before connecting: one in
use fails at once.

-D [bind:]port runs a SOCKS5 proxy (CONNECT, no authentication) whose
connections go out from the host, names resolved there (SOCKS4 clients
get SOCKS4's rejection). Its bind address is as -L's.

-R [bind:]port:host:hostport makes the host listen on bind:port on its
machine (127.0.0.1 when no bind is given; another address only where its
tunnels.allow_non_loopback allows, ports below 1024 only where
tunnels.allow_privileged_ports does) and forwards every connection
accepted there to host:hostport dialled from this machine, as ssh -R.
Port 0 lets the host pick; the address it listens on is printed. A
refusal (policy, a limit, the port in use) is printed and exits 1. While
the connection to the host is lost the host keeps listening, and the
connections it accepts wait for it to resume (bounded by the host's
tunnels.max_waiting and wait_timeout).

Both may be given several times; everything shares one connection to the
host. Ctrl-C resets every forwarded connection still open (a download cut
short never looks complete) and exits 0; before it has connected, 130.

A lost connection to the host is resumed by itself: forwarded connections
carry on, every byte once each way; new ones wait (64 at most, 30 s each)
and open once resumed; those the host could not keep are reset. When the
host's address refuses connections (its daemon was killed or crashed,
with the state to resume), the forwarded connections are reset at once,
new ones are reset until the host answers again, and then a new session
starts on the same ports.

Exit status: 0 after Ctrl-C, SIGTERM or SIGHUP once connected (130, 143
or 129 while still connecting); 1 when a local port cannot be bound (in
use, say: nothing is dialled then); 255 when the connection cannot be
made, or is lost and cannot be resumed; 2 for a usage error.`,
		Example: `  sidecar forward wss://127.0.0.1:4433/ahp -L 8080:127.0.0.1:3000 -L 127.0.0.1:5433:db:5432
  sidecar forward wss://127.0.0.1:4433/ahp -D 1080
  sidecar forward wss://127.0.0.1:4433/ahp -R 9000:localhost:3000`,
		Args: forwardArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return forward(&cf, args[0], locals, dynamics, remotes)
		},
	}
	cf.register(cmd)
	// forward refuses --ordinary (TCP channels need windowed delivery):
	// not worth a line in its help.
	_ = cmd.Flags().MarkHidden("ordinary")
	cmd.Flags().StringArrayVarP(&locals, "local", "L", nil, "forward [bind:]port to host:hostport on the host's side (repeatable)")
	cmd.Flags().StringArrayVarP(&dynamics, "dynamic", "D", nil, "SOCKS5 proxy on [bind:]port, connecting from the host (repeatable)")
	cmd.Flags().StringArrayVarP(&remotes, "remote", "R", nil, "listen on [bind:]port on the host and forward to host:hostport from here (repeatable)")
	return cmd
}

// forwardArgs takes exactly one argument, the URL (with --via, connFlags
// puts "stdio:" in for a missing one), and says in words what is wrong
// otherwise: a forwarding typed without -L, say, is named.
func forwardArgs(_ *cobra.Command, args []string) error {
	switch len(args) {
	case 0:
		return errors.New("missing URL: sidecar forward URL -L [bind:]port:host:hostport or -D [bind:]port")
	case 1:
		return nil
	case 2:
		return fmt.Errorf("unexpected argument %q: forward takes one URL; give forwardings with -L/-D", args[1])
	}
	quoted := make([]string, len(args)-1)
	for i, a := range args[1:] {
		quoted[i] = strconv.Quote(a)
	}
	return fmt.Errorf("unexpected arguments %s: forward takes one URL; give forwardings with -L/-D", strings.Join(quoted, " "))
}

// forwardGCPercent is the GOGC a forward runs with unless $GOGC is set
// (setGCPercent). Its heap is pooled buffers and the windows' data in
// flight, and it allocates little per byte moved (about 25 MB over 3 GiB
// of bulk transfer: some 30 collections, 0% of its CPU), so collecting
// after 25% of growth rather than Go's 100% costs no throughput, while it
// lowers the smallest heap Go lets grow before it collects from 4 MB to
// 1 MB: the floor that most of a forward's memory for a handful of stalled
// connections was.
const forwardGCPercent = 25

func forward(cf *connFlags, url string, locals, dynamics, remotes []string) error {
	if len(locals) == 0 && len(dynamics) == 0 && len(remotes) == 0 {
		return &exitError{code: 2, err: errors.New("nothing to forward: give -L [bind:]port:host:hostport, -D [bind:]port or -R [bind:]port:host:hostport")}
	}
	if cf.ordinary {
		return &exitError{code: 2, err: errors.New("--ordinary cannot forward: TCP channels need windowed delivery")}
	}
	setGCPercent(forwardGCPercent)
	var lfs []localForward
	var binds, given []string // every -L and -D, for sameLocalPort
	for _, s := range locals {
		f, err := parseLocal(s)
		if err != nil {
			return &exitError{code: 2, err: err}
		}
		lfs = append(lfs, f)
		binds, given = append(binds, f.bind), append(given, "-L "+f.given)
	}
	for _, s := range dynamics {
		d, g, err := parseDynamic(s)
		if err != nil {
			return &exitError{code: 2, err: err}
		}
		binds, given = append(binds, d), append(given, "-D "+g)
	}
	var rfs []remoteForward
	for _, s := range remotes {
		f, err := parseRemote(s)
		if err != nil {
			return &exitError{code: 2, err: err}
		}
		rfs = append(rfs, f)
	}
	if msg := sameLocalPort(binds, given); msg != "" {
		return &exitError{code: 2, err: errors.New(msg)}
	}
	ctx, caught, stop := signalContext(os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	// Listen before dialing: a local address in use fails at once, without
	// a connection. Until the accept loops start (once connected), the
	// kernel's backlog holds the connections that arrive early.
	var bound []boundListener
	closeListeners := func() {
		for _, b := range bound {
			_ = b.l.Close()
		}
	}
	defer closeListeners()       // a failed dial; closing twice is harmless
	for i, bind := range binds { // the -L first (lfs[i]), then the -D
		var local *localForward
		if i < len(lfs) {
			local = &lfs[i]
		}
		ls, err := listenBind(ctx, bind, net.DefaultResolver.LookupIPAddr, listenTCP)
		if err != nil {
			return listenFailed(err, caught(), bound, given[i])
		}
		for _, l := range ls {
			bound = append(bound, boundListener{l: l, local: local, given: given[i]})
		}
	}
	// A daemon that shuts down is most often restarting: reconnect, and
	// start a new session once it answers (it keeps nothing of ours).
	cf.reconnectAfterShutdown = true
	// A daemon whose address refuses connections is gone (killed,
	// crashed) with our state: reset the local connections at once
	// rather than keep them waiting for a resume that cannot come.
	cf.giveUpWhenRefused = true
	cf.onReconnect = func(st client.ReconnectStatus) {
		if st.State == client.Connecting {
			return // a log, not a status line: the attempt is announced once
		}
		if l := reconnectLine(st); l != "" {
			// Forwarded connections open at the cut resume (or are
			// reset if the host could not keep them); new ones wait
			// and open once resumed.
			fmt.Fprintf(os.Stderr, "sidecar: %s\n", l)
		}
		if st.State == client.Resumed && len(st.Missing) > 0 {
			fmt.Fprintf(os.Stderr, "sidecar: %d forwarded connection(s) could not be resumed: reset\n", len(st.Missing))
		}
	}
	conn, err := cf.dial(ctx, url)
	if err != nil {
		return dialFailed(err, cf.dialSignal(ctx, err, caught))
	}
	if conn.Initialized().TCPConnections == nil {
		_ = conn.Close()
		return &exitError{code: 255, err: fmt.Errorf("%s does not offer TCP forwarding (no tcpConnections in its capabilities)", url)}
	}
	if cf.via != "" {
		fmt.Fprintf(os.Stderr, "sidecar: connected through %q\n", cf.via)
	} else if tr := conn.Transport(); tr != "" {
		fmt.Fprintf(os.Stderr, "sidecar: connected to %s over %s\n", url, tr)
	}
	if cf.compress {
		fmt.Fprintf(os.Stderr, "sidecar: %s\n", compressNotice(conn.Compressed(), conn.Transport()))
	}
	// The listeners outlive a session: when the host no longer knows ours
	// (it restarted, or our state's grace ended), forward starts a new one
	// and the same ports go on (handoff).
	handoffs := make([]*handoff, len(bound))
	for i, b := range bound {
		handoffs[i] = newHandoff(b.l)
		if f := b.local; f != nil {
			fmt.Fprintf(os.Stderr, "sidecar: forwarding %s -> %s\n", b.l.Addr(), net.JoinHostPort(f.host, strconv.Itoa(f.hostPort)))
		} else {
			fmt.Fprintf(os.Stderr, "sidecar: SOCKS5 proxy on %s\n", b.l.Addr())
		}
	}
	defer func() {
		for _, h := range handoffs {
			_ = h.Close()
		}
	}()
	for first := true; ; first = false {
		fw := client.NewForwarder(conn, client.ForwarderOptions{Log: prefixWriter{w: os.Stderr, prefix: "sidecar: "}})
		for i, b := range bound {
			// The forwarder owns the session's listener; closing it
			// leaves the port open for the next session.
			if f := b.local; f != nil {
				_ = fw.ServeLocal(handoffs[i].Listen(), f.host, f.hostPort)
			} else {
				_ = fw.ServeSOCKS(handoffs[i].Listen())
			}
		}
		sctx, endSession := context.WithCancel(ctx)
		retries, err := serveSession(sctx, conn, fw, bound, rfs, first)
		if err != nil {
			endSession()
			fw.Close()
			_ = conn.Close()
			return err
		}
		result, ended := runUntil(ctx, conn, fw)
		endSession()
		retries.Wait()
		if !newSessionAfter(ended) || cf.via != "" {
			return result
		}
		if errors.Is(ended, client.ErrHostGone) {
			fmt.Fprintf(os.Stderr, "sidecar: starting a new session with %s once it answers; the ports stay open, and connections to them are reset until then\n", url)
		} else {
			fmt.Fprintf(os.Stderr, "sidecar: starting a new session with %s; the ports stay open\n", url)
		}
		old := conn
		conn, err = newSession(ctx, cf, url, handoffs, errors.Is(ended, client.ErrHostGone))
		if err != nil {
			return dialFailed(err, cf.dialSignal(ctx, err, caught))
		}
		fmt.Fprintf(os.Stderr, "sidecar: new session with %s\n", url)
		if errors.Is(ended, client.ErrHostGone) {
			releaseOld(ctx, old)
		}
	}
}

// releaseOld ends the session the host may still keep for old, given up
// on when the host's address refused connections: a relay in front of a
// live daemon (an ssh tunnel, kubectl port-forward) refuses while it
// restarts, and the daemon would otherwise hold the destination
// connections of what forward already reset for the whole grace. A
// daemon that restarted holds nothing, and says so.
func releaseOld(ctx context.Context, old *client.Conn) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	held, err := old.Release(ctx)
	switch {
	case err != nil:
		fmt.Fprintf(os.Stderr, "sidecar: could not release the previous session (the host ends it when its grace does): %v\n", err)
	case held:
		fmt.Fprintf(os.Stderr, "sidecar: the host had kept the previous session (something in front of it refused meanwhile, not the daemon): released it, its destination connections reset\n")
	}
}

// newSessionAfter reports whether a connection that ended with err is
// worth a new session: the host answered, but keeps nothing of ours (it
// restarted, our state's grace ended, or it refused to resume it), or its
// address refuses connections (its daemon is gone, and our state with it).
func newSessionAfter(err error) bool {
	return errors.Is(err, client.ErrResumeExpired) || errors.Is(err, client.ErrResumeRefused) || errors.Is(err, client.ErrGraceEnded) ||
		errors.Is(err, client.ErrHostGone)
}

// runUntil forwards until ctx ends (a signal: exit 0) or the connection
// to the host does (exit 255, its reason printed first; ended is
// conn.Err()), then shuts down: the forwarder is closed (its listeners,
// every local connection still open reset and counted on a line after the
// reason), the connection closed, and the handlers given forwardDrain to
// end.
func runUntil(ctx context.Context, conn *client.Conn, fw *client.Forwarder) (result, ended error) {
	select {
	case <-ctx.Done():
	case <-conn.Done():
		// Here, not through main: before the count of connections reset.
		// The host's words (a close reason) are escaped as every peer's
		// text is (printable).
		ended = conn.Err()
		fmt.Fprintf(os.Stderr, "sidecar: %s\n", printable(fmt.Sprint(ended)))
		result = &exitError{code: 255}
	}
	if n := fw.Close(); n > 0 {
		fmt.Fprintf(os.Stderr, "sidecar: reset %d forwarded connection(s) still open\n", n)
	}
	// Ending the connection ends every channel at once (the host resets
	// their sockets).
	_ = conn.Close()
	dctx, cancel := context.WithTimeout(context.Background(), forwardDrain)
	defer cancel()
	_ = fw.Wait(dctx)
	return result, ended
}

// prefixWriter writes each Write (a line of the forwarder's Log) after
// prefix, in one Write.
type prefixWriter struct {
	w      io.Writer
	prefix string
}

func (p prefixWriter) Write(b []byte) (int, error) {
	if _, err := p.w.Write(append([]byte(p.prefix), b...)); err != nil {
		return 0, err
	}
	return len(b), nil
}

// compressNotice says whether --compress took effect on a connection
// over tr (Conn.Transport) that compressed or not.
func compressNotice(compressed bool, tr string) string {
	switch {
	case compressed:
		return "compression on (WebSocket permessage-deflate)"
	case tr == "WebTransport":
		return "--compress has no effect over WebTransport (it compresses WebSocket messages only; --transport websocket or ahp uses it)"
	default:
		return "compression off: the host did not accept permessage-deflate"
	}
}
