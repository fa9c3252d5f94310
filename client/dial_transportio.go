package client

import (
	"bytes"
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

// webTransportBudget bounds the WebTransport attempt of --transport auto: a
// path that drops UDP fails only by timing out, and the fallback must not
// wait for the whole connect timeout.
const webTransportBudget = 3 * time.Second

// dialTransportIO connects to an https:// URL with transport-io. auto tries
// WebTransport first and falls back to the WebSocket mapping when the QUIC
// path fails; a WT_UNAUTHORIZED refusal is final and never retried.
func dialTransportIO(ctx context.Context, u *url.URL, mode string, tlsConf *tls.Config, header http.Header, hc *http.Client, compress bool) (transport.MessageConn, error) {
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
	switch mode {
	case TransportWebTransport:
		mc, err := transport.DialWebTransport(ctx, u.String(), header, tlsConf.Clone())
		if err != nil && errors.Is(err, context.DeadlineExceeded) {
			return nil, noQUICAnswer(u) // the --connect-timeout, not quic-go's
		}
		return mc, explainTIO(u, err)
	case TransportWebSocket:
		mc, err := transport.DialTIOWebSocket(ctx, wsURL.String(), header, hc, compress)
		return mc, explainTIO(u, err)
	case TransportAuto, "":
		budget := webTransportBudget
		if dl, ok := ctx.Deadline(); ok {
			// Leave the WebSocket fallback at least half of a short
			// --connect-timeout.
			budget = min(budget, time.Until(dl)/2)
		}
		wctx, cancel := context.WithTimeout(ctx, budget)
		refused := probeRefused(wctx, cancel, u)
		mc, err := transport.DialWebTransport(wctx, u.String(), header, tlsConf.Clone())
		cancel()
		if perr := <-refused; perr != nil && err != nil {
			return nil, explainTIO(u, perr) // nothing listens: do not wait for QUIC
		}
		if err == nil || transport.IsUnauthorized(err) || ctx.Err() != nil {
			return mc, explainTIO(u, err)
		}
		mc, werr := transport.DialTIOWebSocket(ctx, wsURL.String(), header, hc, compress)
		if werr != nil && errors.Is(werr, context.DeadlineExceeded) {
			return nil, fmt.Errorf("%s did not answer in time, neither over WebTransport (QUIC, UDP port %s) nor over WebSocket (TCP): is it a sidecar, and is it overloaded?", u.Host, portOf(u))
		}
		if werr != nil && strings.Contains(werr.Error(), "certificate pin mismatch") && strings.Contains(err.Error(), "certificate pin mismatch") {
			return nil, explainTIO(u, werr) // the same refusal twice: say it once
		}
		if werr != nil {
			first := err.Error()
			if transport.IsNoQUICAnswer(err) || errors.Is(err, context.DeadlineExceeded) {
				first = "no answer over QUIC, UDP port " + portOf(u)
			}
			return nil, explainTIO(u, fmt.Errorf("%w (WebTransport failed first: %s)", werr, first))
		}
		return mc, nil
	}
	return nil, fmt.Errorf("unknown --transport %q: want auto, webtransport, websocket or ahp", mode)
}

// probeRefused connects to u's TCP port while the WebTransport attempt
// runs under ctx: QUIC gets no answer from a port nothing listens on and
// would wait out webTransportBudget, but TCP is refused at once (the
// sidecar serves WebSocket on TCP and WebTransport on UDP at the same
// port). A refusal cancels the attempt (cancel) and is sent on the
// returned channel; anything else (connected, timed out, canceled) sends
// nil and leaves the attempt alone. The channel always gets exactly one
// value, once the probe has ended: receiving it waits for the goroutine.
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

func explainTIO(u *url.URL, err error) error {
	if err == nil {
		return nil
	}
	if transport.IsUnauthorized(err) {
		return &refusalError{msg: fmt.Sprintf("%s refused the token (WT_UNAUTHORIZED: %s): check --token or SIDECAR_TOKEN", u.Host, transport.CloseReason(err)), err: err}
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
