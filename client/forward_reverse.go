package client

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sidecar-dev/sidecar/rpc"
)

// reverseAcceptors is how many tunnel/accept requests a Forwarder keeps
// waiting, for all its reverse forwards together (the host allows 4 per
// connection): one is answered while the other waits, so a burst of
// connections costs a round trip each, not two.
const reverseAcceptors = 2

// DefaultReverseDialTimeout bounds the dial of a reverse forward's
// destination from this machine.
const DefaultReverseDialTimeout = 10 * time.Second

// reverse is the Forwarder's reverse forwards (ServeRemote).
type reverse struct {
	once  sync.Once
	mu    sync.Mutex
	dests map[string]string // resource -> host:port dialled here
	names map[string]string // resource -> the address the host listens on, for messages
}

// ServeRemote asks the host to listen on bind (its host an IP address or
// localhost, port 0 for any) and forwards each connection accepted there
// to dest (host:port) dialled from this machine, as ssh -R does: a
// clientToHost entry on the tunnels channel tun, whose lifecycle the
// host reports. It returns the entry's resource and the address the host
// listens on, or the host's refusal (*TunnelRejectedError: a bind
// address or port its policy refuses, a limit). Each connection is a TCP
// channel with everything DialTCP's has (a window, fairness, resume
// across a lost link); one whose destination cannot be dialled here is
// reset on the host, with a line in ForwarderOptions.Log. While the link
// is down the host keeps the listener, and the connections it accepts
// meanwhile wait (the host bounds them) until it resumes.
func (fw *Forwarder) ServeRemote(ctx context.Context, tun *Tunnels, bind rpc.TunnelAddress, dest string) (resource string, listening rpc.TunnelAddress, err error) {
	host, portText, err := net.SplitHostPort(dest)
	if err != nil {
		return "", listening, err
	}
	port, err := strconv.Atoi(portText)
	if err != nil || port < 1 || port > 65535 {
		return "", listening, errors.New("client: destination port must be from 1 to 65535")
	}
	resource = rpc.TunnelScheme + "/" + randomID()
	me := fw.conn.ClientID()
	p := rpc.TunnelPort{Resource: resource, Direction: rpc.TunnelClientToHost, RequestedLocalAddress: bind,
		RequestedRemoteAddress: rpc.TunnelAddress{Host: host, Port: port},
		RequestedBy:            rpc.TunnelRequester{Kind: "client", ClientID: me}, CreatedAt: nowISO(),
		Client: &rpc.TunnelClient{ClientID: me, State: rpc.TunnelClientState{Status: rpc.TunnelAccepted}}}
	fw.rev.mu.Lock()
	if fw.rev.dests == nil {
		fw.rev.dests = map[string]string{}
	}
	fw.rev.dests[resource] = dest
	fw.rev.mu.Unlock()
	if err := tun.Dispatch(ctx, rpc.TunnelAction{Type: rpc.ActionTunnelPortSet, Port: &p}); err != nil {
		fw.rev.mu.Lock()
		delete(fw.rev.dests, resource)
		fw.rev.mu.Unlock()
		return "", listening, err
	}
	st, err := tun.WaitState(ctx, resource, func(s rpc.TunnelClientState) bool {
		return s.Status == rpc.TunnelReady && s.LocalAddress != nil
	})
	if err != nil {
		return "", listening, err
	}
	fw.rev.mu.Lock()
	if fw.rev.names == nil {
		fw.rev.names = map[string]string{}
	}
	fw.rev.names[resource] = net.JoinHostPort(st.LocalAddress.Host, strconv.Itoa(st.LocalAddress.Port))
	fw.rev.mu.Unlock()
	fw.rev.once.Do(func() {
		for range reverseAcceptors {
			fw.wg.Add(1)
			go fw.acceptRemote()
		}
	})
	return resource, *st.LocalAddress, nil
}

// acceptRemote asks tunnel/accept for the next connection of any of the
// Forwarder's reverse forwards, and forwards it, until the Forwarder is
// closed or the Conn has ended.
func (fw *Forwarder) acceptRemote() {
	defer fw.wg.Done()
	for {
		var res rpc.TunnelAcceptResult
		err := fw.conn.Call(fw.ctx, rpc.MethodTunnelAccept, rpc.TunnelAcceptParams{}, &res)
		if err != nil {
			switch {
			case fw.ending() || fw.conn.Err() != nil:
				return
			case errors.Is(err, ErrConnectionLost):
				continue // Call waits for the Conn to resume
			}
			fw.log("reverse forwards: %s", fw.openMessage(err))
			var re *rpc.Error
			if errors.As(err, &re) && re.Code == rpc.CodeNotFound {
				return // no listener left
			}
			select { // do not spin on a host that keeps failing
			case <-time.After(time.Second):
			case <-fw.done:
				return
			}
			continue
		}
		fw.wg.Add(1)
		go fw.serveAccepted(res)
	}
}

// serveAccepted forwards one connection the host accepted: its channel
// first (so a failed dial can reset it), then the destination here.
func (fw *Forwarder) serveAccepted(res rpc.TunnelAcceptResult) {
	defer fw.wg.Done()
	fw.rev.mu.Lock()
	dest := fw.rev.dests[res.Resource]
	fw.rev.mu.Unlock()
	ctx, cancel := context.WithTimeout(fw.ctx, fw.opts.OpenTimeout)
	defer cancel()
	var remote *TCPConn
	for {
		var err error
		remote, err = fw.conn.AcceptTCP(ctx, res.Channel, res.Peer)
		if err == nil {
			break
		}
		if errors.Is(err, ErrConnectionLost) && ctx.Err() == nil && fw.conn.Err() == nil {
			continue // the host hands it out again once resumed
		}
		if !fw.ending() {
			fw.rev.mu.Lock()
			name := fw.rev.names[res.Resource]
			fw.rev.mu.Unlock()
			if name == "" {
				name = res.Resource
			}
			msg := fw.openMessage(err)
			if strings.Contains(msg, res.Channel) {
				// The host's words name its internal channel: say what happened.
				msg = "the host no longer had the connection (it waited too long, or the listener closed): reset"
			}
			fw.logOpenFailed("-R %s -> %s: open failed: %s", name, printable(dest), msg)
		}
		return
	}
	if !fw.trackChannel(remote) {
		remote.Reset()
		return
	}
	defer fw.untrackChannel(remote)
	if dest == "" {
		fw.log("-R %s: a connection for an unknown forward: reset", res.Resource)
		remote.Reset()
		return
	}
	d := net.Dialer{Timeout: DefaultReverseDialTimeout}
	c, err := d.DialContext(ctx, "tcp", dest)
	if err != nil {
		fw.log("-R %s -> %s: cannot connect: %s; the connection is reset", res.Resource, printable(dest), printable(err.Error()))
		remote.Reset()
		return
	}
	local := c.(*net.TCPConn)
	armReset(local)
	fw.track(local, true)
	wasReset := pipe(local, remote)
	fw.release(local, wasReset)
}
