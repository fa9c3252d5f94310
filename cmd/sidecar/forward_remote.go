package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"

	"github.com/sidecar-dev/sidecar/client"
	"github.com/sidecar-dev/sidecar/rpc"
)

// remoteForward is one -R.
type remoteForward struct {
	bind  rpc.TunnelAddress // where the host listens
	given string            // the spec as typed, for messages
	dest  string            // host:hostport, dialled here
}

// parseRemote parses -R [bind:]port:host:hostport as -L's spec (IPv6 in
// brackets); no bind is 127.0.0.1 and an empty one or * is 0.0.0.0 (all
// interfaces, which the host refuses unless tunnels.allow_non_loopback).
func parseRemote(spec string) (remoteForward, error) {
	parts, err := splitSpec(spec)
	if err != nil {
		return remoteForward{}, fmt.Errorf("bad -R %q: %v", spec, err)
	}
	f, err := parseLocalParts(parts)
	if err != nil {
		return remoteForward{}, fmt.Errorf("bad -R %q: %v", spec, err)
	}
	host, port, _ := net.SplitHostPort(f.bind)
	if host == anyHost {
		host = "0.0.0.0"
	}
	p, _ := strconv.Atoi(port)
	return remoteForward{bind: rpc.TunnelAddress{Host: host, Port: p}, given: spec,
		dest: net.JoinHostPort(f.host, strconv.Itoa(f.hostPort))}, nil
}

// serveSession lists the session's -L forwards on the host's tunnels
// channel and starts its -R forwards, printing a status line for each; a
// -R the host refuses ends forward with status 1, naming why.
func serveSession(ctx context.Context, conn *client.Conn, fw *client.Forwarder, bound []boundListener, rfs []remoteForward) error {
	if conn.Initialized().Tunnels == nil {
		if len(rfs) > 0 {
			return &exitError{code: 255, err: errors.New("the host does not offer reverse forwarding (no tunnels in its capabilities)")}
		}
		return nil
	}
	tun, err := conn.OpenTunnels(ctx)
	if err != nil {
		if len(rfs) > 0 {
			return &exitError{code: 255, err: fmt.Errorf("cannot open the tunnels channel: %w", err)}
		}
		return nil
	}
	for _, b := range bound {
		f := b.local
		a, ok := b.l.Addr().(*net.TCPAddr)
		if f == nil || !ok {
			continue
		}
		local := rpc.TunnelAddress{Host: a.IP.String(), Port: a.Port}
		if _, err := tun.Announce(ctx, local, rpc.TunnelAddress{Host: f.host, Port: f.hostPort}); err != nil {
			fmt.Fprintf(os.Stderr, "sidecar: -L %s is not listed on the host's tunnels channel: %v\n", b.given, err)
		}
	}
	for _, f := range rfs {
		_, at, err := fw.ServeRemote(ctx, tun, f.bind, f.dest)
		if err != nil {
			var re *client.TunnelRejectedError
			if errors.As(err, &re) {
				return &exitError{code: 1, err: fmt.Errorf("-R %s: %v", f.given, err)}
			}
			return &exitError{code: 255, err: fmt.Errorf("-R %s: %v", f.given, err)}
		}
		fmt.Fprintf(os.Stderr, "sidecar: forwarding %s on the host -> %s\n", net.JoinHostPort(at.Host, strconv.Itoa(at.Port)), f.dest)
	}
	return nil
}
