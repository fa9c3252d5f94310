package client

import (
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sidecar-dev/sidecar/transport"
)

// Transports accepted by Options.Transport.
const (
	TransportAuto         = "auto"         // https://: WebTransport, then the WebSocket mapping
	TransportWebTransport = "webtransport" // https://: WebTransport only
	TransportWebSocket    = "websocket"    // https://: the transport-io WebSocket mapping only
	TransportAHP          = "ahp"          // plain AHP over wss://HOST:PORT/ahp
)

// Happy eyeballs (RFC 8305's idea) for --transport auto: WebTransport and
// the WebSocket mapping are dialled at once, and the first whose
// transport-io handshake completes is used, WebTransport preferred.
const (
	// webTransportGrace is how long auto still waits for WebTransport
	// once the WebSocket mapping's handshake has completed: on a path that
	// carries UDP both complete within a round trip or two of each other,
	// and WebTransport is worth that (no head-of-line blocking between
	// channels, datagrams); on one that drops UDP it is all the wait costs.
	webTransportGrace = 150 * time.Millisecond
	// attemptDelay is how long a remembered transport is tried alone
	// before the other one starts too (RFC 8305 §5's Connection Attempt
	// Delay): long enough for a loopback or LAN handshake to win without
	// a second attempt, short enough that a remembered transport that no
	// longer answers (UDP blocked since) costs a quarter second.
	attemptDelay = 250 * time.Millisecond
	// webTransportAfterWebSocket bounds how long WebTransport is still
	// waited for once the WebSocket mapping has failed (an HTTP status, a
	// TLS refusal: the host answered over TCP, and would over QUIC within
	// a round trip or two): on a path that drops UDP, QUIC only times
	// out, and the WebSocket error is the one to report without waiting
	// for the whole --connect-timeout. A handshake and its CONNECT take
	// two round trips: this covers round trips up to 400 ms or so.
	webTransportAfterWebSocket = time.Second
)

// dialTransportIO connects to an https:// URL with transport-io. auto
// races WebTransport and the WebSocket mapping (dialAuto); a WT_UNAUTHORIZED
// refusal is final and never retried.
func dialTransportIO(ctx context.Context, u *url.URL, mode string, tlsConf *tls.Config, header http.Header, hc *http.Client, compress bool, mem *transportMemory) (transport.MessageConn, error) {
	wsURL := *u
	wsURL.Scheme = "wss"
	if u.Scheme == "http" {
		wsURL.Scheme = "ws"
	}
	if u.Scheme == "http" && (mode == TransportAuto || mode == "") {
		// No TLS asked for, and WebTransport has it always: only the
		// WebSocket mapping, in plain text.
		mode = TransportWebSocket
	}
	dialWT := func(ctx context.Context) (transport.MessageConn, error) {
		return transport.DialWebTransport(ctx, u.String(), header, tlsConf.Clone())
	}
	dialWS := func(ctx context.Context) (transport.MessageConn, error) {
		return transport.DialTIOWebSocket(ctx, wsURL.String(), header, hc, compress)
	}
	switch mode {
	case TransportWebTransport:
		wctx, cancel := context.WithCancel(ctx)
		refused := probeRefused(wctx, cancel, u)
		mc, err := dialWT(wctx)
		cancel()
		if perr := <-refused; perr != nil && err != nil {
			return nil, explainTIO(u, perr) // nothing listens: do not wait for QUIC
		}
		if err != nil && errors.Is(err, context.DeadlineExceeded) {
			return nil, noQUICAnswer(u) // the --connect-timeout, not quic-go's
		}
		return mc, explainTIO(u, err)
	case TransportWebSocket:
		mc, err := dialWS(ctx)
		return mc, explainTIO(u, err)
	case TransportAuto, "":
		return dialAuto(ctx, u, dialWT, dialWS, mem)
	}
	return nil, fmt.Errorf("unknown --transport %q: want auto, webtransport, websocket or ahp", mode)
}

// originKey is what the transport memory remembers u under: scheme,
// host, port and the daemon's base path (u's path without TIOPath).
func originKey(u *url.URL) string {
	return u.Scheme + "://" + strings.ToLower(net.JoinHostPort(u.Hostname(), portOf(u))) + strings.TrimSuffix(u.Path, transport.TIOPath)
}

// attempt is the outcome of one transport's dial in dialAuto.
type attempt struct {
	transport string // TransportWebTransport or TransportWebSocket
	mc        transport.MessageConn
	err       error
}

// dialAuto races WebTransport (wt) and the WebSocket mapping (ws) to u:
// both start at once, or the transport mem remembers for u's origin
// first and the other attemptDelay later (or as soon as the first fails).
// The first handshake to complete wins, except that a WebSocket one waits
// webTransportGrace for WebTransport's. The loser is canceled, or closed
// (1000) when its handshake completed too, and waited for: nothing of it
// outlives the call. The winner is remembered when the race chose it.
//
// A refused token ends the race at once (it is the same token on both),
// and so does a refused TCP connection (nothing listens: QUIC would only
// time out); once the WebSocket mapping has failed otherwise, WebTransport
// gets webTransportAfterWebSocket more. When both fail, the error says why
// each did.
func dialAuto(ctx context.Context, u *url.URL, wt, ws func(context.Context) (transport.MessageConn, error), mem *transportMemory) (transport.MessageConn, error) {
	remembered := mem.lookup(originKey(u), time.Now())
	first, second := TransportWebTransport, TransportWebSocket
	if remembered == TransportWebSocket {
		first, second = second, first
	}
	dials := map[string]func(context.Context) (transport.MessageConn, error){TransportWebTransport: wt, TransportWebSocket: ws}
	results := make(chan attempt, 2)
	cancels := map[string]context.CancelFunc{}
	running := 0
	startAttempt := func(kind string) {
		actx, cancel := context.WithCancel(ctx)
		cancels[kind] = cancel
		running++
		go func() {
			mc, err := dials[kind](actx)
			results <- attempt{kind, mc, err}
		}()
	}
	startAttempt(first)
	var secondAt <-chan time.Time // nil once the second has started
	if remembered == "" {
		startAttempt(second)
	} else {
		t := time.NewTimer(attemptDelay)
		defer t.Stop()
		secondAt = t.C
	}
	var (
		winner    *attempt
		wsWaiting *attempt         // a WebSocket that completed, in its grace
		graceEnd  <-chan time.Time // while wsWaiting
		wtGiveUp  <-chan time.Time // once the WebSocket mapping failed
		errs      = map[string]error{}
		final     error // ends the race: a refused token, nothing listening
	)
	for winner == nil && final == nil && (running > 0 || secondAt != nil) {
		select {
		case <-secondAt:
			secondAt = nil
			startAttempt(second)
		case r := <-results:
			running--
			switch {
			case r.err != nil:
				errs[r.transport] = r.err
				switch {
				case transport.IsUnauthorized(r.err) || Undecided(r.err) || r.transport == TransportWebSocket && errors.Is(r.err, syscall.ECONNREFUSED):
					// The same token before the same authenticator: the
					// other transport gets the same answer.
					final = r.err
				case wsWaiting != nil:
					winner = wsWaiting // WebTransport failed in the grace
				default:
					if secondAt != nil {
						secondAt = nil // the first failed: no point waiting
						startAttempt(second)
					}
					if r.transport == TransportWebSocket && wtGiveUp == nil {
						t := time.NewTimer(webTransportAfterWebSocket)
						defer t.Stop()
						wtGiveUp = t.C
					}
				}
			case r.transport == TransportWebTransport:
				winner = &r
			case cancels[TransportWebTransport] == nil || errs[TransportWebTransport] != nil:
				winner = &r // WebTransport not started (or failed): nothing to wait for
			default:
				wsWaiting = &r
				t := time.NewTimer(webTransportGrace)
				defer t.Stop()
				graceEnd = t.C
			}
		case <-graceEnd:
			winner = wsWaiting
		case <-wtGiveUp:
			// WebTransport is running: the WebSocket failed while it was,
			// or it started when the WebSocket failed. Its result follows,
			// canceled.
			cancels[TransportWebTransport]()
		case <-ctx.Done():
			final = ctx.Err()
		}
	}
	// Cancel and wait for the others: a handshake that completed anyway
	// is closed, so the host drops it at once.
	for kind, cancel := range cancels {
		if winner == nil || kind != winner.transport {
			cancel()
		}
	}
	if wsWaiting != nil && wsWaiting != winner {
		_ = wsWaiting.mc.Close(transport.CloseNormal, "another transport won")
	}
	for ; running > 0; running-- {
		r := <-results
		if r.err == nil {
			_ = r.mc.Close(transport.CloseNormal, "another transport won")
		} else if _, ok := errs[r.transport]; !ok {
			errs[r.transport] = r.err
		}
	}
	if winner != nil {
		defer cancels[winner.transport]()
		if winner.transport != remembered {
			_ = mem.remember(originKey(u), winner.transport, time.Now())
		}
		return winner.mc, nil
	}
	return nil, autoError(ctx, u, final, errs)
}

// autoError words the failure of dialAuto: final when one ended the
// race, else why each transport failed.
func autoError(ctx context.Context, u *url.URL, final error, errs map[string]error) error {
	if final != nil && !errors.Is(final, context.DeadlineExceeded) && !errors.Is(final, context.Canceled) {
		return explainTIO(u, final)
	}
	werr, wtErr := errs[TransportWebSocket], errs[TransportWebTransport]
	timedOut := func(err error) bool {
		return err == nil || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) || transport.IsNoQUICAnswer(err)
	}
	switch {
	case ctx.Err() != nil && timedOut(werr) && timedOut(wtErr):
		return fmt.Errorf("%s did not answer in time, neither over WebTransport (QUIC, UDP port %s) nor over WebSocket (TCP): is it a sidecar, and is it overloaded?", u.Host, portOf(u))
	case werr == nil:
		return explainTIO(u, cmp.Or(wtErr, final))
	case wtErr == nil:
		return explainTIO(u, werr)
	case strings.Contains(werr.Error(), "certificate pin mismatch") && strings.Contains(wtErr.Error(), "certificate pin mismatch"):
		return explainTIO(u, werr) // the same refusal twice: say it once
	}
	var he *transport.HTTPError
	if errors.As(werr, &he) && errors.As(wtErr, &he) {
		return explainTIO(u, werr) // both answered the same HTTP status: say it once
	}
	first := wtErr.Error()
	if timedOut(wtErr) {
		first = "no answer over QUIC, UDP port " + portOf(u)
	}
	return explainTIO(u, fmt.Errorf("%w (WebTransport failed too: %s)", werr, first))
}

func explainTIO(u *url.URL, err error) error {
	if err == nil {
		return nil
	}
	if transport.IsUnauthorized(err) {
		return &refusalError{msg: fmt.Sprintf("%s refused the token (WT_UNAUTHORIZED: %s): check --token, --token-file or SIDECAR_TOKEN", u.Host, transport.CloseReason(err)), err: err}
	}
	if undecidedSession(err) {
		// Still the session's close to errors.As (Undecided: worth
		// another try).
		return &wordedError{msg: fmt.Sprintf("%s could not decide on the credential (WT_NO_ERROR: authorize failed): its identity provider may be unreachable", u.Host), err: err}
	}
	var ce *transport.TIOCloseError
	if errors.As(err, &ce) {
		return fmt.Errorf("%s closed the transport-io session: %v", u.Host, ce.SessionError)
	}
	if transport.IsNoQUICAnswer(err) {
		return noQUICAnswer(u)
	}
	return explainDial(u, err)
}

// noQUICAnswer is the error of a WebTransport dial that got no answer.
func noQUICAnswer(u *url.URL) error {
	return fmt.Errorf("%s did not answer over WebTransport (QUIC, UDP port %s) in time: is sidecar serve running there, and does the path let UDP through? (--transport websocket uses TCP)", u.Host, portOf(u))
}

// portOf is u's port, by default 443 (80 for http://).
func portOf(u *url.URL) string {
	if p := u.Port(); p != "" {
		return p
	}
	if u.Scheme == "http" {
		return "80"
	}
	return "443"
}

// dialVia starts command (sh -c) and speaks transport-io over its stdin and
// stdout: `--via 'docker exec -i CONTAINER sidecar stdio'` (or kubectl, ssh)
// needs no port at all. The command's stderr is ours. exited is closed
// once the command has ended, with how it ended (ProcessState.String(),
// "exit status 1") in *how.
func dialVia(ctx context.Context, command string) (mc transport.MessageConn, v *viaCmd, err error) {
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, nil, err
	}
	cmd := exec.Command("sh", "-c", command)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, os.Stderr
	if err := cmd.Start(); err != nil {
		inR.Close()
		inW.Close()
		outR.Close()
		outW.Close()
		return nil, nil, fmt.Errorf("--via: %w", err)
	}
	inR.Close()
	outW.Close()
	done := make(chan struct{})
	var ended string
	go func() { // reap; it exits when its stdin closes
		_ = cmd.Wait()
		if cmd.ProcessState != nil {
			ended = cmd.ProcessState.String() // "exit status 1", "signal: killed"
		}
		close(done)
	}()
	v = &viaCmd{command: command, exited: done, how: &ended, cmd: cmd}
	mc, err = transport.DialStdio(ctx, outR, inW, "via: "+command)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) || strings.Contains(err.Error(), "WT_HANDSHAKE_TIMEOUT") {
			// It runs but says nothing (or nothing we understand).
			v.kill()
			return nil, nil, fmt.Errorf("--via %q: no transport-io handshake in time: is the command `sidecar stdio` (or a shell that runs it)?", command)
		}
		if e := v.ended(); e != nil {
			return nil, nil, e
		}
		v.kill()
		return nil, nil, fmt.Errorf("--via %q: no transport-io session (is the command `sidecar stdio`? see its stderr above): %v", command, err)
	}
	return mc, v, nil
}

// viaExitWait is how long a failed --via dial waits for the command to end,
// to say that it did.
const viaExitWait = time.Second

// viaCmd is a running --via command.
type viaCmd struct {
	command string
	exited  <-chan struct{} // closed once it has ended, with how set
	how     *string         // how it ended: "exit status 1", "signal: killed"
	cmd     *exec.Cmd
}

// waitEnded reports whether the command ends within viaExitWait.
func (v *viaCmd) waitEnded() bool {
	t := time.NewTimer(viaExitWait)
	defer t.Stop()
	select {
	case <-v.exited:
		return true
	case <-t.C:
		return false
	}
}

// ended is the error of a --via session that failed while being set up
// because the command ended (it exits as its stdout closes, or our write
// found its stdin gone): nil when it has not ended within viaExitWait.
func (v *viaCmd) ended() error {
	if !v.waitEnded() {
		return nil
	}
	return fmt.Errorf("--via %q: the command ended (%s) before the session was set up (see its stderr above)", v.command, *v.how)
}

// kill ends the command when we give up on it (a hung `kubectl exec` or
// `ssh` must not outlive the client), with what it started: sh -c forks
// the command rather than exec it under dash. Its reaper collects it. The
// command keeps our process group (an ssh asking for a password reads the
// terminal), so the tree is found through /proc (Linux; elsewhere only
// sh -c is killed).
func (v *viaCmd) kill() {
	for _, pid := range descendants(v.cmd.Process.Pid) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	_ = v.cmd.Process.Kill()
}

// descendants returns the processes below pid (children first), read from
// /proc/*/stat; nil where there is no /proc.
func descendants(pid int) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	children := map[int][]int{}
	for _, e := range ents {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue // gone meanwhile
		}
		// pid (comm) state ppid ...: comm may hold spaces and parens.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 2 {
			continue
		}
		if ppid, err := strconv.Atoi(f[1]); err == nil {
			children[ppid] = append(children[ppid], child)
		}
	}
	var out []int
	for queue := children[pid]; len(queue) > 0; queue = queue[1:] {
		out = append(out, queue[0])
		queue = append(queue, children[queue[0]]...)
	}
	return out
}

// probeRefused connects to u's TCP port while a WebTransport attempt runs
// under ctx: QUIC gets no answer from a port nothing listens on and waits
// out its handshake timeout, but TCP is refused at once (the sidecar
// serves the WebSocket mapping on TCP and WebTransport on UDP at the same
// port), so a killed daemon is told from a silent path (forward's
// Options.GiveUpWhenRefused). A refusal cancels the attempt (cancel) and
// is sent on the returned channel; anything else (connected, timed out,
// canceled) sends nil and leaves the attempt alone. The channel always
// gets exactly one value, once the probe has ended: receiving it waits
// for the goroutine.
func probeRefused(ctx context.Context, cancel context.CancelFunc, u *url.URL) <-chan error {
	addr := net.JoinHostPort(u.Hostname(), portOf(u))
	done := make(chan error, 1)
	go func() {
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			_ = c.Close()
		}
		if errors.Is(err, syscall.ECONNREFUSED) {
			cancel()
			done <- err
			return
		}
		done <- nil
	}()
	return done
}
